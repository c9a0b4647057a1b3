#include "core/tensor.hpp"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/checked.hpp"
#include "core/env.hpp"
#include "core/error.hpp"

namespace rlx {

namespace {
constexpr size_t kHugePage = size_t(2) << 20, kHugeFrom = size_t(8) << 20;

// RLX_HUGEPAGES: 1 (default: huge pages, staggered starts), 0 (small pages), aligned (huge
// pages, every large buffer starting on a 2 MiB boundary).
enum class Pages { Staggered, Small, Aligned };
Pages page_mode() {
  static const Pages m = Pages(env_choice("RLX_HUGEPAGES", {"1", "0", "aligned"}));
  return m;
}

// Successive large buffers start at different offsets into their first huge page (multiples
// of 64 bytes spread over the 2 MiB): on huge pages the low 21 address bits are physical too,
// and buffers that all start on a 2 MiB boundary put the same element of every stream (a
// matrix's values and column indices, the vectors) in the same cache sets.
size_t next_skew() {
  static std::atomic<uint64_t> k{0};
  return size_t((k.fetch_add(1, std::memory_order_relaxed) * 0x11040u) & (kHugePage - 1) & ~uint64_t(63));
}

// Whether a buffer of `bytes` is large enough for huge pages (the test allocate and deallocate share).
bool on_huge_pages(size_t bytes) { return page_mode() != Pages::Small && (bytes + 63) / 64 * 64 >= kHugeFrom; }

class HostAllocator final : public Allocator {
 public:
  std::string name() const override { return "host"; }
  void* allocate(size_t bytes) override {
    if (bytes > (SIZE_MAX >> 1)) throw DeviceError("host: out of memory allocating " + std::to_string(bytes) + " bytes");
    size_t n = (bytes + 63) / 64 * 64;
    // Large buffers (a program's arena, a batch's activations, a matrix's arrays) lie on
    // transparent huge pages (where THP is "madvise", as on Debian, the kernel gives them only
    // on request): the GEMMs, attention and SpMV that stream through them take fewer TLB
    // misses. The block starts on a huge-page boundary and the buffer a skew into it; the
    // rounding and the skew waste less than 4 MiB of an allocation of 8 MiB or more.
    size_t align = 64, skew = 0;
    if (on_huge_pages(bytes)) {
      align = kHugePage;
      if (page_mode() == Pages::Staggered) skew = next_skew();
      n = (n + skew + kHugePage - 1) / kHugePage * kHugePage;
    }
    void* p = std::aligned_alloc(align, n ? n : 64);
    if (!p) throw DeviceError("host: out of memory allocating " + std::to_string(bytes) + " bytes");
    if (align == kHugePage) madvise(p, n, MADV_HUGEPAGE);  // (advice: a refusal changes nothing)
    return static_cast<char*>(p) + skew;
  }
  // (a large buffer's block starts at the 2 MiB boundary at or below it: its skew is less)
  void deallocate(void* p, size_t bytes) override {
    std::free(on_huge_pages(bytes) ? reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(kHugePage - 1)) : p);
  }
  bool host_accessible() const override { return true; }
  void copy_to_host(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void copy_from_host(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
};
}  // namespace

Allocator* host_allocator() {
  static HostAllocator a;
  return &a;
}

Tensor scalar_tensor(DType t, double re, double im) {
  if (t == DType::I4) t = DType::I8;
  Tensor r = Tensor::empty(t, {});
  visit_dtype(t, [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_same_v<T, c64>)
      *r.data<T>() = c64(float(re), float(im));
    else if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>)
      *r.data<T>() = T(float(re));
    else
      *r.data<T>() = static_cast<T>(re);
  });
  return r;
}

Buffer::Buffer(Allocator* a, size_t n) : alloc(a), data(a->allocate(n)), bytes(n) {}
Buffer::Buffer(std::shared_ptr<const void> o, void* d, size_t n) : alloc(host_allocator()), data(d), bytes(n), owner(std::move(o)) {}
Buffer::~Buffer() {
  if (!owner) alloc->deallocate(data, bytes);
}

Tensor Tensor::empty(DType t, Shape s, Allocator* a) {
  for (int64_t d : s)
    if (d < 0) throw ShapeError("negative extent in shape " + shape_str(s));
  Tensor r;
  r.dtype_ = t;
  r.shape_ = std::move(s);
  r.strides_ = contiguous_strides(r.shape_);
  r.alloc_ = a;
  r.buf_ = std::make_shared<Buffer>(a, dtype_storage_bytes(t, r.numel()));
  return r;
}

Tensor Tensor::zeros(DType t, Shape s) {
  Tensor r = empty(t, std::move(s));
  std::memset(r.raw(), 0, r.buf_->bytes);
  return r;
}

Tensor Tensor::view_of(void* data, Allocator* a, DType t, Shape s) {
  Tensor r;
  r.dtype_ = t;
  r.shape_ = std::move(s);
  r.strides_ = contiguous_strides(r.shape_);
  r.alloc_ = a;
  r.raw_ = data;
  return r;
}

Tensor Tensor::over(std::shared_ptr<const void> owner, const void* data, DType t, Shape s) {
  for (int64_t d : s)
    if (d < 0) throw ShapeError("negative extent in shape " + shape_str(s));
  if (!owner) throw InternalError("Tensor::over: no owner for the memory");
  const size_t bytes = dtype_storage_bytes(t, rlx::numel(s));
  if (bytes && !data) throw InternalError("Tensor::over: no memory for " + std::to_string(bytes) + " bytes");
  if (reinterpret_cast<uintptr_t>(data) % dtype_size(t) != 0)
    throw InternalError(std::string("Tensor::over: memory not aligned for ") + dtype_name(t));
  Tensor r;
  r.dtype_ = t;
  r.shape_ = std::move(s);
  r.strides_ = contiguous_strides(r.shape_);
  r.alloc_ = host_allocator();
  r.buf_ = std::make_shared<Buffer>(std::move(owner), const_cast<void*>(data), bytes);
  return r;
}

void* Tensor::raw() const {
  char* base = static_cast<char*>(buf_ ? buf_->data : raw_);
  return base + offset_bytes_;
}

bool Tensor::is_contiguous() const {
  int64_t acc = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != acc) return false;
    acc = saturating_mul(acc, shape_[i]);
  }
  return true;
}

Tensor Tensor::reshape(Shape s) const {
  if (rlx::numel(s) != numel())
    throw ShapeError("cannot reshape " + shape_str(shape_) + " to " + shape_str(s) + ": element counts differ");
  if (!is_contiguous()) return contiguous().reshape(std::move(s));
  Tensor r = *this;
  r.shape_ = std::move(s);
  r.strides_ = contiguous_strides(r.shape_);
  return r;
}

Tensor Tensor::with_strides(Shape s, std::vector<int64_t> strides, int64_t offset_elems) const {
  Tensor r = *this;
  r.shape_ = std::move(s);
  r.strides_ = std::move(strides);
  r.offset_bytes_ += size_t(offset_elems) * dtype_size(dtype_);
  return r;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  if (!is_host()) throw InternalError("contiguous() of a non-host strided tensor");
  Tensor r = empty(dtype_, shape_, alloc_);
  size_t es = dtype_size(dtype_);
  const char* src = static_cast<const char*>(raw());
  char* dst = static_cast<char*>(r.raw());
  int64_t n = numel();
  std::vector<int64_t> idx(shape_.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * strides_[d];
    std::memcpy(dst + i * es, src + off * int64_t(es), es);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < shape_[d]) break;
      idx[d] = 0;
    }
  }
  return r;
}

void Allocator::copy_within(void* dst, const void* src, size_t bytes) {
  if (host_accessible()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  std::vector<char> h(bytes);
  copy_to_host(h.data(), src, bytes);
  copy_from_host(dst, h.data(), bytes);
}

Tensor Tensor::to(Allocator* a) const {
  Tensor src = (is_host() ? contiguous() : *this);
  if (!src.is_contiguous()) throw InternalError("to() of a strided device tensor");
  Tensor r = empty(dtype_, shape_, a);
  size_t n = nbytes();
  if (src.alloc_ == a)
    a->copy_within(r.raw(), src.raw(), n);
  else if (src.alloc_->host_accessible())
    a->copy_from_host(r.raw(), src.raw(), n);
  else if (a->host_accessible())
    src.alloc_->copy_to_host(r.raw(), src.raw(), n);
  else {
    Tensor h = src.to(host_allocator());
    a->copy_from_host(r.raw(), h.raw(), n);
  }
  return r;
}

}  // namespace rlx
