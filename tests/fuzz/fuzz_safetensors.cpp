// safetensors reader (src/io/safetensors.hpp), on the bytes in memory
// (SafetensorsFile::from_bytes: the same checks as a mapped file). A file that reads must
// hold its tensors inside its data section, give every tensor of an rlx dtype (by tensor() and,
// with the same values, by view()), and write and read back (through a mapped temporary file
// of this process, in /dev/shm when it is writable, else $TMPDIR or /tmp) to the same names in
// the same order, dtypes, shapes, bytes and metadata. A file that reads but does not write is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "common.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"

using namespace rlx;

namespace {

std::string out_path;

void remove_file() { std::remove(out_path.c_str()); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  out_path = dir + "/rlx-fuzz-safetensors." + std::to_string(getpid()) + ".out.safetensors";
  std::atexit(remove_file);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RLX_FUZZ_GUARD({
    const io::SafetensorsFile f =
        io::SafetensorsFile::from_bytes(std::string_view(reinterpret_cast<const char*>(data), size), "input");
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const io::SafetensorsEntry& e : f.tensors()) {
      if (e.begin < 0 || e.end < e.begin || f.data_offset() + e.end > int64_t(size))
        fuzz::finding("tensor '" + e.name + "' lies outside the data section");
      const auto raw = f.bytes(e.name);
      if (raw.size() != size_t(e.end - e.begin)) fuzz::finding("bytes() of '" + e.name + "' has the wrong length");
      if (io::dtype_from_safetensors(e.dtype)) {
        tensors.emplace_back(e.name, f.tensor(e.name));  // a bad bool is an InputError
        // view() holds the same values as tensor(), over the bytes or copied.
        const Tensor v = f.view(e.name);
        const Tensor& t = tensors.back().second;
        if (!(v.type() == t.type()) || (t.nbytes() > 0 && std::memcmp(v.raw(), t.raw(), t.nbytes()) != 0))
          fuzz::finding("view() of '" + e.name + "' differs from tensor()");
      }
    }
    if (tensors.size() == f.tensors().size()) {
      try {
        io::write_safetensors(out_path, tensors, f.metadata());
      } catch (const InputError& e) {
        fuzz::finding(std::string("a file that reads does not write: ") + e.what());
      }
      const io::SafetensorsFile g(out_path);
      if (g.metadata() != f.metadata()) fuzz::finding("metadata differs after a round trip");
      if (g.tensors().size() != f.tensors().size()) fuzz::finding("tensor count differs after a round trip");
      for (size_t i = 0; i < f.tensors().size(); ++i) {
        const io::SafetensorsEntry &a = f.tensors()[i], &b = g.tensors()[i];
        const auto x = f.bytes(a.name), y = g.bytes(b.name);
        if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || x.size() != y.size() ||
            (!x.empty() && std::memcmp(x.data(), y.data(), x.size()) != 0))
          fuzz::finding("tensor " + std::to_string(i) + " ('" + a.name + "') differs after a round trip");
      }
    }
  })
  return 0;
}
