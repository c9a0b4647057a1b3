// Batches for training from two host tensors whose first dimension counts the samples
// (images [N, ...] and labels [N, ...], any dtype but packed i4): seeded shuffling, batches
// of a fixed size, the last partial batch kept or dropped, a fresh order every epoch, and the
// next batch assembled on a host thread while the caller trains on the current one. One
// thread calls a loader's functions.
//
//   nn::Loader loader(mnist.train.images, mnist.train.labels, {.batch_size = 128, .seed = 7});
//   for (int64_t e = 0; e < epochs; ++e) {
//     loader.start_epoch(e);                        // the constructor starts epoch 0
//     while (std::optional<nn::Batch> b = loader.next()) train_step(b->images, b->labels);
//   }
//
// The order of an epoch depends only on (seed, epoch, N): a run resumed at epoch e sees the
// batches an uninterrupted run saw, on every platform (see epoch_order).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/tensor.hpp"

namespace rlx::nn {

struct Batch {
  Tensor images;      // [B, ...]: rows of the loader's images, in the epoch's order
  Tensor labels;      // [B, ...]: the same rows of its labels
  int64_t epoch = 0;  // the epoch it belongs to
  int64_t index = 0;  // its position in that epoch, from 0
};

struct LoaderOptions {
  int64_t batch_size = 128;
  bool shuffle = true;     // false: samples in their stored order every epoch
  uint64_t seed = 0;       // the shuffle's seed (epoch_order)
  bool drop_last = false;  // true: an epoch's last batch is dropped when it has fewer than batch_size samples
  bool prefetch = true;    // false: next() assembles its batch on the caller's thread
  // Applied to each batch after it is assembled (augmentation, normalisation), on the
  // loader's thread when prefetching; an exception it throws reaches the caller from next().
  std::function<void(Batch&)> transform;
};

// The sample order of `epoch` for n samples: a Fisher-Yates shuffle (i from n-1 down to 1
// swaps i with a uniform j in [0, i]) whose draws are core/rng.hpp's counter RNG,
// rng_bits(rng_bits(seed, epoch), c) for c = 0, 1, 2, ...; j takes the low bits of a draw
// below the next power of two above i and rejects values past i, so it is exactly uniform.
// Integer arithmetic only: the same order on every platform and compiler.
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch);

class Loader {
 public:
  // Throws InputError for tensors that are not on the host, of rank 0, of packed i4, or whose
  // first dimensions differ, and for a batch size below 1. The loader reads the tensors'
  // memory while it runs: the caller does not write to them meanwhile.
  Loader(Tensor images, Tensor labels, LoaderOptions options = {});
  ~Loader();  // stops the prefetch thread (a batch it is assembling is finished and dropped)
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  int64_t samples() const { return n_; }
  int64_t batches_per_epoch() const { return batches_; }
  int64_t epoch() const;

  // Begins `epoch` (>= 0) with its own order; a batch of the previous epoch not yet taken
  // is dropped.
  void start_epoch(int64_t epoch);
  // The current epoch's next batch, or nullopt once all are taken. An exception from
  // assembling or transforming the batch is rethrown here; the batch is then retried by the
  // next call.
  std::optional<Batch> next();

 private:
  Batch assemble(const std::vector<int64_t>& order, int64_t epoch, int64_t index) const;
  void work();

  Tensor images_, labels_;
  LoaderOptions opt_;
  int64_t n_ = 0, batches_ = 0;
  size_t image_row_bytes_ = 0, label_row_bytes_ = 0;

  mutable std::mutex m_;
  std::condition_variable cv_;
  int64_t epoch_ = 0;
  std::shared_ptr<const std::vector<int64_t>> order_;  // shared with a batch in assembly
  uint64_t generation_ = 0;  // counts start_epoch calls: work for an older one is dropped
  int64_t prepared_ = 0;     // batches of this epoch assembled (ready_ holds the last)
  int64_t taken_ = 0;        // batches of this epoch returned by next()
  std::optional<Batch> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread worker_;  // last: started once every member above exists
};

}  // namespace rlx::nn
