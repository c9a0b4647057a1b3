// GGUF reader (src/io/gguf.hpp), on the bytes in memory (GgufFile::from_bytes: the same
// checks as a mapped file). A file that reads must hold every tensor of a known type inside
// itself, answer every metadata getter for the type each value has, and dequantize every
// tensor of a decoded type into as many f32 values as its shape holds and hand it out packed as
// its own bytes in rows of whole blocks (other types are an InputError), and view every tensor
// of an rlx dtype as the bytes tensor() copies; and the BPE tokenizer its keys may carry must
// build and encode, or be refused.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common.hpp"
#include "core/error.hpp"
#include "io/gguf.hpp"
#include "nn/models/bpe.hpp"

using namespace rlx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RLX_FUZZ_GUARD({
    const io::GgufFile f = io::GgufFile::from_bytes(std::string_view(reinterpret_cast<const char*>(data), size), "input");
    for (const auto& [key, v] : f.metadata()) {
      // Each getter either answers or refuses with an InputError naming the type found.
      try { f.get_int(key); } catch (const InputError&) {}
      try { f.get_float(key); } catch (const InputError&) {}
      try { f.get_string(key); } catch (const InputError&) {}
      try { f.get_int_array(key); } catch (const InputError&) {}
      try { f.get_float_array(key); } catch (const InputError&) {}
      try { f.get_string_array(key); } catch (const InputError&) {}
      if (v.type == io::GgufType::Bool && f.get_bool(key) != v.b) fuzz::finding("get_bool differs from the value");
    }
    if (f.data_offset() % int64_t(f.alignment()) != 0) fuzz::finding("the data section is not aligned");
    for (const io::GgufTensor& t : f.tensors()) {
      if (t.shape.size() != t.dims.size()) fuzz::finding("tensor '" + t.name + "': shape and dims differ in rank");
      if (t.nbytes >= 0 && (t.offset < 0 || f.data_offset() + t.offset + t.nbytes > int64_t(size)))
        fuzz::finding("tensor '" + t.name + "' lies outside the file");
      try {
        const Tensor x = f.dequantize(t.name);
        if (x.numel() != t.numel) fuzz::finding("tensor '" + t.name + "' dequantized to another element count");
      } catch (const InputError&) {
      }
      // view(): the bytes tensor() copies, or the same InputError.
      try {
        const Tensor c = f.tensor(t.name), v = f.view(t.name);
        if (v.type() != c.type() || (c.nbytes() && std::memcmp(v.raw(), c.raw(), c.nbytes()) != 0))
          fuzz::finding("tensor '" + t.name + "': view() differs from tensor()");
      } catch (const InputError&) {
      }
      // Packed: the tensor's own bytes as rows of whole blocks, or an InputError.
      try {
        const io::PackedTensor p = f.packed(t.name);
        if (p.blocks.nbytes() != size_t(t.nbytes)) fuzz::finding("tensor '" + t.name + "' packed to another byte count");
        if (p.k <= 0 ? t.numel != 0 : p.blocks.shape()[0] * p.k != t.numel)
          fuzz::finding("tensor '" + t.name + "' packed to rows that do not cover it");
      } catch (const InputError&) {
      }
    }
    // The byte-level BPE tokenizer its tokenizer.ggml keys may carry: one that builds encodes
    // a text to ids that name tokens, or the keys are refused with an InputError.
    try {
      const nn::BpeTokenizer tok = nn::BpeTokenizer::from_gguf(f);
      for (int64_t id : tok.encode("Hello, world! It's 2024 <|endoftext|>\n\te\xCC\x81"))
        if (!tok.has_token(id)) fuzz::finding("the GGUF tokenizer gave id " + std::to_string(id) + ", which names no token");
    } catch (const InputError&) {
    }
  })
  return 0;
}
