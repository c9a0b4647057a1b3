// Tensors: a typed, shaped view (strides in elements) onto a Buffer that some
// allocator owns. The host allocator lives here; devices bring their own.
#pragma once
#include <memory>
#include <string>

#include "core/shape.hpp"

namespace rlx {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual std::string name() const = 0;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) = 0;
  // True when the host may dereference this allocator's pointers directly.
  virtual bool host_accessible() const = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  // dst and src both in this allocator's memory. The default stages through the host.
  virtual void copy_within(void* dst, const void* src, size_t bytes);
};

Allocator* host_allocator();  // 64-byte aligned host memory

class Tensor;
// A rank-0 host tensor holding re (+ i*im for c64), converted to t as cast does
// (i4 is stored as i8).
Tensor scalar_tensor(DType t, double re, double im = 0.0);

struct Buffer {
  Allocator* alloc = nullptr;
  void* data = nullptr;
  size_t bytes = 0;
  // Set for host memory that another object owns and keeps alive (a file mapping): the
  // buffer then holds that object and never deallocates `data`.
  std::shared_ptr<const void> owner;
  Buffer(Allocator* a, size_t n);
  Buffer(std::shared_ptr<const void> owner, void* data, size_t n);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(DType t, Shape s, Allocator* a = host_allocator());
  static Tensor zeros(DType t, Shape s);  // host
  // A tensor over memory someone else owns (the executor's arena). Not freed.
  static Tensor view_of(void* data, Allocator* a, DType t, Shape s);
  // A host tensor over memory that `owner` keeps alive (a file mapping), without a copy: the
  // tensor and every view of it hold the owner. The memory must be host memory laid out
  // contiguously for t and s, aligned to t's element size.
  static Tensor over(std::shared_ptr<const void> owner, const void* data, DType t, Shape s);

  bool defined() const { return buf_ != nullptr || raw_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int rank() const { return int(shape_.size()); }
  int64_t numel() const { return rlx::numel(shape_); }
  size_t nbytes() const { return dtype_storage_bytes(dtype_, numel()); }
  TensorType type() const { return {dtype_, shape_}; }
  Allocator* allocator() const { return alloc_; }
  bool is_host() const { return alloc_ && alloc_->host_accessible(); }
  bool is_contiguous() const;

  void* raw() const;
  template <class T> T* data() const { return static_cast<T*>(raw()); }

  Tensor reshape(Shape s) const;  // a view; requires contiguity
  Tensor contiguous() const;      // host only; copies when strided
  Tensor to(Allocator* a) const;  // a contiguous copy on another allocator
  Tensor clone() const { return to(alloc_); }
  Tensor with_strides(Shape s, std::vector<int64_t> strides, int64_t offset_elems) const;  // a strided view

 private:
  std::shared_ptr<Buffer> buf_;
  void* raw_ = nullptr;  // for view_of
  Allocator* alloc_ = nullptr;
  size_t offset_bytes_ = 0;
  DType dtype_ = DType::F32;
  Shape shape_;
  std::vector<int64_t> strides_;
};

}  // namespace rlx
