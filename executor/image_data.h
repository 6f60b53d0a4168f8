// Image data sets held as uint8 pixels: the source shared by fashion-mnist and cifar10, the
// check that a model fits the images, and the two readers.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor/data.h"
#include "models/model.h"

namespace pipeplan::executor {

/// Where Debian's `dataset-fashion-mnist` installs the four gzip IDX files.
inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

/// One split as stored: pixels uint8 [n, C, H, W] (contiguous) and labels int64 [n].
struct ImageSplit {
  torch::Tensor pixels;
  torch::Tensor labels;
};

/// What an image data set looks like and how its pixels are normalised.
struct ImageFormat {
  std::string name;                   ///< "fashion-mnist", "cifar10"
  std::vector<int64_t> sample_shape;  ///< {C, H, W}
  int64_t num_classes = 0;            ///< labels lie in [0, num_classes)
  std::vector<double> mean;           ///< per channel, of pixel / 255
  std::vector<double> std;            ///< per channel, of pixel / 255
};

/// Fashion-MNIST: [1, 28, 28], 10 classes, mean 0.2860, std 0.3530.
ImageFormat fashion_mnist_format();

/// CIFAR-10: [3, 32, 32], 10 classes, the training set's per-channel mean and std.
ImageFormat cifar10_format();

/// Throws Error(kBadInput) unless `model` takes floating-point input of exactly
/// `format.sample_shape` and predicts one class per sample out of at least `format.num_classes`.
/// The message names the model's input, the data's, and the `--model-arg`s that fix it, or
/// suggests `--data synthetic` for a token model.
void check_model_fits_images(const models::Model& model, const ImageFormat& format);

/// A DataSource over in-memory splits: batch() returns (pixel / 255 − mean) / std per channel in
/// `dtype` (a floating-point type), and the labels.
std::unique_ptr<DataSource> make_image_source(const ImageFormat& format, ImageSplit train,
                                              ImageSplit test, torch::Dtype dtype);

/// Fashion-MNIST from the gzip IDX files `train-images-idx3-ubyte.gz`,
/// `train-labels-idx1-ubyte.gz`, `t10k-images-idx3-ubyte.gz`, `t10k-labels-idx1-ubyte.gz` in
/// `dir` ("" for kDefaultFashionMnistDir). Checks the model first, then magic numbers, 28×28
/// images, equal image and label counts, labels < 10; throws Error(kBadInput) naming the file.
std::unique_ptr<DataSource> open_fashion_mnist(const std::string& dir, const models::Model& model);

/// CIFAR-10's binary version from `dir` (required; or its `cifar-10-batches-bin` subfolder):
/// `data_batch_1.bin` … `data_batch_5.bin` for training, `test_batch.bin` for test, each a
/// sequence of records of 1 label byte and 3072 CHW pixel bytes. Throws Error(kBadInput) naming
/// the file when one is missing, truncated, or has a label ≥ 10.
std::unique_ptr<DataSource> open_cifar10(const std::string& dir, const models::Model& model);

}  // namespace pipeplan::executor
