// rlx: the command-line program. Sub-commands: devices, ops, compile, run, demo, gen, solve,
// train, splat, embed, generate.
// Exit codes (README): 0 ok; 2 bad usage or bad input (names the file, line or option);
// 3 a node has no route on the device; 4 a solve did not converge; 5 the device failed
// (out of memory, a faulting kernel; names the IR node where there is one).
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "dist/communicator.hpp"
#include "dist/session.hpp"
#include "dispatch/coverage.hpp"
#include "io/npy.hpp"
#include "io/onnx.hpp"
#include "ir/frontend.hpp"
#include "ir/op_registry.hpp"
#include "ir/text.hpp"
#include "runtime/executor.hpp"
#include "runtime/program_text.hpp"
#include "runtime/runtime.hpp"
#include "args.hpp"

namespace {

using namespace rlx;
using namespace rlx::cli;

const char* kUsage =
    "usage: rlx <command> [options]\n"
    "commands:\n"
    "  devices                          list devices and what runs their kernels\n"
    "  ops [--json]                     op x dtype x device coverage matrix\n"
    "  compile FILE [--device D] [--policy P] [--deny OP,...] [--emit l1|l2|l3] [--explain] [--json]\n"
    "        FILE: text IR (.rlx) or an ONNX model (.onnx: --shape NAME=D0,D1,... binds an input's shape)\n"
    "  run FILE [--device D] [--policy P] --input NAME=FILE.npy ... --output DIR\n"
    "        (an .onnx model's inputs take the .npy files' shapes; its weights come from the file)\n"
    "  demo [--device D]                build, explain, compile and run a built-in graph\n"
    "  gen poisson --dim 2|3 --n N [--shuffle SEED] -o FILE.mtx|FILE.h5   (--shuffle: rows numbered at random;\n"
    "        .h5: rlx's HDF5 CSR layout, docs/io.md)\n"
    "  solve FILE.mtx|FILE.h5[:GROUP]|poisson3d:N [--rhs b.mtx|ones|random] [--method cg|pcg|pipecg|bicgstab|gmres|minres|lu|klu|cholesky]\n"
    "        [--pc none|jacobi|ilu0|ic0|ssor|bjacobi|bjacobi-ic0] [--rtol R] [--atol A] [--max-it N] [--restart M] [--omega W]\n"
    "        [--orthog cgs2|cgs]   (gmres: Gram-Schmidt twice, the default, or once as PETSc's default)\n"
    "        [--monitor] [--device D] [--spmv auto|csr|tiled] [--explain] [--out x.h5]   (exit 4 when it does not converge)\n"
    "        under mpirun -n N (N > 1): rows split over the ranks, --pc none|jacobi|bjacobi|bjacobi-ic0 (one rank: bjacobi = ilu0),\n"
    "        --partition contiguous|metis|scotch|ptscotch (a .mtx or .h5 is read by every rank at once when\n"
    "        contiguous or ptscotch; ptscotch then partitions it in parallel)\n"
    "  train mnist [--model mlp|cnn] [--epochs E] [--batch B] [--lr L] [--optimizer sgd|adam|adamw] [--device D]\n"
    "        [--seed S] [--data DIR] [--checkpoint DIR] [--resume DIR] [--json out.json] [--drop-last]\n"
    "  splat render SCENE.ply --camera CAM.json [--view K] [--device D] [--background r,g,b] -o OUT.png\n"
    "        [--depth DEPTH.npy] [--alpha ALPHA.npy]\n"
    "  splat fit --images DIR --cameras CAMS.json [--init random|POINTS.ply] [--count N] --iters N [--lr L]\n"
    "        [--device D] [--background r,g,b] [--seed S] [--report-every K] [--snapshots DIR] [--snapshot-every K]\n"
    "        [--densify [--densify-from I] [--densify-until I] [--densify-every K] [--grad-threshold G]\n"
    "        [--opacity-reset-every K]] -o OUT.ply\n"
    "  embed --model DIR|DIR/onnx/model.onnx|FILE.gguf \"sentence\" ... [--device D] [--out emb.npy] [--explain]\n"
    "        [--max-length N]   sentence embeddings of a sentence-transformers BERT folder (all-MiniLM-L6-v2),\n"
    "        of its ONNX export (the tokenizer and config from the folder), or of a BERT GGUF file; texts\n"
    "        cut at N ids (default: the folder's max_seq_length, else the model's positions)\n"
    "  tokenize --model DIR|FILE.gguf|--tokenizer FILE TEXT... | --decode ID,... [--skip-special]   the model's byte-level\n"
    "        BPE on texts (a JSON line each: pieces and ids) or ids (their text)\n"
    "  generate --model DIR|FILE.gguf --prompt TEXT|--prompt-ids 1,2,3 [--tokenizer tokenizer.json] [--stop auto|none|ID,...]\n"
    "        [--chat [--system TEXT] [--no-think]]   (--chat: the prompt as a user turn of Qwen3's chat template)\n"
    "        --prompts FILE: a prompt a line, generated together (prompts of different lengths in one batch), a JSON\n"
    "        line per prompt on stdout ({\"line\": N, \"text\": ..., \"ids\": [...]})\n"
    "        [--max-new N] [--batch B] [--device D] [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
    "        [--weights stored|f32|bf16] [--explain]   Qwen3 generation: --prompt through the model's tokenizer.json,\n"
    "        the new text on stdout, ending at the model's eos ids (--stop auto); --prompt-ids: the new ids (a line per\n"
    "        sequence; --batch B decodes B copies of the prompt together); tokens/s on stderr; --weights: projections\n"
    "        as stored (default), decoded to f32, or held as bf16\n"
    "policies: prefer-native (default), force-common-ir, strict, allow-host\n"
    "--deny OP,...: treat these ops as having no native kernel (exercises lowerings, rewrites, staging)\n";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path + ": cannot open for reading");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

CompileOptions options_from(const Args& a) {
  CompileOptions o;
  o.policy = policy_from_name(a.get("policy", "prefer-native"));
  std::string deny = a.get("deny", "");
  for (size_t i = 0; i < deny.size();) {
    size_t j = deny.find(',', i);
    if (j == std::string::npos) j = deny.size();
    std::string op = deny.substr(i, j - i);
    if (!op.empty()) {
      ir::OpRegistry::get().at(op);  // unknown names are an error, not silently ignored
      o.deny_native.push_back(op);
    }
    i = j + 1;
  }
  return o;
}

bool is_onnx(const std::string& file) { return std::filesystem::path(file).extension() == ".onnx"; }

// An ONNX model as a graph for the given input shapes (io/onnx.hpp): the model's inputs are the
// first parameters, its weights (returned in `weights`) the rest.
ir::Graph import_onnx(const std::string& file, const std::map<std::string, Shape>& shapes, std::vector<Tensor>* weights) {
  const io::OnnxModelFile f(file);
  io::OnnxImportOptions o;
  o.evaluate = evaluator_for(DeviceRegistry::get().at("reference"));
  const std::vector<std::string> names = f.input_names();
  for (const auto& [n, s] : shapes) {
    if (std::find(names.begin(), names.end(), n) == names.end()) throw InputError(file + ": the model has no input named '" + n + "'");
    o.input_shapes[n] = s;
  }
  io::OnnxGraph m = f.import_graph(o);
  if (weights) *weights = m.weights;
  return std::move(m.graph);
}

// --shape NAME=D0,D1,... (repeatable): an ONNX input's shape.
std::map<std::string, Shape> shapes_from(const Args& a) {
  std::map<std::string, Shape> r;
  for (auto [it, end] = a.opt.equal_range("shape"); it != end; ++it) {
    const std::string& v = it->second;
    const size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0) throw UsageError("--shape expects NAME=D0,D1,..., got '" + v + "'");
    const std::string name = v.substr(0, eq);
    if (r.count(name)) throw UsageError("--shape " + name + "= is given twice");
    Shape s;
    for (size_t i = eq + 1; i <= v.size();) {
      size_t j = v.find(',', i);
      if (j == std::string::npos) j = v.size();
      const std::string d = v.substr(i, j - i);
      char* stop = nullptr;
      errno = 0;
      const long long x = d.empty() ? -1 : std::strtoll(d.c_str(), &stop, 10);
      if (d.empty() || *stop != '\0' || errno || x < 0)
        throw UsageError("--shape " + name + ": '" + d + "' is not a dimension (a non-negative integer)");
      s.push_back(x);
      if (j == v.size()) break;
      i = j + 1;
    }
    r[name] = s;
  }
  return r;
}

int cmd_devices() {
  for (Device* d : DeviceRegistry::get().all()) {
    std::string why = d->unavailable();
    std::cout << d->name() << "\t" << d->description() << (why.empty() ? "" : " [unavailable here: " + why + "]") << "\n";
  }
  return kOk;
}

int cmd_ops(const Args& a) {
  std::vector<const Target*> devs;
  for (Device* d : DeviceRegistry::get().all()) devs.push_back(d);
  auto rows = coverage(devs);
  std::cout << (a.flag("json") ? coverage_json(devs, rows) + "\n" : coverage_table(devs, rows));
  return kOk;
}

int cmd_compile(const Args& a) {
  if (a.pos.size() != 1) throw UsageError("compile takes one FILE");
  std::string file = a.pos[0];
  if (a.has("shape") && !is_onnx(file)) throw UsageError("--shape is for .onnx models; " + file + " states its own shapes");
  ir::Graph g = is_onnx(file) ? import_onnx(file, shapes_from(a), nullptr) : ir::parse_graph(read_file(file), file);
  Device& d = DeviceRegistry::get().at(a.get("device", "cpu"));
  std::string emit = a.get("emit", "");
  if (!emit.empty() && emit != "l1" && emit != "l2" && emit != "l3")
    throw UsageError("--emit must be l1, l2 or l3, got '" + emit + "'");
  if (emit == "l1") std::cout << ir::print_graph(g);
  try {
    Program p = compile(g, d, options_from(a));
    if (a.flag("explain")) std::cout << (a.flag("json") ? p.report.json() + "\n" : p.report.table());
    if (emit == "l2") std::cout << ir::print_graph(p.graph);
    if (emit == "l3") std::cout << print_program(p);
  } catch (const LegalizeError& e) {
    if (a.flag("json"))
      std::cout << e.report().json() << "\n";
    else
      std::cout << e.report().table();
    std::cerr << "rlx: " << file << ": " << e.what() << "\n";
    return kLegalize;
  }
  return kOk;
}

int cmd_run(const Args& a) {
  if (a.pos.size() != 1) throw UsageError("run takes one FILE");
  std::string file = a.pos[0];
  std::string outdir = a.get("output", "");
  if (outdir.empty()) throw UsageError("run needs --output DIR");
  // The output folder is checked before any work: a path that is a file, or cannot be
  // made, is bad usage naming it.
  {
    std::error_code ec;
    if (std::filesystem::exists(outdir, ec) && !std::filesystem::is_directory(outdir, ec))
      throw UsageError("--output " + outdir + ": exists and is not a directory");
    std::filesystem::create_directories(outdir, ec);
    if (ec) throw UsageError("--output " + outdir + ": cannot create the folder (" + ec.message() + ")");
  }
  std::map<std::string, std::pair<std::string, Tensor>> given;  // name -> (file, tensor)
  for (auto [it, end] = a.opt.equal_range("input"); it != end; ++it) {
    auto eq = it->second.find('=');
    if (eq == std::string::npos || eq == 0) throw UsageError("--input expects NAME=FILE.npy, got '" + it->second + "'");
    std::string name = it->second.substr(0, eq), path = it->second.substr(eq + 1);
    if (given.count(name)) throw UsageError("--input " + name + "= is given twice (" + given[name].first + " and " + path + ")");
    given[name] = {path, io::read_npy(path)};
  }
  std::vector<Tensor> weights;  // an ONNX model's, after its inputs
  ir::Graph g;
  if (is_onnx(file)) {
    std::map<std::string, Shape> shapes;
    for (const auto& [name, v] : given) shapes[name] = v.second.shape();
    g = import_onnx(file, shapes, &weights);
  } else {
    g = ir::parse_graph(read_file(file), file);
  }
  std::vector<Tensor> inputs;
  for (size_t i = 0; i + weights.size() < g.params.size(); ++i) {
    std::string n = g.param_name(i);
    auto it = given.find(n);
    if (it == given.end()) throw InputError(file + ": input '" + n + "' (" + g.type(g.params[i]).str() + ") was not given (--input " + n + "=FILE.npy)");
    const TensorType want = g.type(g.params[i]), got = it->second.second.type();
    if (got != want)
      throw InputError(it->second.first + ": input '" + n + "' of " + file + " must be " + want.str() + ", the file holds " +
                       got.str());
    inputs.push_back(it->second.second);
    given.erase(it);
  }
  if (!given.empty()) throw InputError(file + ": the graph has no input named '" + given.begin()->first + "'");
  inputs.insert(inputs.end(), weights.begin(), weights.end());
  Device& d = DeviceRegistry::get().at(a.get("device", "cpu"));
  Program p;
  try {
    p = compile(g, d, options_from(a));
  } catch (const LegalizeError& e) {
    std::cout << e.report().table();
    std::cerr << "rlx: " << file << ": " << e.what() << "\n";
    return kLegalize;
  }
  auto results = run(p, d, inputs);
  for (size_t i = 0; i < results.size(); ++i) {
    std::string path = (std::filesystem::path(outdir) / ("out" + std::to_string(i) + ".npy")).string();
    io::write_npy(path, results[i]);
    std::cout << path << "\t" << results[i].type().str() << "\n";
  }
  return kOk;
}

Tensor random_tensor(DType t, Shape s, uint64_t seed) {
  Tensor r = Tensor::empty(t, s);
  for (int64_t i = 0; i < r.numel(); ++i) {
    double u = rng_unit(seed, uint64_t(i)) * 2 - 1;
    if (t == DType::F32) r.data<float>()[i] = float(u);
    else if (t == DType::C64) r.data<c64>()[i] = c64(float(u), float(rng_unit(seed + 1, uint64_t(i)) * 2 - 1));
  }
  return r;
}

double max_rel_error(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    std::complex<double> x, y;
    if (a.dtype() == DType::C64) x = a.data<c64>()[i], y = b.data<c64>()[i];
    else x = a.data<float>()[i], y = b.data<float>()[i];
    num = std::max(num, std::abs(x - y));
    den = std::max(den, std::abs(y));
  }
  return num / std::max(den, 1e-30);
}

// The built-in demo: an MLP block in f32 (linear -> gelu -> softmax) and a complex
// matmul, so the report shows native, common-ir and rewritten routes together.
int cmd_demo(const Args& a) {
  Device& d = DeviceRegistry::get().at(a.get("device", "cpu"));
  ir::Graph g;
  auto x = input(g, "x", DType::F32, {256, 512});
  auto w = input(g, "w", DType::F32, {512, 512});
  auto b = input(g, "b", DType::F32, {512});
  auto z = input(g, "z", DType::C64, {128, 128});
  auto zw = input(g, "zw", DType::C64, {128, 128});
  auto h = gelu(linear(x, w, b));
  auto y = softmax(matmul(h, w), -1);
  auto zz = matmul(z, zw);
  output(g, {y, zz});

  std::cout << "== L1 graph ==\n" << ir::print_graph(g) << "\n";
  auto t0 = std::chrono::steady_clock::now();
  Program p = compile(g, d, options_from(a));
  auto t1 = std::chrono::steady_clock::now();
  std::cout << "== dispatch report (" << d.name() << ") ==\n" << p.report.table() << "\n";
  std::cout << "compiled " << g.nodes.size() << " L1 nodes into " << p.graph.nodes.size() << " L2 nodes and "
            << p.kernels.size() << " kernels (arena " << p.arena_bytes << " bytes) in "
            << std::chrono::duration<double, std::milli>(t1 - t0).count() << " ms\n";

  std::vector<Tensor> in = {random_tensor(DType::F32, {256, 512}, 1), random_tensor(DType::F32, {512, 512}, 2),
                            random_tensor(DType::F32, {512}, 3), random_tensor(DType::C64, {128, 128}, 4),
                            random_tensor(DType::C64, {128, 128}, 6)};
  Executor ex(p, d);
  ex.run(in);  // warm-up
  auto t2 = std::chrono::steady_clock::now();
  auto out = ex.run(in);
  auto t3 = std::chrono::steady_clock::now();
  std::cout << "ran on " << d.name() << " in " << std::chrono::duration<double, std::milli>(t3 - t2).count() << " ms\n";

  Device& ref = DeviceRegistry::get().at("reference");
  auto expect = run(compile(g, ref), ref, in);
  bool ok = true;
  const double tol[] = {1e-4, 1e-4};
  for (size_t i = 0; i < out.size(); ++i) {
    double e = max_rel_error(out[i].is_host() ? out[i] : out[i].to(host_allocator()), expect[i]);
    std::cout << "result " << i << " " << out[i].type().str() << ": max error vs reference device " << e
              << (e <= tol[i] ? " (ok)" : " (TOO LARGE)") << "\n";
    ok = ok && e <= tol[i];
  }
  return ok ? kOk : 1;
}

}  // namespace

// Under mpirun with several ranks an error on one rank must not leave the others waiting:
// an error every rank raised together (dist::CollectiveError) is printed once and each rank
// returns its code; any other ends the whole job with that code (MPI_Abort).
static int fail(int code, const std::string& message) {
  const dist::Communicator world = dist::Communicator::world();
  if (world.size() == 1) {
    std::cerr << message;
    return code;
  }
  std::cerr << "rlx: rank " << world.rank() << " of " << world.size() << ": " << message.substr(5);
  std::cerr.flush();
  dist::MpiSession::abort_job(code);
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::cout << kUsage;
    return argc < 2 ? kBadInput : kOk;
  }
  // The rlx program is an entry point: under an MPI launcher it initialises MPI itself.
  dist::MpiSession mpi(&argc, &argv);
  std::string cmd = argv[1];
  try {
    if (cmd == "devices") return cmd_devices();
    if (cmd == "ops") return cmd_ops(Args(argc, argv, 2, {}, {"json"}));
    if (cmd == "compile")
      return cmd_compile(Args(argc, argv, 2, {"device", "policy", "emit", "deny", "shape"}, {"explain", "json"}));
    if (cmd == "run") return cmd_run(Args(argc, argv, 2, {"device", "policy", "deny", "input", "output"}, {}));
    if (cmd == "demo") return cmd_demo(Args(argc, argv, 2, {"device", "policy"}, {}));
    if (cmd == "gen") return cmd_gen(Args(argc, argv, 2, {"dim", "n", "out", "shuffle"}, {}));
    if (cmd == "solve")
      return cmd_solve(Args(argc, argv, 2,
                            {"rhs", "method", "pc", "rtol", "atol", "max-it", "restart", "omega", "device", "policy",
                             "out", "seed", "spmv", "partition", "orthog"},
                            {"monitor", "explain"}));
    if (cmd == "train")
      return cmd_train(Args(argc, argv, 2,
                            {"model", "epochs", "batch", "lr", "optimizer", "device", "seed", "data", "checkpoint", "resume",
                             "json"},
                            {"drop-last"}));
    if (cmd == "splat") return cmd_splat(argc, argv);
    if (cmd == "embed") return cmd_embed(Args(argc, argv, 2, {"model", "device", "out", "max-length"}, {"explain"}));
    if (cmd == "tokenize")
      return cmd_tokenize(Args(argc, argv, 2, {"model", "tokenizer", "decode"}, {"skip-special"}));
    if (cmd == "generate")
      return cmd_generate(Args(argc, argv, 2,
                               {"model", "prompt-ids", "prompt", "prompts", "tokenizer", "stop", "system", "max-new", "batch", "device",
                                "weights", "temperature", "top-k", "top-p", "seed"},
                               {"explain", "chat", "no-think"}));
    std::cerr << "rlx: unknown command '" << cmd << "'\n" << kUsage;
    return kBadInput;
  } catch (const UsageError& e) {
    return fail(kBadInput, "rlx: " + std::string(e.what()) + "\n" + kUsage);
  } catch (const LegalizeError& e) {
    return fail(kLegalize, "rlx: " + std::string(e.what()) + "\n");
  } catch (const dist::CollectiveError& e) {
    if (dist::Communicator::world().rank() == 0) std::cerr << "rlx: " << e.what() << "\n";
    return kBadInput;
  } catch (const InputError& e) {
    return fail(kBadInput, "rlx: " + std::string(e.what()) + "\n");
  } catch (const DeviceError& e) {
    return fail(kDeviceFailed, "rlx: device error: " + std::string(e.what()) + "\n");
  } catch (const std::bad_alloc&) {
    return fail(kDeviceFailed, "rlx: device error: out of memory on the host\n");
  } catch (const std::exception& e) {
    return fail(1, "rlx: internal error: " + std::string(e.what()) + "\n");
  }
}
