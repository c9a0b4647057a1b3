// GGUF files spelled out field by field, for tests that need a file rlx's reader has not
// seen (bad headers, fresh random tensors).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace rlx::test {

struct Bytes {
  std::string b;
  Bytes& raw(const std::string& s) { b += s; return *this; }
  template <class T>
  Bytes& put(T v) {
    char c[sizeof(T)];
    std::memcpy(c, &v, sizeof(T));
    b.append(c, sizeof(T));
    return *this;
  }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(const std::string& s) { return u64(s.size()).raw(s); }
  // A tensor info: name, dims (GGUF order), ggml type, offset.
  Bytes& info(const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    str(name).u32(uint32_t(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  // Zero bytes up to a multiple of `align`: the start of the data section.
  Bytes& pad(size_t align = 32) { b.append((align - b.size() % align) % align, '\0'); return *this; }
};

// The fixed header: magic, version, tensor count, metadata count.
inline Bytes header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Bytes g;
  g.raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  return g;
}

}  // namespace rlx::test
