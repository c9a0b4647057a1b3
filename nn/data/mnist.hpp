// MNIST as training wants it: images flattened to f32 rows in [0, 1], labels as i64 class
// indices. The files are the four IDX files of the MNIST distribution (data/mnist/README.md),
// read with io::read_idx and checked for the shapes and label range MNIST has.
#pragma once
#include <string>

#include "core/tensor.hpp"

namespace rlx::nn {

// One split: images f32 [N, 784] (pixel / 255), labels i64 [N] in 0..9. Host tensors.
struct MnistSplit {
  Tensor images;
  Tensor labels;
};

struct Mnist {
  MnistSplit train;  // 60,000 in the published files
  MnistSplit test;   // 10,000
};

// Reads train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
// t10k-labels-idx1-ubyte from `dir`, each as NAME.gz or NAME (gzip or not, whatever the
// name). Throws InputError naming the file: missing (with the names it looked for), not
// an IDX file of u8 [N, 28, 28] images or u8 [N] labels, image and label counts that differ,
// a label above 9.
Mnist load_mnist(const std::string& dir);

// One split from an images file and a labels file (the names as given).
MnistSplit load_mnist_split(const std::string& images_path, const std::string& labels_path);

}  // namespace rlx::nn
