#include "nn/data/loader.hpp"

#include <bit>
#include <cstring>
#include <numeric>
#include <utility>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace rlx::nn {

std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  if (n < 0) throw InputError("epoch_order: negative sample count " + std::to_string(n));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  const uint64_t stream = rng_bits(seed, uint64_t(epoch));
  uint64_t counter = 0;
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t bound = uint64_t(i);  // j in [0, bound]
    const uint64_t mask = std::bit_ceil(bound + 1) - 1;
    uint64_t j;
    do {
      j = rng_bits(stream, counter++) & mask;
    } while (j > bound);
    std::swap(order[size_t(i)], order[size_t(j)]);
  }
  return order;
}

namespace {

// Bytes of one sample (a row along the first dimension) of a host tensor, checked.
size_t row_bytes(const Tensor& t, const char* what) {
  if (!t.defined()) throw InputError(std::string("Loader: the ") + what + " tensor is empty (not defined)");
  if (!t.is_host()) throw InputError(std::string("Loader: the ") + what + " tensor is not in host memory");
  if (t.rank() == 0) throw InputError(std::string("Loader: the ") + what + " tensor is a scalar (its first dimension counts the samples)");
  if (t.dtype() == DType::I4) throw InputError(std::string("Loader: the ") + what + " tensor is packed i4 (rows are not whole bytes)");
  const Shape row(t.shape().begin() + 1, t.shape().end());
  return dtype_storage_bytes(t.dtype(), numel(row));
}

}  // namespace

Loader::Loader(Tensor images, Tensor labels, LoaderOptions options) : opt_(std::move(options)) {
  image_row_bytes_ = row_bytes(images, "images");
  label_row_bytes_ = row_bytes(labels, "labels");
  if (images.shape()[0] != labels.shape()[0])
    throw InputError("Loader: " + std::to_string(images.shape()[0]) + " images (" + images.type().str() + ") but " +
                     std::to_string(labels.shape()[0]) + " labels (" + labels.type().str() + ")");
  if (opt_.batch_size < 1) throw InputError("Loader: batch size " + std::to_string(opt_.batch_size) + " (at least 1)");
  images_ = images.contiguous();
  labels_ = labels.contiguous();
  n_ = images_.shape()[0];
  batches_ = opt_.drop_last ? n_ / opt_.batch_size : (n_ + opt_.batch_size - 1) / opt_.batch_size;
  start_epoch(0);
  if (opt_.prefetch) worker_ = std::thread([this] { work(); });
}

Loader::~Loader() {
  {
    std::lock_guard lk(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

int64_t Loader::epoch() const {
  std::lock_guard lk(m_);
  return epoch_;
}

void Loader::start_epoch(int64_t epoch) {
  if (epoch < 0) throw InputError("Loader: epoch " + std::to_string(epoch) + " (epochs count from 0)");
  std::vector<int64_t> order;
  if (opt_.shuffle) {
    order = epoch_order(n_, opt_.seed, epoch);
  } else {
    order.resize(size_t(n_));
    std::iota(order.begin(), order.end(), int64_t(0));
  }
  auto shared = std::make_shared<const std::vector<int64_t>>(std::move(order));
  {
    std::lock_guard lk(m_);
    ++generation_;
    epoch_ = epoch;
    order_ = std::move(shared);
    prepared_ = taken_ = 0;
    ready_.reset();
    error_ = nullptr;
  }
  cv_.notify_all();
}

Batch Loader::assemble(const std::vector<int64_t>& order, int64_t epoch, int64_t index) const {
  const int64_t first = index * opt_.batch_size;
  const int64_t b = std::min(opt_.batch_size, n_ - first);
  auto rows_of = [&](const Tensor& src, size_t row) {
    Shape s = src.shape();
    s[0] = b;
    Tensor t = Tensor::empty(src.dtype(), s);
    const char* from = static_cast<const char*>(src.raw());
    char* to = static_cast<char*>(t.raw());
    for (int64_t r = 0; r < b; ++r)
      std::memcpy(to + size_t(r) * row, from + size_t(order[size_t(first + r)]) * row, row);
    return t;
  };
  Batch batch{rows_of(images_, image_row_bytes_), rows_of(labels_, label_row_bytes_), epoch, index};
  if (opt_.transform) opt_.transform(batch);
  return batch;
}

void Loader::work() {
  std::unique_lock lk(m_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || (!ready_ && !error_ && prepared_ < batches_); });
    if (stop_) return;
    const uint64_t generation = generation_;
    const std::shared_ptr<const std::vector<int64_t>> order = order_;
    const int64_t epoch = epoch_, index = prepared_;
    lk.unlock();
    std::optional<Batch> batch;
    std::exception_ptr error;
    try {
      batch = assemble(*order, epoch, index);
    } catch (...) {
      error = std::current_exception();
    }
    lk.lock();
    if (generation != generation_) continue;  // start_epoch came meanwhile: no one wants this batch
    if (error) {
      error_ = error;
    } else {
      ready_ = std::move(batch);
      ++prepared_;
    }
    cv_.notify_all();
  }
}

std::optional<Batch> Loader::next() {
  if (!opt_.prefetch) {
    if (taken_ >= batches_) return std::nullopt;
    Batch b = assemble(*order_, epoch_, taken_);
    ++taken_;
    return b;
  }
  std::unique_lock lk(m_);
  if (taken_ >= batches_) return std::nullopt;
  cv_.wait(lk, [&] { return ready_.has_value() || error_; });
  if (error_) {
    std::exception_ptr e = std::exchange(error_, nullptr);
    lk.unlock();
    cv_.notify_all();  // the worker retries the batch
    std::rethrow_exception(e);
  }
  Batch b = std::move(*ready_);
  ready_.reset();
  ++taken_;
  lk.unlock();
  cv_.notify_all();  // the worker starts on the batch after this one
  return b;
}

}  // namespace rlx::nn
