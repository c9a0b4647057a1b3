// The rlx program end to end: outputs, files and exit codes (0 ok, 2 bad usage or input,
// 3 legalization failure), and never a crash on bad input.
#define BOOST_TEST_MODULE cli
#include <sys/wait.h>

#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/support/cli.hpp"
#include "solvers/sparse/partition.hpp"
#include "core/rng.hpp"
#include "io/hdf5.hpp"
#include "io/npy.hpp"
#include "ir/text.hpp"
#include "runtime/runtime.hpp"

using namespace rlx;
namespace fs = std::filesystem;

namespace {

using rlx::test::slurp;

fs::path scratch() {
  static fs::path dir = rlx::test::scratch_dir("rlx_cli_test_");
  return dir;
}

rlx::test::CliResult rlx_cli(const std::string& args) { return rlx::test::run_cli(RLX_CLI, args, scratch()); }

std::string write_text(const std::string& name, const std::string& text) {
  fs::path p = scratch() / name;
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

const std::string demo = std::string(RLX_DATA) + "/demo.rlx";

using rlx::test::has;

}  // namespace

BOOST_AUTO_TEST_CASE(usage_errors_exit_2) {
  BOOST_TEST(rlx_cli("").code == 2);
  auto r = rlx_cli("frobnicate");
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "unknown command 'frobnicate'"));
  r = rlx_cli("compile " + demo + " --bogus");
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "unknown option --bogus"));
  BOOST_TEST(rlx_cli("compile " + demo + " --device nonesuch").code == 2);
  BOOST_TEST(has(rlx_cli("compile " + demo + " --policy fastest").err, "unknown policy 'fastest'"));
  BOOST_TEST(rlx_cli("compile " + demo + " --emit l9").code == 2);
  BOOST_TEST(has(rlx_cli("compile " + demo + " --deny nosuchop").err, "unknown op 'nosuchop'"));
  BOOST_TEST(rlx_cli("compile").code == 2);
  // A switch in the environment with a value it does not take (docs/runtime.md, "Environment").
  for (const auto& [env, says] : {std::pair<std::string, std::string>{"RLX_NUM_THREADS=abc", "expected a whole number from 1"},
                                  {"RLX_PROFILE=yes", "expected one of 0, 1"},
                                  {"RLX_CPU_SPTRSV=pipe:0", "expected auto, seq, pipe or pipe:B"},
                                  {"RLX_CPU_SPMV_PREFETCH=-1", "expected a whole number from 0 to 65536"}}) {
    r = rlx::test::run_cli(env + " " + RLX_CLI, "solve poisson2d:16 --method pcg --pc ic0 --device cpu", scratch());
    BOOST_TEST(r.code == 2, env);
    BOOST_TEST(has(r.err, env + ": " + says), env << ": " << r.err);
  }
}

// Outputs and inputs that cannot work are bad usage (exit 2) naming the path or option;
// a program too large for memory is refused (exit 5) naming its node; never "internal error".
BOOST_AUTO_TEST_CASE(bad_paths_duplicates_and_impossible_programs_have_their_exit_codes) {
  const std::string prog = write_text("addone.rlx",
                                      "graph @main(%x: f32[2,3]) {\n  %1 = exp(%x) : f32[2,3]\n  return %1\n}\n");
  Tensor x = Tensor::zeros(DType::F32, {2, 3});
  io::write_npy((scratch() / "x.npy").string(), x);
  io::write_npy((scratch() / "x64.npy").string(), Tensor::zeros(DType::F64, {2, 3}));
  const std::string xin = " --input x=" + (scratch() / "x.npy").string();
  write_text("a_file", "not a folder");

  auto r = rlx_cli("run " + prog + xin + " --output " + (scratch() / "a_file").string());
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "a_file: exists and is not a directory"), r.err);
  r = rlx_cli("run " + prog + xin + " --output " + (scratch() / "a_file" / "below").string());
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "cannot create the folder"), r.err);
  r = rlx_cli("solve poisson3d:4 --rtol 1e-1 --rtol 1e-12");
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "option --rtol is given twice"), r.err);
  r = rlx_cli("run " + prog + xin + xin + " --output " + (scratch() / "out").string());
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "--input x= is given twice"), r.err);
  r = rlx_cli("run " + prog + " --input x=" + (scratch() / "x64.npy").string() + " --output " + (scratch() / "out").string());
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "x64.npy: input 'x'"), r.err);
  BOOST_TEST(has(r.err, "must be f32[2,3], the file holds f64[2,3]"), r.err);
  r = rlx_cli("run " + prog + xin + " --output " + (scratch() / "out").string());
  BOOST_TEST(r.code == 0, r.err);

  fs::create_directories(scratch() / "a_dir.mtx");
  r = rlx_cli("gen poisson --dim 2 --n 4 -o " + (scratch() / "a_dir.mtx").string());
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "a_dir.mtx: is a directory"), r.err);

  // 2^40 f32 (4 TiB): no machine of ours has it; the memory plan is refused at compile time.
  const std::string huge = write_text("huge.rlx", "graph @main() {\n  %0 = iota() {shape=[1099511627776], dtype=f32} : f32[1099511627776]\n"
                                                  "  return %0\n}\n");
  r = rlx_cli("run " + huge + " --output " + (scratch() / "out").string());
  BOOST_TEST(r.code == 5, r.err);
  BOOST_TEST(has(r.err, "iota f32[1099511627776] at "), r.err);
  BOOST_TEST(has(r.err, "huge.rlx:2"), r.err);
  BOOST_TEST(!has(r.err, "internal error"), r.err);
}

BOOST_AUTO_TEST_CASE(explain_shows_all_three_routes) {
  auto r = rlx_cli("compile " + demo + " --device cpu --explain");
  BOOST_TEST(r.code == 0);
  BOOST_TEST(has(r.out, "native"));
  BOOST_TEST(has(r.out, "common-ir"));
  BOOST_TEST(has(r.out, "rewritten:complex-as-real-pairs"));
  auto j = nlohmann::json::parse(rlx_cli("compile " + demo + " --device cpu --explain --json").out);
  BOOST_TEST(j["device"] == "cpu");
  BOOST_TEST(j["compile_ready"] == true);
  BOOST_TEST(j["summary"]["native"].get<int>() >= 1);
  BOOST_TEST(j["summary"]["common-ir"].get<int>() >= 1);
  BOOST_TEST(j["summary"]["rewritten"].get<int>() == 1);
}

// Packed weights: a format with a native kernel and one that takes the rewrite.
BOOST_AUTO_TEST_CASE(explain_shows_the_packed_weight_routes) {
  const std::string packed = std::string(RLX_DATA) + "/packed.rlx";
  auto j = nlohmann::json::parse(rlx_cli("compile " + packed + " --device cpu --explain --json").out);
  BOOST_TEST(j["compile_ready"] == true);
  BOOST_TEST_REQUIRE(j["nodes"].size() == 2u);
  BOOST_TEST(j["nodes"][0]["location"] == "blk.0.attn_q.weight");
  BOOST_TEST(j["nodes"][0]["route"] == "native");
  BOOST_TEST(j["nodes"][1]["route"] == "rewritten");
  BOOST_TEST(j["nodes"][1]["rule"] == "dequant-then-matmul");
  j = nlohmann::json::parse(rlx_cli("compile " + packed + " --device reference --explain --json").out);
  BOOST_TEST(j["summary"]["native"] == 2);
}

BOOST_AUTO_TEST_CASE(no_route_exits_3_with_the_report) {
  auto r = rlx_cli("compile " + demo + " --device cpu --deny cumsum --explain");
  BOOST_TEST(r.code == 3);
  BOOST_TEST(has(r.out, "unsupported"));
  BOOST_TEST(has(r.err, "demo.rlx"));
  BOOST_TEST(has(r.err, "cumsum"));
  auto j = nlohmann::json::parse(rlx_cli("compile " + demo + " --device cpu --deny cumsum --json").out);
  BOOST_TEST(j["compile_ready"] == false);
  BOOST_TEST(j["summary"]["unsupported"] == 1);
  // Opting in to host staging makes it compile, and says how many bytes move.
  j = nlohmann::json::parse(
      rlx_cli("compile " + demo + " --device cpu --deny cumsum --policy allow-host --explain --json").out);
  BOOST_TEST(j["compile_ready"] == true);
  BOOST_TEST(j["summary"]["host-staged"] == 1);
}

BOOST_AUTO_TEST_CASE(emit_round_trips_through_files) {
  for (const char* level : {"l1", "l2", "l3"}) {
    auto r = rlx_cli("compile " + demo + " --device cpu --emit " + level);
    BOOST_TEST(r.code == 0, level << ": " << r.err);
    BOOST_TEST(!r.out.empty());
  }
  auto l1 = rlx_cli("compile " + demo + " --emit l1").out;
  auto again = rlx_cli("compile " + write_text("l1.rlx", l1) + " --emit l1").out;
  BOOST_TEST(l1 == again);
}

BOOST_AUTO_TEST_CASE(bad_ir_files_exit_2_naming_file_and_line) {
  struct Case {
    const char* name;
    std::string text;
    const char* expect;
    int line;
  };
  std::string head = "graph @g(%x: f32[4,8]) {\n";
  std::vector<Case> cases = {
      {"truncated.rlx", head + "  %1 = exp(%x) : f32[4,", "", 2},
      {"unknown_op.rlx", head + "  %1 = frobnicate(%x) : f32[4,8]\n  return %1\n}\n", "unknown op 'frobnicate'", 2},
      {"shape.rlx", head + "  %1 = exp(%x) : f32[4,9]\n  return %1\n}\n", "", 2},
      {"attr.rlx", head + "  %1 = sum(%x) {axes=\"rows\"} : f32[]\n  return %1\n}\n", "axes", 2},
      {"missing_input.rlx", head + "  %1 = add(%x, %y) : f32[4,8]\n  return %1\n}\n", "%y", 2},
      {"junk.rlx", std::string("\x7f\x45\x4c\x46\x02\x01\x01\x00\xff\xfe", 10), "", 1},
      {"empty.rlx", "", "", 1},
  };
  for (auto& c : cases) {
    std::string path = write_text(c.name, c.text);
    auto r = rlx_cli("compile " + path + " --device cpu");
    BOOST_TEST(r.code == 2, c.name << " exited " << r.code << ": " << r.err);
    BOOST_TEST(has(r.err, std::string(c.name) + ":" + std::to_string(c.line)), c.name << ": " << r.err);
    BOOST_TEST(has(r.err, c.expect), c.name << ": " << r.err);
  }
  auto r = rlx_cli("compile " + (scratch() / "does_not_exist.rlx").string());
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "does_not_exist.rlx"));
}

BOOST_AUTO_TEST_CASE(run_reads_and_writes_npy) {
  std::string g = write_text("axpy.rlx",
                             "graph @axpy(%a: f32[], %x: f32[5], %y: f32[5]) {\n"
                             "  %3 = mul(%a, %x) : f32[5]\n"
                             "  %4 = add(%3, %y) : f32[5]\n"
                             "  return %4\n}\n");
  Tensor a = Tensor::empty(DType::F32, {}), x = Tensor::empty(DType::F32, {5}), y = Tensor::empty(DType::F32, {5});
  uint64_t seed = uint64_t(std::time(nullptr));
  *a.data<float>() = float(rng_unit(seed, 0) * 4 - 2);
  for (int i = 0; i < 5; ++i) {
    x.data<float>()[i] = float(rng_unit(seed, uint64_t(1 + i)) * 2 - 1);
    y.data<float>()[i] = float(rng_unit(seed, uint64_t(10 + i)) * 2 - 1);
  }
  io::write_npy((scratch() / "a.npy").string(), a);
  io::write_npy((scratch() / "x.npy").string(), x);
  io::write_npy((scratch() / "y.npy").string(), y);
  std::string ins = " --input a=" + (scratch() / "a.npy").string() + " --input x=" + (scratch() / "x.npy").string() +
                    " --input y=" + (scratch() / "y.npy").string();
  fs::path out = scratch() / "out";
  for (const char* dev : {"cpu", "reference"}) {
    fs::remove_all(out);
    auto r = rlx_cli("run " + g + " --device " + dev + ins + " --output " + out.string());
    BOOST_TEST(r.code == 0, r.err);
    Tensor z = io::read_npy((out / "out0.npy").string());
    BOOST_TEST(z.type().str() == "f32[5]");
    for (int i = 0; i < 5; ++i)
      BOOST_TEST(z.data<float>()[i] == *a.data<float>() * x.data<float>()[i] + y.data<float>()[i],
                 boost::test_tools::tolerance(1e-6f));
  }
  // A missing input, a wrong shape, a corrupt file, an unknown name: exit 2, named.
  auto r = rlx_cli("run " + g + " --input a=" + (scratch() / "a.npy").string() + " --output " + out.string());
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "input 'x'"));
  r = rlx_cli("run " + g + " --input a=" + (scratch() / "x.npy").string() + " --input x=" + (scratch() / "x.npy").string() +
              " --input y=" + (scratch() / "y.npy").string() + " --output " + out.string());
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "input 'a' of "), r.err);
  BOOST_TEST(has(r.err, " must be f32[], the file holds "), r.err);
  std::string corrupt = write_text("corrupt.npy", std::string("\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'", 24));
  r = rlx_cli("run " + g + " --input a=" + corrupt + " --input x=" + (scratch() / "x.npy").string() + " --input y=" +
              (scratch() / "y.npy").string() + " --output " + out.string());
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "corrupt.npy"));
  r = rlx_cli("run " + g + ins + " --input q=" + (scratch() / "a.npy").string() + " --output " + out.string());
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "'q'"));
}

BOOST_AUTO_TEST_CASE(docs_ops_md_is_the_current_coverage) {
  auto r = rlx_cli("ops");
  BOOST_TEST(r.code == 0);
  std::string doc = slurp(std::string(RLX_DATA) + "/../docs/ops.md");
  auto table = doc.substr(std::min(doc.size(), doc.find("| op |")));
  // The document is generated from a build with every device (cuda included); a build
  // without the CUDA toolkit has fewer columns and can only check that it has no others.
  auto header = [](const std::string& t) { return t.substr(0, t.find('\n')); };
  if (header(table) == header(r.out)) {
    BOOST_TEST(table == r.out, "docs/ops.md differs from `rlx ops`: regenerate it (see its header)");
  } else {
    BOOST_TEST_MESSAGE("docs/ops.md has columns " << header(table) << ", this build " << header(r.out)
                                                  << ": rows not compared");
    std::string h = header(r.out);
    for (size_t b = h.find("| dtype |") + 9; b < h.size();) {
      size_t e = h.find('|', b);
      if (e == std::string::npos) break;
      std::string dev = h.substr(b, e - b);
      BOOST_TEST(header(table).find(dev) != std::string::npos, "device" << dev << "is not in docs/ops.md");
      b = e + 1;
    }
  }
  auto j = nlohmann::json::parse(rlx_cli("ops --json").out);
  BOOST_TEST(j["devices"].size() >= 2u);
  BOOST_TEST(j["ops"].size() > 100u);
  for (auto& row : j["ops"])
    for (auto& [dev, route] : row["routes"].items()) BOOST_TEST(route.get<std::string>() != "", row["op"]);
}

BOOST_AUTO_TEST_CASE(gen_and_solve_write_hdf5_with_the_stop_reason) {
  if (!io::hdf5_available()) {
    BOOST_TEST_MESSAGE("skipped: built without HDF5");
    return;
  }
  std::string A = (scratch() / "poisson.mtx").string(), x = (scratch() / "x.h5").string();
  auto r = rlx_cli("gen poisson --dim 2 --n 12 -o " + A);
  BOOST_TEST(r.code == 0, r.err);
  BOOST_TEST(has(r.out, "144 x 144"));
  for (const char* method : {"cg", "pipecg", "bicgstab", "gmres", "minres"}) {
    fs::remove(x);
    r = rlx_cli("solve " + A + " --method " + method + " --pc jacobi --rtol 1e-10 --rhs random --monitor --explain --out " + x);
    BOOST_TEST(r.code == 0, method << ": " << r.err);
    BOOST_TEST(has(r.out, "reason: converged-rtol"), r.out);
    BOOST_TEST(has(r.out, "spmv_csr"));       // --explain printed the dispatch report
    BOOST_TEST(has(r.out, "spmv: csr: not a GPU (the tiled layout is for GPUs) (--spmv auto)"), r.out);
    BOOST_TEST(has(r.out, "residual norm"));  // --monitor printed the iterations
    io::H5Reader h(x);
    BOOST_TEST(std::get<int64_t>(h.attr("/", "converged")) == 1);
    BOOST_TEST(std::get<std::string>(h.attr("/", "reason")) == "converged-rtol");
    BOOST_TEST(std::get<double>(h.attr("/", "residual")) < 1e-9);
    BOOST_TEST(h.read("x").type().str() == "f64[144]");
    BOOST_TEST(h.read("b").type().str() == "f64[144]");
  }
  // --spmv tiled: the iteration multiplies by the tiled layout (spmv_tiled), same answer.
  fs::remove(x);
  r = rlx_cli("solve " + A + " --method cg --pc jacobi --rtol 1e-10 --spmv tiled --explain --out " + x);
  BOOST_TEST(r.code == 0, r.err);
  BOOST_TEST(has(r.out, "operator: tiled csr 144x144"), r.out);
  BOOST_TEST(has(r.out, "132 multiprocessors and 232448 bytes of shared memory per block: an H200's"), r.out);
  BOOST_TEST(has(r.out, "spmv_tiled"), r.out);
  BOOST_TEST(has(r.out, "reason: converged-rtol"), r.out);
  BOOST_TEST(std::get<std::string>(io::H5Reader(x).attr("/", "spmv")) == "tiled");
  BOOST_TEST(has(r.err, "4.7 nonzeros per row; the tiled layout was measured to pay from 96 per row"), r.err);
  BOOST_TEST(has(rlx_cli("solve " + A + " --spmv coo").err, "(--spmv) must be auto, csr or tiled, not 'coo'"));
  BOOST_TEST(has(rlx_cli("solve " + A + " --method lu --spmv tiled").err, "--spmv applies to the Krylov methods"));
  // --partition: checked on one process too (it owns every row, so the solve goes on).
  BOOST_TEST(has(rlx_cli("solve " + A + " --partition rows").err, "--partition rows: expected contiguous, metis, scotch or ptscotch"));
  BOOST_TEST(has(rlx_cli("solve " + A + " --method lu --partition metis").err, "--partition applies to the Krylov methods"));
  r = rlx_cli("solve " + A + " --method cg --partition contiguous");
  BOOST_TEST(r.code == 0, r.err);
  r = rlx_cli("solve " + A + " --method cg --partition scotch");
  BOOST_TEST(r.code == (sparse::have_scotch() ? 0 : 2), r.err);
  r = rlx_cli("solve " + A + " --method cg --partition ptscotch");
  BOOST_TEST(r.code == (sparse::have_ptscotch() ? 0 : 2), r.err);
  if (!sparse::have_ptscotch()) BOOST_TEST(has(r.err, "built without PT-Scotch"), r.err);
  // The same matrix in rlx's HDF5 CSR layout (gen writes it for .h5): the same solve.
  const std::string H = (scratch() / "poisson.h5").string(), xm = (scratch() / "xm.h5").string(), xh = (scratch() / "xh.h5").string();
  r = rlx_cli("gen poisson --dim 2 --n 12 -o " + H + ":/mats/P");
  BOOST_TEST(r.code == 0, r.err);
  BOOST_TEST(rlx_cli("solve " + A + " --method cg --rhs random --out " + xm).code == 0);
  r = rlx_cli("solve " + H + ":/mats/P --method cg --rhs random --out " + xh);
  BOOST_TEST(r.code == 0, r.err);
  BOOST_TEST(has(r.out, "matrix: " + H + ":/mats/P (144 x 144, 672 nonzeros, f64)"), r.out);
  {
    const Tensor a = io::H5Reader(xm).read("x"), b = io::H5Reader(xh).read("x");
    BOOST_REQUIRE(a.numel() == b.numel());
    for (int64_t i = 0; i < a.numel(); ++i) BOOST_TEST(a.data<double>()[i] == b.data<double>()[i]);
  }
  r = rlx_cli("solve " + H);  // the root is not the CSR group
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "poisson.h5:/: not a CSR matrix"), r.err);
  // Not converged: exit 4, and the file says so.
  r = rlx_cli("solve " + A + " --method cg --max-it 2 --out " + x);
  BOOST_TEST(r.code == 4);
  BOOST_TEST(has(r.out, "diverged-max-it"));
  BOOST_TEST(std::get<int64_t>(io::H5Reader(x).attr("/", "converged")) == 0);
  // Bad input: exit 2, named.
  BOOST_TEST(rlx_cli("solve " + A + " --method qmr").code == 2);
  BOOST_TEST(has(rlx_cli("solve " + A + " --pc amg").err, "unknown preconditioner 'amg'"));
  BOOST_TEST(has(rlx_cli("solve " + A + " --rtol abc").err, "--rtol expects a number"));
  std::string bad = write_text("bad.mtx", "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n4 1 2.0\n");
  r = rlx_cli("solve " + bad);
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "bad.mtx:4"), r.err);
  BOOST_TEST(rlx_cli("gen poisson --dim 4 --n 3 -o " + A).code == 2);
}

BOOST_AUTO_TEST_CASE(a_device_that_cannot_run_here_is_a_clear_error) {
  Device* d = DeviceRegistry::get().find("cuda");
  if (!d || d->unavailable().empty()) {
    BOOST_TEST_MESSAGE("skipped: no cuda device in this build, or it can run here");
    return;
  }
  auto r = rlx_cli("solve poisson3d:8 --device cuda");
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, "cannot run programs here"), r.err);
  r = rlx_cli("devices");
  BOOST_TEST(has(r.out, "unavailable here"), r.out);
  r = rlx_cli("compile " + demo + " --device cuda --explain");  // compiling needs no GPU
  BOOST_TEST(r.code == 0, r.err);
}

// Issue 14: rlx solve never claims a convergence its true residual contradicts. A matrix
// with a zero row (singular, b = ones inconsistent with it) and the 1D Neumann Laplacian
// (singular, b = ones not in its range), written here: every Krylov method exits 4, prints
// a diverged-* reason, says why on stderr, and the HDF5 file says not converged.
BOOST_AUTO_TEST_CASE(solve_never_claims_false_convergence) {
  const std::string zero_row = write_text("zero_row.mtx",
                                          "%%MatrixMarket matrix coordinate real general\n4 4 7\n"
                                          "1 1 2\n1 2 -1\n2 1 -1\n2 2 2\n2 3 -1\n4 3 -1\n4 4 2\n");
  const std::string neumann = write_text("neumann.mtx",
                                         "%%MatrixMarket matrix coordinate real symmetric\n4 4 7\n"
                                         "1 1 1\n2 1 -1\n2 2 2\n3 2 -1\n3 3 2\n4 3 -1\n4 4 1\n");
  const std::string x = (scratch() / "x_false.h5").string();
  for (const std::string& A : {zero_row, neumann})
    for (const char* method : {"cg", "pipecg", "bicgstab", "gmres", "minres"}) {
      fs::remove(x);
      auto r = rlx_cli("solve " + A + " --method " + method + " --pc none --out " + x);
      BOOST_TEST_CONTEXT(A << " " << method << "\n" << r.out << r.err) {
        BOOST_TEST(r.code == 4);
        BOOST_TEST(!has(r.out, "reason: converged"));
        BOOST_TEST(has(r.out, "reason: diverged-"));
        BOOST_TEST(has(r.err, A + ": not converged (diverged-"));
        if (io::hdf5_available()) BOOST_TEST(std::get<int64_t>(io::H5Reader(x).attr("/", "converged")) == 0);
      }
    }
  // The case, by name: GMRES finds the stagnation instead of running to --max-it.
  auto r = rlx_cli("solve " + zero_row + " --method gmres --pc none");
  BOOST_TEST(has(r.out, "reason: diverged-stagnation"), r.out);
  BOOST_TEST(has(r.err, "singular or inconsistent"), r.err);
}

// Numeric options are range-checked once (Args::integer / Args::number take the range):
// out of range, beyond the integer type, NaN: exit 2 naming the option, before loading.
BOOST_AUTO_TEST_CASE(solve_options_are_range_checked) {
  for (const char* bad : {"--restart 0", "--restart -3", "--max-it 3000000000", "--max-it -1",
                          "--max-it 99999999999999999999", "--rtol -1", "--rtol nan", "--atol -1e-3", "--atol nan",
                          "--omega 0", "--omega 2", "--omega nan", "--seed -1", "--restart 1.5"}) {
    auto r = rlx_cli(std::string("solve poisson2d:4 --method gmres ") + bad);
    const std::string opt = std::string(bad).substr(0, std::string(bad).find(' '));
    BOOST_TEST_CONTEXT(bad << ": " << r.err) {
      BOOST_TEST(r.code == 2);
      BOOST_TEST(has(r.err, opt + " "));
      BOOST_TEST(!has(r.err, "internal error"));
    }
  }
  BOOST_TEST(has(rlx_cli("solve poisson2d:4 --max-it 3000000000").err, "--max-it must be in [0, 2147483647]"));
  BOOST_TEST(has(rlx_cli("solve poisson2d:4 --omega 2").err, "--omega must be in (0, 2)"));
  BOOST_TEST(has(rlx_cli("gen poisson --dim 4 --n 3 -o x.mtx").err, "--dim must be in [2, 3]"));
  auto r = rlx_cli("solve poisson2d:4 --method gmres --restart 1 --max-it 2000");  // the bounds themselves are fine
  BOOST_TEST(r.code == 0, r.err);
  // --orthog: a name GMRES knows, and only with GMRES, refused before loading.
  BOOST_TEST(has(rlx_cli("solve poisson2d:4 --method gmres --orthog mgs").err, "--orthog must be cgs2 or cgs, got 'mgs'"));
  BOOST_TEST(has(rlx_cli("solve missing.mtx --method pcg --orthog cgs").err, "--orthog applies to --method gmres, not to pcg"));
  auto once = rlx_cli("solve poisson2d:8 --method gmres --orthog cgs");
  BOOST_TEST(once.code == 0, once.err);
  BOOST_TEST(has(once.out, "converged"), once.out);
  BOOST_TEST(has(once.out, "method: gmres (cgs)"), once.out);
  BOOST_TEST(has(rlx_cli("solve poisson2d:8 --method gmres").out, "method: gmres (cgs2)"));
}

// On one process block Jacobi has one block, the whole matrix: `--pc bjacobi` is ILU(0) there
// (PETSc's bjacobi on one rank), so a script runs unchanged at every mpirun -n.
BOOST_AUTO_TEST_CASE(one_process_bjacobi_is_ilu0_on_the_whole_matrix) {
  for (const auto& [block, whole] : {std::pair{"bjacobi", "ilu0"}, std::pair{"bjacobi-ic0", "ic0"}}) {
    auto b = rlx_cli(std::string("solve poisson3d:12 --method pcg --rtol 1e-10 --pc ") + block);
    auto w = rlx_cli(std::string("solve poisson3d:12 --method pcg --rtol 1e-10 --pc ") + whole);
    BOOST_TEST_CONTEXT(block << ": " << b.out << b.err) {
      BOOST_TEST(b.code == 0);
      BOOST_TEST(has(b.out, std::string("pc: ") + block + " (one block: "));
      auto its = [](const std::string& s) { auto p = s.find("iterations: "); return p == std::string::npos ? std::string() : s.substr(p, s.find(' ', p + 12) - p); };
      BOOST_TEST(!its(b.out).empty());
      BOOST_TEST(its(b.out) == its(w.out));
    }
  }
}

// Solver-side failures name the matrix they came from; sizes too large for the index type
// or the memory are exit 2 saying so, before allocating (never "internal error").
BOOST_AUTO_TEST_CASE(solve_errors_name_the_matrix_and_sizes_are_checked) {
  const std::string zd = write_text("zero_diag.mtx",
                                    "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 2 1\n2 1 1\n");
  for (const char* pc : {"jacobi", "ilu0", "ic0", "ssor"}) {
    auto r = rlx_cli("solve " + zd + " --method gmres --pc " + pc);
    BOOST_TEST_CONTEXT(pc << ": " << r.err) {
      BOOST_TEST(r.code == 2);
      BOOST_TEST(has(r.err, zd + ": " + pc + ":"));
    }
  }
  auto r = rlx_cli("solve poisson2d:3 --method gmres --pc jacobi --rhs " + zd);  // a wrong-shaped rhs names its file
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, zd), r.err);
  for (const char* big : {"solve poisson3d:3000", "solve poisson2d:3037000500", "gen poisson --dim 3 --n 3000 -o big.mtx"}) {
    r = rlx_cli(big);
    BOOST_TEST_CONTEXT(big << ": " << r.err) {
      BOOST_TEST(r.code == 2);
      BOOST_TEST((has(r.err, "too large") || has(r.err, "larger than rlx accepts")));
      BOOST_TEST(!has(r.err, "internal error"));
    }
  }
  // A 60-byte file claiming 10^12 entries, a 2^50-row matrix, an array of 2^64 values:
  // exit 2 at a real line of the file.
  const std::string lying = write_text("lying.mtx", "%%MatrixMarket matrix coordinate real general\n9 9 1000000000000\n1 1 1\n");
  r = rlx_cli("solve " + lying);
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, lying + ":4: truncated"), r.err);
  const std::string tall = write_text("tall.mtx", "%%MatrixMarket matrix coordinate real general\n% rows\n1125899906842624 1 0\n");
  r = rlx_cli("solve " + tall);
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, tall + ":3: "), r.err);
  const std::string wide = write_text("wide.mtx", "%%MatrixMarket matrix array real general\n4294967296 4294967296\n1\n");
  r = rlx_cli("solve " + wide);
  BOOST_TEST(r.code == 2);
  BOOST_TEST(has(r.err, wide + ":2: "), r.err);
}

#ifdef RLX_HAVE_ONNX
// ONNX models (data/onnx) through compile and run: shapes bound by --shape or by the .npy inputs,
// the report naming the model's nodes, bad models exit 2 naming the file.
BOOST_AUTO_TEST_CASE(onnx_models_compile_and_run_and_bad_ones_exit_2) {
  const std::string dir = std::string(RLX_DATA) + "/onnx/";
  auto r = rlx_cli("compile " + dir + "mlp.onnx --shape x=3,16 --device cpu --explain");
  BOOST_TEST(r.code == 0, r.err);
  BOOST_TEST(has(r.out, "/fc1/Gemm"), r.out);
  BOOST_TEST(has(r.out, "unsupported=0"), r.out);
  r = rlx_cli("run " + dir + "mlp.onnx --input x=" + dir + "mlp_in_x.npy --output " + (scratch() / "onnx_out").string());
  BOOST_TEST(r.code == 0, r.err);
  const Tensor got = io::read_npy((scratch() / "onnx_out" / "out0.npy").string()), want = io::read_npy(dir + "mlp_out0.npy");
  BOOST_TEST_REQUIRE((got.shape() == want.shape()));
  for (int64_t i = 0; i < got.numel(); ++i) BOOST_TEST(std::abs(got.data<float>()[i] - want.data<float>()[i]) <= 2e-5);
  r = rlx_cli("compile " + dir + "mlp.onnx --device cpu");
  BOOST_TEST((r.code == 2 && has(r.err, "mlp.onnx") && has(r.err, "symbolic ('batch')")), r.err);
  r = rlx_cli("compile " + dir + "mlp.onnx --shape y=3,16");
  BOOST_TEST((r.code == 2 && has(r.err, "no input named 'y'")), r.err);
  r = rlx_cli("compile " + dir + "bad_cycle.onnx");
  BOOST_TEST((r.code == 2 && has(r.err, "bad_cycle.onnx") && has(r.err, "cycle through node")), r.err);
  r = rlx_cli("compile " + dir + "bad_undefined.onnx");
  BOOST_TEST((r.code == 2 && has(r.err, "bad_undefined.onnx") && has(r.err, "reads 'nowhere'")), r.err);
  r = rlx_cli("compile " + dir + "bad_unsupported.onnx");
  BOOST_TEST((r.code == 2 && has(r.err, "'where_nonzero' (NonZero)") && has(r.err, "'my_einsum' (Einsum)")), r.err);
  r = rlx_cli("compile " + write_text("junk.onnx", "not a model"));
  BOOST_TEST((r.code == 2 && has(r.err, "junk.onnx: not an ONNX model")), r.err);
  BOOST_TEST(has(rlx_cli("compile " + dir + "mlp.onnx --shape x=3,a").err, "'a' is not a dimension"));
  BOOST_TEST(has(rlx_cli("compile " + demo + " --shape x=3").err, "--shape is for .onnx models"));
}
#endif
