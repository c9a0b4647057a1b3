// File formats: .npy and HDF5 round trips for every dtype they carry, atomic writes, and
// a clear error (never a crash) for bad files.
#define BOOST_TEST_MODULE io
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#if defined(RLX_TEST_RAW_HDF5)
#include <hdf5.h>
#endif
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "io/hdf5.hpp"
#include "io/npy.hpp"
#include "tests/support/cli.hpp"
#include "tests/support/outcomes.hpp"
#include "tests/support/preconditions.hpp"

using namespace rlx;
namespace fs = std::filesystem;

namespace {

fs::path scratch() {
  static const fs::path d = test::scratch_dir("rlx_io_test_");
  return d;
}

Tensor random_tensor(DType t, Shape s, uint64_t seed) {
  Tensor r = Tensor::empty(t, std::move(s));
  auto* bytes = static_cast<uint8_t*>(r.raw());
  for (size_t i = 0; i < r.nbytes(); ++i) bytes[i] = uint8_t(rng_bits(seed, i));
  if (t == DType::Bool)
    for (size_t i = 0; i < r.nbytes(); ++i) bytes[i] &= 1;
  if (t == DType::F32 || t == DType::C64)  // keep values finite and comparable
    for (int64_t i = 0; i < r.numel() * (t == DType::C64 ? 2 : 1); ++i)
      static_cast<float*>(r.raw())[i] = float(rng_unit(seed, uint64_t(i)) * 2 - 1);
  if (t == DType::F64)
    for (int64_t i = 0; i < r.numel(); ++i) r.data<double>()[i] = rng_unit(seed, uint64_t(i)) * 2 - 1;
  if (t == DType::F16)
    for (int64_t i = 0; i < r.numel(); ++i) r.data<f16>()[i] = f16(float(rng_unit(seed, uint64_t(i))));
  return r;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

void write_bytes(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A bad .npy file: its name, its bytes, and what the InputError must say (besides the name).
struct NpyCase {
  const char* name;
  std::string content;
  const char* expect;
};

void expect_npy_errors(const std::vector<NpyCase>& cases) {
  for (auto& c : cases) {
    fs::path p = scratch() / c.name;
    write_bytes(p, c.content);
    try {
      io::read_npy(p.string());
      BOOST_ERROR(c.name << ": no error");
    } catch (const InputError& e) {
      std::string m = e.what();
      BOOST_TEST(m.find(c.name) != std::string::npos, m);
      BOOST_TEST(m.find(c.expect) != std::string::npos, m);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(npy_round_trip_every_dtype) {
  for (DType t : {DType::Bool, DType::I8, DType::U8, DType::I32, DType::I64, DType::F16, DType::F32, DType::F64, DType::C64})
    for (Shape s : {Shape{}, Shape{7}, Shape{3, 5}, Shape{2, 0, 4}}) {
      Tensor a = random_tensor(t, s, 17);
      fs::path p = scratch() / "a.npy";
      io::write_npy(p.string(), a);
      Tensor b = io::read_npy(p.string());
      BOOST_TEST(same_bytes(a, b), dtype_name(t) << shape_str(s));
    }
  BOOST_CHECK_THROW(io::write_npy((scratch() / "b.npy").string(), Tensor::zeros(DType::BF16, {2})), InputError);
}

// Every prefix of a valid .npy file and every one-byte change of its header either reads
// or fails with an InputError: never another exception, never a crash (tests/sanitize.sh
// runs this under ASan/UBSan). Changes to the data bytes only change values, so the header
// (magic, version, length, dict) is where the mutations go, plus a few data bytes.
BOOST_AUTO_TEST_CASE(npy_truncations_and_mutations) {
  for (DType t : {DType::F32, DType::I64, DType::C64}) {
    Tensor a = random_tensor(t, {3, 5}, 9);
    fs::path good = scratch() / "fuzz_good.npy";
    io::write_npy(good.string(), a);
    const std::string bytes = read_bytes(good);
    const size_t header = bytes.size() - size_t(a.nbytes());
    fs::path p = scratch() / "fuzz.npy";
    test::Outcomes o;
    auto attempt = [&](const std::string& content, const std::string& what) {
      write_bytes(p, content);
      o.attempt(std::string(dtype_name(t)) + " " + what, [&] {
        Tensor b = io::read_npy(p.string());
        BOOST_CHECK_MESSAGE(b.nbytes() <= int64_t(content.size()), what << ": more bytes than the file");
      });
    };
    for (size_t len = 0; len < bytes.size(); len += len < header ? 1 : 7)
      attempt(bytes.substr(0, len), "prefix " + std::to_string(len));
    for (size_t i = 0; i < header + 8 && i < bytes.size(); ++i)
      for (char ch : {'\0', '\x01', '\x7f', '\xff', ' ', '\'', '{', '}', ':', ',', '(', ')', '9', '<', '>', 'f', 'T'}) {
        std::string m = bytes;
        m[i] = ch;
        attempt(m, "byte " + std::to_string(i) + " -> " + std::to_string(int(static_cast<unsigned char>(ch))));
      }
    BOOST_TEST(o.read > 0, dtype_name(t));
    BOOST_TEST(o.refused > 0, dtype_name(t));
  }
}

BOOST_AUTO_TEST_CASE(npy_bad_files_are_named) {
  Tensor a = random_tensor(DType::F32, {4, 4}, 3);
  fs::path good = scratch() / "good.npy";
  io::write_npy(good.string(), a);
  const std::string bytes = read_bytes(good);
  std::string fortran = bytes;
  fortran.replace(fortran.find("False"), 5, "True ");
  std::string big_endian = bytes;
  big_endian.replace(big_endian.find("<f4"), 3, ">f4");
  std::vector<NpyCase> cases = {{"empty.npy", "", "bad magic"},
                             {"junk.npy", "\x7f" "ELF\x02\x01\x01\x00\x00\x00\x00", "bad magic"},
                             {"short_header.npy", bytes.substr(0, 20), "truncated"},
                             {"short_data.npy", bytes.substr(0, bytes.size() - 5), "truncated data"},
                             {"fortran.npy", fortran, "Fortran"},
                             {"big_endian.npy", big_endian, "unsupported .npy dtype"}};
  expect_npy_errors(cases);
  BOOST_CHECK_THROW(io::read_npy((scratch() / "missing.npy").string()), InputError);
}

// A header's shape is checked against the file's length (and for overflow) before anything
// is allocated: a 151-byte file claiming 12 billion floats is "truncated", not an
// allocation of 48 GB; extra bytes after the data are refused too.
BOOST_AUTO_TEST_CASE(npy_header_sizes_are_checked_before_allocating) {
  // A version 1.0 .npy file of float32 with the given shape text and data bytes.
  auto npy = [](const std::string& shape, const std::string& data) {
    std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
    h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
    h += '\n';
    return std::string("\x93NUMPY\x01\x00", 8) + char(h.size() & 0xff) + char(h.size() >> 8) + h + data;
  };
  const std::string bytes = npy("(4, 4)", std::string(64, '\0'));
  BOOST_REQUIRE_EQUAL(bytes.size(), 128u + 64u);
  write_bytes(scratch() / "sizes_good.npy", bytes);
  BOOST_TEST(io::read_npy((scratch() / "sizes_good.npy").string()).numel() == 16);
  std::vector<NpyCase> cases = {
      {"claims_12e9.npy", npy("(3000000000, 4)", std::string(23, '\0')), "truncated data"},
      {"overflow.npy", npy("(4294967296, 4294967296, 4)", ""), "impossible"},
      {"trailing.npy", bytes + "junk", "unexpected bytes after"},
  };
  expect_npy_errors(cases);
}

// Every writer (.npy, HDF5, Matrix Market) goes through io::AtomicFile: a target that is a
// folder or lies in a missing folder is an InputError naming it, and temporaries that
// killed processes left beside a target are removed by the next write to it.
BOOST_AUTO_TEST_CASE(atomic_writes_refuse_bad_targets_and_clean_stale_temporaries) {
  fs::path dir = scratch() / "atomic";
  fs::create_directories(dir / "a_folder.npy");
  try {
    io::write_npy((dir / "a_folder.npy").string(), random_tensor(DType::F32, {2}, 1));
    BOOST_ERROR("wrote over a folder");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("a_folder.npy: is a directory") != std::string::npos, e.what());
  }
  BOOST_CHECK_THROW(io::write_npy((dir / "missing" / "x.npy").string(), random_tensor(DType::F32, {2}, 1)), InputError);

  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  BOOST_REQUIRE(child > 0);
  int status = 0;
  ::waitpid(child, &status, 0);  // now a pid no process holds
  fs::path target = dir / "x.npy";
  fs::path stale = dir / ("x.npy.tmp." + std::to_string(child));
  fs::path live = dir / ("x.npy.tmp." + std::to_string(::getppid()));
  fs::path other = dir / ("y.npy.tmp." + std::to_string(child));
  for (const fs::path& p : {stale, live, other}) write_bytes(p, std::string(1000, 'x'));
  io::write_npy(target.string(), random_tensor(DType::F32, {3}, 2));
  BOOST_TEST(!fs::exists(stale), "a dead process's temporary is left: " << stale);
  BOOST_TEST(fs::exists(live), "a running process's temporary was removed");
  BOOST_TEST(fs::exists(other), "another target's temporary was removed");
  BOOST_TEST(io::read_npy(target.string()).numel() == 3);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(hdf5_round_trip_datasets_attributes_csr, *boost::unit_test::precondition(test::Hdf5Present())) {
  fs::path p = scratch() / "round.h5";
  std::vector<Tensor> ts;
  std::vector<std::string> names;
  int k = 0;
  for (DType t : {DType::Bool, DType::I8, DType::U8, DType::I32, DType::I64, DType::F32, DType::F64, DType::C64}) {
    ts.push_back(random_tensor(t, {3, 4}, uint64_t(40 + k)));
    names.push_back("group/sub/d" + std::to_string(k++));
  }
  Tensor scalar = random_tensor(DType::F64, {}, 9);
  io::CsrArrays csr;
  csr.rows = 3;
  csr.cols = 4;
  csr.row_ptr = Tensor::empty(DType::I32, {4});
  csr.col_idx = Tensor::empty(DType::I32, {3});
  int32_t rp[] = {0, 1, 1, 3}, ci[] = {2, 0, 3};
  std::memcpy(csr.row_ptr.raw(), rp, sizeof rp);
  std::memcpy(csr.col_idx.raw(), ci, sizeof ci);
  csr.values = random_tensor(DType::F64, {3}, 5);
  {
    io::H5Writer w(p.string());
    for (size_t i = 0; i < ts.size(); ++i) w.write(names[i], ts[i]);
    w.write("scalar", scalar);
    w.attr("/", "iterations", int64_t(42));
    w.attr("/", "residual", 1.25e-9);
    w.attr("/", "reason", std::string("converged-rtol"));
    w.write_csr("A", csr);
    BOOST_TEST(!fs::exists(p));  // nothing under the final name until commit
    w.commit();
  }
  io::H5Reader r(p.string());
  for (size_t i = 0; i < ts.size(); ++i) BOOST_TEST(same_bytes(ts[i], r.read(names[i])), names[i]);
  BOOST_TEST(same_bytes(scalar, r.read("scalar")));
  BOOST_TEST(std::get<int64_t>(r.attr("/", "iterations")) == 42);
  BOOST_TEST(std::get<double>(r.attr("/", "residual")) == 1.25e-9);
  BOOST_TEST(std::get<std::string>(r.attr("/", "reason")) == "converged-rtol");
  io::CsrArrays back = r.read_csr("A");
  BOOST_TEST(back.rows == 3);
  BOOST_TEST(back.cols == 4);
  BOOST_TEST(same_bytes(back.row_ptr, csr.row_ptr));
  BOOST_TEST(same_bytes(back.col_idx, csr.col_idx));
  BOOST_TEST(same_bytes(back.values, csr.values));
  // Part of a dataset: its header, and a range of entries along the first axis.
  BOOST_TEST((r.info("A/values").shape == Shape{3}));
  BOOST_TEST((r.info("A/col_idx").dtype == DType::I32));
  Tensor part = r.read_rows("A/values", 1, 2);
  BOOST_TEST((part.shape() == Shape{2}));
  BOOST_TEST(part.data<double>()[0] == csr.values.data<double>()[1]);
  BOOST_TEST(part.data<double>()[1] == csr.values.data<double>()[2]);
  BOOST_TEST(r.read_rows("A/values", 3, 0).numel() == 0);
  BOOST_CHECK_THROW(r.read_rows("A/values", 2, 2), InputError);
  BOOST_CHECK_THROW(r.read_rows("A/values", -1, 1), InputError);
  BOOST_CHECK_THROW(r.read_rows("scalar", 0, 1), InputError);
  BOOST_TEST(!r.has("nope"));
  BOOST_CHECK_THROW(r.read("nope"), InputError);
  BOOST_CHECK_THROW(r.read_csr("group"), InputError);
  BOOST_CHECK_THROW(r.attr("/", "nope"), InputError);
}

#if defined(RLX_TEST_RAW_HDF5)
// Files rlx does not write itself but must read: a u32 dataset (read as i64), a dataset
// created but never written (fill values), a compressed chunked one and a compact one —
// each passes the reader's size checks — and h5py's variable-length string attribute.
BOOST_AUTO_TEST_CASE(hdf5_layouts_of_other_writers) {
  fs::path p = scratch() / "others.h5";
  {
    hid_t f = H5Fcreate(p.string().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    BOOST_REQUIRE(f >= 0);
    auto make = [&](const char* name, hid_t type, hsize_t n, hid_t dcpl, const void* data) {
      hid_t sp = H5Screate_simple(1, &n, nullptr);
      hid_t d = H5Dcreate2(f, name, type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
      BOOST_REQUIRE(d >= 0);
      if (data) BOOST_REQUIRE(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
      H5Dclose(d);
      H5Sclose(sp);
    };
    const uint32_t u[] = {1, 2, 4000000000u};
    make("u32", H5T_NATIVE_UINT32, 3, H5P_DEFAULT, u);
    make("unwritten", H5T_NATIVE_DOUBLE, 4, H5P_DEFAULT, nullptr);
    float c[10];
    for (int i = 0; i < 10; ++i) c[i] = float(i) * 0.5f;
    hid_t chunked = H5Pcreate(H5P_DATASET_CREATE);
    const hsize_t chunk = 4;
    H5Pset_chunk(chunked, 1, &chunk);
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) H5Pset_deflate(chunked, 1);
    make("chunked", H5T_NATIVE_FLOAT, 10, chunked, c);
    H5Pclose(chunked);
    const int32_t k[] = {-7, 0, 7};
    hid_t compact = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(compact, H5D_COMPACT);
    make("compact", H5T_NATIVE_INT32, 3, compact, k);
    H5Pclose(compact);
    // A str attribute as h5py writes it: a variable-length UTF-8 string.
    hid_t vstr = H5Tcopy(H5T_C_S1);
    H5Tset_size(vstr, H5T_VARIABLE);
    H5Tset_cset(vstr, H5T_CSET_UTF8);
    hid_t scalar = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "format", vstr, scalar, H5P_DEFAULT, H5P_DEFAULT);
    const char* csr = "csr";
    BOOST_REQUIRE(a >= 0 && H5Awrite(a, vstr, &csr) >= 0);
    H5Aclose(a);
    H5Sclose(scalar);
    H5Tclose(vstr);
    H5Fclose(f);
  }
  io::H5Reader r(p.string());
  BOOST_TEST(std::get<std::string>(r.attr("/", "format")) == "csr");
  Tensor u = r.read("u32");
  BOOST_REQUIRE(u.dtype() == DType::I64);
  BOOST_TEST(u.data<int64_t>()[2] == 4000000000LL);
  Tensor z = r.read("unwritten");
  BOOST_REQUIRE(z.numel() == 4);
  for (int i = 0; i < 4; ++i) BOOST_TEST(z.data<double>()[i] == 0.0);
  Tensor c = r.read("chunked");
  BOOST_REQUIRE(c.numel() == 10);
  BOOST_TEST(c.data<float>()[9] == 4.5f);
  Tensor k = r.read("compact");
  BOOST_REQUIRE(k.numel() == 3);
  BOOST_TEST(k.data<int32_t>()[0] == -7);
}
#endif

// Every one-byte change of a small file (a dataset, an attribute, a CSR group) either reads
// or fails with an InputError: never another exception, never a crash. Before the checks
// in H5Reader::read (storage against shape), some changes made HDF5 read through a null
// pointer and others asked for terabytes. (Mutated data bytes just read as other values.)
BOOST_AUTO_TEST_CASE(hdf5_mutations_are_errors_not_crashes, *boost::unit_test::precondition(test::Hdf5Present())) {
  fs::path good = scratch() / "fuzz_good.h5";
  {
    io::H5Writer w(good.string());
    w.write("x", random_tensor(DType::F64, {5}, 1));
    w.attr("/", "iterations", int64_t(42));
    io::CsrArrays csr;
    csr.rows = 2;
    csr.cols = 2;
    csr.row_ptr = Tensor::empty(DType::I32, {3});
    csr.col_idx = Tensor::empty(DType::I32, {2});
    int32_t rp[] = {0, 1, 2}, ci[] = {1, 0};
    std::memcpy(csr.row_ptr.raw(), rp, sizeof rp);
    std::memcpy(csr.col_idx.raw(), ci, sizeof ci);
    csr.values = random_tensor(DType::F32, {2}, 2);
    w.write_csr("A", csr);
    w.commit();
  }
  const std::string bytes = read_bytes(good);
  fs::path p = scratch() / "fuzz.h5";
  test::Outcomes o;
  {  // the unchanged file reads
    io::H5Reader r(good.string());
    BOOST_TEST(r.read("x").numel() == 5);
    BOOST_TEST(r.read_csr("A").rows == 2);
  }
  for (size_t i = 0; i < bytes.size(); ++i)
    for (char ch : {'\0', '\xff', '\x01'}) {
      if (bytes[i] == ch) continue;
      std::string m = bytes;
      m[i] = ch;
      fs::remove(p);  // a new file each time (HDF5 must not find an earlier one still open)
      write_bytes(p, m);
      o.attempt("byte " + std::to_string(i) + " -> " + std::to_string(int(static_cast<unsigned char>(ch))), [&] {
        io::H5Reader r(p.string());
        (void)r.read("x");
        (void)r.attr("/", "iterations");
        (void)r.read_csr("A");
      });
    }
  BOOST_TEST_MESSAGE(o.read << " variants read, " << o.refused << " refused");
  BOOST_TEST(o.refused > 0);
  BOOST_TEST(o.read > 0);  // (changed data bytes read as other values)
}

BOOST_AUTO_TEST_CASE(hdf5_writes_are_atomic_and_bad_files_named, *boost::unit_test::precondition(test::Hdf5Present())) {
  fs::path p = scratch() / "atomic.h5";
  {
    io::H5Writer w(p.string());
    w.write("x", random_tensor(DType::F64, {5}, 1));
    w.commit();
  }
  auto before = fs::file_size(p);
  try {
    io::H5Writer w(p.string());
    w.write("x", random_tensor(DType::F64, {500}, 2));
    w.write("x", random_tensor(DType::F64, {5}, 3));  // a second "x" fails: the write is abandoned
    BOOST_ERROR("duplicate dataset accepted");
  } catch (const Error&) {
  }
  BOOST_TEST(fs::file_size(p) == before);  // the old file is untouched
  for (auto& e : fs::directory_iterator(scratch()))
    BOOST_TEST(e.path().filename().string().find(".tmp.") == std::string::npos, "left behind: " << e.path());
  fs::path junk = scratch() / "junk.h5";
  write_bytes(junk, "this is not an HDF5 file");
  try {
    io::H5Reader r(junk.string());
    BOOST_ERROR("junk accepted");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("junk.h5") != std::string::npos);
  }
  BOOST_CHECK_THROW(io::H5Reader((scratch() / "missing.h5").string()), InputError);
  BOOST_CHECK_THROW(io::H5Writer((scratch() / "no_such_dir" / "x.h5").string()), InputError);
}
