// nn/data: the batch loader (every sample once per epoch, seeded and reproducible orders,
// drop_last, prefetching equal to a synchronous pass, errors from its thread) and the MNIST
// loader (the files of data/mnist, and the errors for missing or wrong files).
#define BOOST_TEST_MODULE nn_data
#include <atomic>
#include <boost/test/unit_test.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include "core/error.hpp"
#include "nn/data/loader.hpp"
#include "nn/data/mnist.hpp"
#include "tests/support/cli.hpp"

using namespace rlx;
namespace fs = std::filesystem;

namespace {

// n samples whose rows say which sample they are: images f32 [n, 3] = (i, 2i, -i), labels
// i64 [n] = i.
struct Samples {
  Tensor images, labels;
};

Samples numbered(int64_t n) {
  Samples s{Tensor::empty(DType::F32, {n, 3}), Tensor::empty(DType::I64, {n})};
  for (int64_t i = 0; i < n; ++i) {
    s.images.data<float>()[3 * i] = float(i);
    s.images.data<float>()[3 * i + 1] = float(2 * i);
    s.images.data<float>()[3 * i + 2] = float(-i);
    s.labels.data<int64_t>()[i] = i;
  }
  return s;
}

std::vector<int64_t> labels_of(const nn::Batch& b) {
  const int64_t* p = b.labels.data<int64_t>();
  return std::vector<int64_t>(p, p + b.labels.shape()[0]);
}

// Every batch of the loader's current epoch.
std::vector<nn::Batch> drain(nn::Loader& l) {
  std::vector<nn::Batch> r;
  while (std::optional<nn::Batch> b = l.next()) r.push_back(std::move(*b));
  return r;
}

// The sample order an epoch's batches give, checking that image rows match their labels.
std::vector<int64_t> order_of(const std::vector<nn::Batch>& batches) {
  std::vector<int64_t> r;
  for (const nn::Batch& b : batches) {
    BOOST_REQUIRE(b.images.shape()[0] == b.labels.shape()[0]);
    for (int64_t i = 0; i < b.labels.shape()[0]; ++i) {
      const int64_t id = b.labels.data<int64_t>()[i];
      const float* row = b.images.data<float>() + 3 * i;
      BOOST_TEST((row[0] == float(id) && row[1] == float(2 * id) && row[2] == float(-id)), "row of sample " << id);
      r.push_back(id);
    }
  }
  return r;
}

bool same_batches(const std::vector<nn::Batch>& a, const std::vector<nn::Batch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (a[k].images.type() != b[k].images.type() || a[k].labels.type() != b[k].labels.type() ||
        a[k].index != b[k].index || a[k].epoch != b[k].epoch ||
        std::memcmp(a[k].images.raw(), b[k].images.raw(), a[k].images.nbytes()) != 0 ||
        std::memcmp(a[k].labels.raw(), b[k].labels.raw(), a[k].labels.nbytes()) != 0)
      return false;
  return true;
}

template <class F>
void expect_input_error(F&& f, const std::string& expect) {
  try {
    f();
    BOOST_ERROR("no error, expected: " << expect);
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find(expect) != std::string::npos, e.what() << " lacks: " << expect);
  }
}

}  // namespace

// The shuffle is pinned: these orders were computed by an independent Python transcription
// of core/rng.hpp's splitmix64 counter RNG and the documented Fisher-Yates rule, so a
// platform or library that permuted differently would fail here.
BOOST_AUTO_TEST_CASE(epoch_order_is_the_documented_shuffle) {
  BOOST_TEST(nn::epoch_order(10, 42, 0) == (std::vector<int64_t>{9, 2, 5, 1, 6, 8, 0, 7, 4, 3}), boost::test_tools::per_element());
  BOOST_TEST(nn::epoch_order(10, 42, 1) == (std::vector<int64_t>{5, 8, 4, 3, 2, 7, 1, 0, 9, 6}), boost::test_tools::per_element());
  BOOST_TEST(nn::epoch_order(10, 7, 0) == (std::vector<int64_t>{2, 5, 6, 9, 4, 7, 3, 8, 0, 1}), boost::test_tools::per_element());
  BOOST_TEST(nn::epoch_order(16, 0, 3) == (std::vector<int64_t>{2, 7, 5, 8, 0, 15, 3, 4, 12, 13, 9, 6, 10, 11, 1, 14}),
             boost::test_tools::per_element());
  BOOST_TEST(nn::epoch_order(0, 1, 0).empty());
  BOOST_TEST(nn::epoch_order(1, 1, 0) == std::vector<int64_t>{0});
}

BOOST_AUTO_TEST_CASE(every_sample_once_per_epoch_in_full_batches_but_the_last) {
  const Samples s = numbered(103);
  for (bool prefetch : {true, false}) {
    nn::Loader l(s.images, s.labels, {.batch_size = 10, .seed = 5, .prefetch = prefetch});
    BOOST_TEST(l.samples() == 103);
    BOOST_TEST(l.batches_per_epoch() == 11);
    for (int64_t e = 0; e < 3; ++e) {
      l.start_epoch(e);
      const std::vector<nn::Batch> batches = drain(l);
      BOOST_REQUIRE_EQUAL(batches.size(), 11u);
      for (size_t k = 0; k < batches.size(); ++k) {
        BOOST_TEST(batches[k].images.shape() == (Shape{k < 10 ? 10 : 3, 3}));
        BOOST_TEST(batches[k].labels.shape() == (Shape{k < 10 ? 10 : 3}));
        BOOST_TEST(batches[k].epoch == e);
        BOOST_TEST(batches[k].index == int64_t(k));
      }
      const std::vector<int64_t> order = order_of(batches);
      BOOST_TEST(order == nn::epoch_order(103, 5, e), boost::test_tools::per_element());
      BOOST_TEST(std::set<int64_t>(order.begin(), order.end()).size() == 103u);
      BOOST_TEST(!l.next().has_value());  // the epoch stays over until the next start_epoch
    }
  }
}

BOOST_AUTO_TEST_CASE(drop_last_drops_only_a_partial_last_batch) {
  const Samples s = numbered(103);
  nn::Loader l(s.images, s.labels, {.batch_size = 10, .seed = 5, .drop_last = true});
  BOOST_TEST(l.batches_per_epoch() == 10);
  const std::vector<nn::Batch> batches = drain(l);
  BOOST_REQUIRE_EQUAL(batches.size(), 10u);
  for (const nn::Batch& b : batches) BOOST_TEST(b.labels.shape()[0] == 10);
  const std::vector<int64_t> full = nn::epoch_order(103, 5, 0);
  BOOST_TEST(order_of(batches) == std::vector<int64_t>(full.begin(), full.begin() + 100), boost::test_tools::per_element());
  // A size that divides the samples loses nothing either way; fewer samples than one batch
  // give one batch or none.
  const Samples s100 = numbered(100);
  for (bool drop : {false, true}) {
    BOOST_TEST(nn::Loader(s100.images, s100.labels, {.batch_size = 10, .drop_last = drop}).batches_per_epoch() == 10);
    BOOST_TEST(nn::Loader(s.images, s.labels, {.batch_size = 200, .drop_last = drop}).batches_per_epoch() == (drop ? 0 : 1));
  }
}

BOOST_AUTO_TEST_CASE(orders_depend_on_seed_and_epoch_only) {
  const Samples s = numbered(257);
  auto epoch_of = [&](uint64_t seed, int64_t epoch, bool shuffle = true) {
    nn::Loader l(s.images, s.labels, {.batch_size = 32, .shuffle = shuffle, .seed = seed});
    l.start_epoch(epoch);
    return order_of(drain(l));
  };
  BOOST_TEST(epoch_of(11, 0) == epoch_of(11, 0), boost::test_tools::per_element());
  BOOST_TEST(epoch_of(11, 4) == epoch_of(11, 4), boost::test_tools::per_element());
  BOOST_TEST((epoch_of(11, 0) != epoch_of(11, 1)));
  BOOST_TEST((epoch_of(11, 1) != epoch_of(11, 2)));
  BOOST_TEST((epoch_of(11, 0) != epoch_of(12, 0)));
  std::vector<int64_t> identity(257);
  for (int64_t i = 0; i < 257; ++i) identity[size_t(i)] = i;
  BOOST_TEST(epoch_of(11, 3, false) == identity, boost::test_tools::per_element());
  // A run resumed at epoch 2 sees what an uninterrupted one saw there, also after an epoch
  // left half-way.
  nn::Loader l(s.images, s.labels, {.batch_size = 32, .seed = 11});
  l.next();
  l.next();
  l.start_epoch(1);
  drain(l);
  l.start_epoch(2);
  BOOST_TEST(l.epoch() == 2);
  BOOST_TEST(order_of(drain(l)) == epoch_of(11, 2), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(prefetch_gives_the_batches_of_a_synchronous_pass) {
  // Any dtype and row shape: u8 images [n, 2, 5], i32 labels [n, 2].
  const int64_t n = 1000;
  Tensor images = Tensor::empty(DType::U8, {n, 2, 5});
  Tensor labels = Tensor::empty(DType::I32, {n, 2});
  for (int64_t i = 0; i < n * 10; ++i) images.data<uint8_t>()[i] = uint8_t(i * 7);
  for (int64_t i = 0; i < n * 2; ++i) labels.data<int32_t>()[i] = int32_t(i * 31);
  for (bool drop : {false, true}) {
    nn::Loader fast(images, labels, {.batch_size = 64, .seed = 3, .drop_last = drop, .prefetch = true});
    nn::Loader slow(images, labels, {.batch_size = 64, .seed = 3, .drop_last = drop, .prefetch = false});
    for (int64_t e = 0; e < 3; ++e) {
      fast.start_epoch(e);
      slow.start_epoch(e);
      std::vector<nn::Batch> a;
      // The caller "trains" between batches while the next one is assembled.
      while (std::optional<nn::Batch> b = fast.next()) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        a.push_back(std::move(*b));
      }
      const std::vector<nn::Batch> b = drain(slow);
      BOOST_TEST(a.size() == size_t(drop ? 15 : 16));
      BOOST_TEST(same_batches(a, b), "epoch " << e << (drop ? " drop_last" : ""));
      BOOST_TEST(a.front().images.shape() == (Shape{64, 2, 5}));
      BOOST_TEST(a.front().labels.shape() == (Shape{64, 2}));
    }
  }
}

// An exception from assembling or transforming a batch (here the transform of batch 3,
// once) reaches the caller from next(), whether the batch was made on the loader's thread or
// the caller's; the batch is retried by the next call and the epoch goes on unchanged.
BOOST_AUTO_TEST_CASE(errors_on_the_loader_thread_reach_the_caller) {
  const Samples s = numbered(50);
  for (bool prefetch : {true, false}) {
    std::atomic<int> failures{0};
    nn::LoaderOptions o{.batch_size = 8, .seed = 9, .prefetch = prefetch};
    o.transform = [&](nn::Batch& b) {
      if (b.index == 3 && failures.fetch_add(1) == 0) throw std::runtime_error("augmentation failed on batch 3");
      for (int64_t i = 0; i < b.images.numel(); ++i) b.images.data<float>()[i] *= 2;  // the transform's work shows
    };
    nn::Loader l(s.images, s.labels, o);
    std::vector<int64_t> seen;
    int thrown = 0;
    for (;;) {
      try {
        std::optional<nn::Batch> b = l.next();
        if (!b) break;
        BOOST_TEST(b->images.data<float>()[0] == 2.0f * float(b->labels.data<int64_t>()[0]));
        for (int64_t v : labels_of(*b)) seen.push_back(v);
      } catch (const std::runtime_error& e) {
        ++thrown;
        BOOST_TEST(std::string(e.what()) == "augmentation failed on batch 3");
      }
    }
    BOOST_TEST(thrown == 1, (prefetch ? "prefetch" : "sync"));
    BOOST_TEST(seen == nn::epoch_order(50, 9, 0), boost::test_tools::per_element());
  }
}

// Destroying a loader stops its thread wherever it is: idle, waiting for the caller to take a
// batch, or in the middle of a slow transform.
BOOST_AUTO_TEST_CASE(destruction_stops_the_loader_thread) {
  const Samples s = numbered(40);
  for (int i = 0; i < 50; ++i) {
    nn::Loader l(s.images, s.labels, {.batch_size = 4, .seed = uint64_t(i)});
    if (i % 2) l.next();
  }
  nn::LoaderOptions slow{.batch_size = 4};
  slow.transform = [](nn::Batch&) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
  const auto t0 = std::chrono::steady_clock::now();
  { nn::Loader l(s.images, s.labels, slow); }
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)));
}

BOOST_AUTO_TEST_CASE(loader_refuses_bad_inputs) {
  const Samples s = numbered(10);
  expect_input_error([&] { nn::Loader(s.images, numbered(9).labels, {}); }, "10 images (f32[10,3]) but 9 labels (i64[9])");
  expect_input_error([&] { nn::Loader(s.images, s.labels, {.batch_size = 0}); }, "batch size 0 (at least 1)");
  expect_input_error([&] { nn::Loader(scalar_tensor(DType::F32, 1), s.labels, {}); }, "the images tensor is a scalar");
  expect_input_error([&] { nn::Loader(s.images, Tensor(), {}); }, "the labels tensor is empty");
  expect_input_error([&] { nn::Loader(Tensor::empty(DType::I4, {10, 4}), s.labels, {}); }, "packed i4");
  nn::Loader l(s.images, s.labels, {});
  expect_input_error([&] { l.start_epoch(-1); }, "epoch -1 (epochs count from 0)");
}

// The published files: sizes, scaling, the first labels, and the pixel sums of the first and
// last image (from Python: sum(gzip.open(F).read()[16:][:784]) and [-784:]).
BOOST_AUTO_TEST_CASE(load_mnist_reads_data_mnist) {
  const nn::Mnist m = nn::load_mnist(std::string(RLX_DATA) + "/mnist");
  struct Expect {
    const nn::MnistSplit& split;
    int64_t n;
    int first_sum, last_sum;
    std::vector<int64_t> first_labels;
  };
  for (const Expect& e : {Expect{m.train, 60000, 27525, 20920, {5, 0, 4, 1, 9, 2, 1, 3, 1, 4}},
                          Expect{m.test, 10000, 18454, 41833, {7, 2, 1, 0, 4, 1, 4, 9, 5, 9}}}) {
    BOOST_TEST(e.split.images.type().str() == "f32[" + std::to_string(e.n) + ",784]");
    BOOST_TEST(e.split.labels.type().str() == "i64[" + std::to_string(e.n) + "]");
    const float* x = e.split.images.data<float>();
    float lo = 1, hi = 0;
    for (int64_t i = 0; i < e.n * 784; ++i) lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    BOOST_TEST(lo == 0.0f);
    BOOST_TEST(hi == 1.0f);
    double first = 0, last = 0;
    for (int64_t i = 0; i < 784; ++i) first += x[i] * 255.0, last += x[(e.n - 1) * 784 + i] * 255.0;
    BOOST_TEST(std::lround(first) == e.first_sum);
    BOOST_TEST(std::lround(last) == e.last_sum);
    const int64_t* y = e.split.labels.data<int64_t>();
    BOOST_TEST(std::vector<int64_t>(y, y + 10) == e.first_labels, boost::test_tools::per_element());
  }
  // The training split through the loader: one epoch of batches of 128 covers it.
  nn::Loader l(m.train.images, m.train.labels, {.batch_size = 128, .seed = 1});
  BOOST_TEST(l.batches_per_epoch() == 469);
  int64_t seen = 0;
  while (std::optional<nn::Batch> b = l.next()) seen += b->labels.shape()[0];
  BOOST_TEST(seen == 60000);
}

namespace {

std::string idx_file(unsigned type, std::vector<uint32_t> dims, const std::string& data) {
  std::string s = {'\0', '\0', char(type), char(dims.size())};
  for (uint32_t d : dims)
    for (int b = 3; b >= 0; --b) s += char((d >> (8 * b)) & 0xff);
  return s + data;
}

void put(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

}  // namespace

BOOST_AUTO_TEST_CASE(load_mnist_names_missing_and_wrong_files) {
  const fs::path dir = test::scratch_dir("rlx_nn_data_test_") / "mnist";
  fs::create_directories(dir);
  expect_input_error([&] { nn::load_mnist((dir / "nowhere").string()); }, "nowhere: no such folder");
  // Uncompressed files are found too; the first missing one is named with both spellings.
  const std::string two_images = idx_file(0x08, {2, 28, 28}, std::string(2 * 784, '\x80'));
  put(dir / "train-images-idx3-ubyte", two_images);
  put(dir / "train-labels-idx1-ubyte", idx_file(0x08, {2}, "\x03\x07"));
  put(dir / "t10k-images-idx3-ubyte", two_images);
  expect_input_error([&] { nn::load_mnist(dir.string()); },
                     (dir / "t10k-labels-idx1-ubyte.gz").string() + ": not found, nor t10k-labels-idx1-ubyte");
  put(dir / "t10k-labels-idx1-ubyte", idx_file(0x08, {2}, "\x01\x02"));
  const nn::Mnist m = nn::load_mnist(dir.string());
  BOOST_TEST(m.test.images.type().str() == "f32[2,784]");
  BOOST_TEST(m.train.labels.data<int64_t>()[1] == 7);
  BOOST_TEST(m.train.images.data<float>()[5] == 128.0f / 255.0f);

  const std::string labels = (dir / "t10k-labels-idx1-ubyte").string(), images = (dir / "t10k-images-idx3-ubyte").string();
  put(labels, idx_file(0x08, {2}, "\x01\x0a"));
  expect_input_error([&] { nn::load_mnist(dir.string()); }, labels + ": label 10 at index 1 (MNIST labels are 0 to 9)");
  put(labels, idx_file(0x08, {3}, "\x01\x02\x03"));
  expect_input_error([&] { nn::load_mnist(dir.string()); }, labels + ": 3 labels for the 2 images of " + images);
  put(labels, idx_file(0x0C, {2}, std::string(8, '\0')));
  expect_input_error([&] { nn::load_mnist(dir.string()); }, labels + ": MNIST labels are u8[N], this file holds i32[2]");
  put(labels, idx_file(0x08, {2}, "\x01\x02"));
  put(images, idx_file(0x08, {2, 28, 27}, std::string(2 * 28 * 27, '\0')));
  expect_input_error([&] { nn::load_mnist(dir.string()); }, images + ": MNIST images are u8[N,28,28], this file holds u8[2,28,27]");
  put(images, "not an idx file");
  expect_input_error([&] { nn::load_mnist(dir.string()); }, images + ": not an IDX file");
}
