// NumPy .npy reader (src/io/npy.hpp), as `rlx run --input x=FILE.npy` reads it. read_npy
// takes a path, so each input is written to a temporary file of this process (in /dev/shm
// when it is writable, else $TMPDIR or /tmp). An array that reads must write and read back
// to the same type and bytes; a bool array must hold only 0 and 1 (it is read as C++ bool).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common.hpp"
#include "core/error.hpp"
#include "io/npy.hpp"

using namespace rlx;

namespace {

std::string in_path, out_path;

void remove_files() {
  std::remove(in_path.c_str());
  std::remove(out_path.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  std::string stem = dir + "/rlx-fuzz-npy." + std::to_string(getpid());
  in_path = stem + ".in.npy";
  out_path = stem + ".out.npy";
  std::atexit(remove_files);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FILE* f = std::fopen(in_path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) {
    std::perror(in_path.c_str());
    std::abort();  // not a finding: the harness cannot run
  }
  RLX_FUZZ_GUARD({
    Tensor t = io::read_npy(in_path);
    if (t.dtype() == DType::Bool) {
      int64_t ones = 0;
      for (int64_t i = 0; i < t.numel(); ++i) ones += t.data<bool>()[i];  // UBSan: a byte other than 0/1
      (void)ones;
    }
    io::write_npy(out_path, t);
    Tensor u = io::read_npy(out_path);
    if (u.type() != t.type() || std::memcmp(u.raw(), t.raw(), t.nbytes()) != 0)
      fuzz::finding(".npy written and read back differs: " + t.type().str() + " -> " + u.type().str());
  })
  return 0;
}
