#include "nn/data/mnist.hpp"

#include <filesystem>

#include "core/error.hpp"
#include "io/idx.hpp"

namespace rlx::nn {

namespace {

namespace fs = std::filesystem;

constexpr int64_t kSide = 28;
constexpr int kClasses = 10;
constexpr const char* kStems[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                  "t10k-labels-idx1-ubyte"};

std::string expected_files(const std::string& dir) {
  std::string s;
  for (const char* stem : kStems) s += std::string(s.empty() ? "" : ", ") + stem;
  return s + " in " + dir + ", each gzip-compressed (.gz) or not";
}

// STEM.gz, else STEM, in dir: the published files come compressed, a user's may not.
std::string find_file(const std::string& dir, const std::string& stem) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError(dir + ": no such folder (MNIST expected there: " + expected_files(dir) + ")");
  for (const char* suffix : {".gz", ""}) {
    const fs::path p = fs::path(dir) / (stem + suffix);
    if (fs::exists(p, ec)) return p.string();
  }
  throw InputError((fs::path(dir) / (stem + ".gz")).string() + ": not found, nor " + stem + " (MNIST needs " +
                   expected_files(dir) + ")");
}

}  // namespace

MnistSplit load_mnist_split(const std::string& images_path, const std::string& labels_path) {
  const Tensor images = io::read_idx(images_path);
  const Tensor labels = io::read_idx(labels_path);
  const Shape& is = images.shape();
  if (images.dtype() != DType::U8 || is.size() != 3 || is[1] != kSide || is[2] != kSide)
    throw InputError(images_path + ": MNIST images are u8[N,28,28], this file holds " + images.type().str());
  if (labels.dtype() != DType::U8 || labels.rank() != 1)
    throw InputError(labels_path + ": MNIST labels are u8[N], this file holds " + labels.type().str());
  const int64_t n = is[0];
  if (labels.shape()[0] != n)
    throw InputError(labels_path + ": " + std::to_string(labels.shape()[0]) + " labels for the " + std::to_string(n) +
                     " images of " + images_path);

  MnistSplit s{Tensor::empty(DType::F32, {n, kSide * kSide}), Tensor::empty(DType::I64, {n})};
  const uint8_t* pix = images.data<uint8_t>();
  float* x = s.images.data<float>();
  const int64_t count = n * kSide * kSide;
  for (int64_t i = 0; i < count; ++i) x[i] = float(pix[i]) / 255.0f;  // 0 and 255 map to exactly 0 and 1
  const uint8_t* lab = labels.data<uint8_t>();
  int64_t* y = s.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (lab[i] >= kClasses)
      throw InputError(labels_path + ": label " + std::to_string(int(lab[i])) + " at index " + std::to_string(i) +
                       " (MNIST labels are 0 to 9)");
    y[i] = lab[i];
  }
  return s;
}

Mnist load_mnist(const std::string& dir) {
  // Every file is found before any is read: a missing one is reported at once.
  std::string paths[4];
  for (int i = 0; i < 4; ++i) paths[i] = find_file(dir, kStems[i]);
  return {load_mnist_split(paths[0], paths[1]), load_mnist_split(paths[2], paths[3])};
}

}  // namespace rlx::nn
