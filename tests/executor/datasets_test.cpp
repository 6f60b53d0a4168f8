// Tests for executor/image_data.h: Fashion-MNIST and CIFAR-10 readers on real and hand-made files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "executor/data.h"
#include "executor/image_data.h"
#include "models/zoo.h"

namespace pipeplan::executor {
namespace {

using ::testing::HasSubstr;

constexpr double kFashionMean = 0.2860;
constexpr double kFashionStd = 0.3530;

class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "/datasets_test.XXXXXX";
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<uint8_t> big_endian(uint32_t value) {
  return {static_cast<uint8_t>(value >> 24), static_cast<uint8_t>(value >> 16),
          static_cast<uint8_t>(value >> 8), static_cast<uint8_t>(value)};
}

// An IDX file: magic, dimensions, then `data`; gzip-compressed.
void write_idx_gz(const std::string& path, uint32_t magic, const std::vector<uint32_t>& dims,
                  const std::vector<uint8_t>& data) {
  std::vector<uint8_t> bytes = big_endian(magic);
  for (uint32_t dim : dims) {
    const std::vector<uint8_t> dim_bytes = big_endian(dim);
    bytes.insert(bytes.end(), dim_bytes.begin(), dim_bytes.end());
  }
  bytes.insert(bytes.end(), data.begin(), data.end());
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(file);
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

// Pixel `pixel_idx` of image `image_idx` in the hand-made files: every value differs nearby.
uint8_t pixel_value(int image_idx, int pixel_idx) {
  return static_cast<uint8_t>((image_idx * 31 + pixel_idx * 7) % 256);
}

std::vector<uint8_t> images(int first_image, int count, int pixels_per_image) {
  std::vector<uint8_t> data;
  for (int image_idx = first_image; image_idx < first_image + count; ++image_idx)
    for (int pixel_idx = 0; pixel_idx < pixels_per_image; ++pixel_idx)
      data.push_back(pixel_value(image_idx, pixel_idx));
  return data;
}

// A small Fashion-MNIST folder: 3 training images (labels 3, 0, 9) and 2 test images (1, 2).
void write_tiny_fashion_mnist(const TempDir& dir) {
  write_idx_gz(dir.file("train-images-idx3-ubyte.gz"), 0x803, {3, 28, 28}, images(0, 3, 784));
  write_idx_gz(dir.file("train-labels-idx1-ubyte.gz"), 0x801, {3}, {3, 0, 9});
  write_idx_gz(dir.file("t10k-images-idx3-ubyte.gz"), 0x803, {2, 28, 28}, images(10, 2, 784));
  write_idx_gz(dir.file("t10k-labels-idx1-ubyte.gz"), 0x801, {2}, {1, 2});
}

// CIFAR-10 records for images [first, first + count) with label image_idx % 10.
std::vector<uint8_t> cifar_records(int first_image, int count) {
  std::vector<uint8_t> bytes;
  for (int image_idx = first_image; image_idx < first_image + count; ++image_idx) {
    bytes.push_back(static_cast<uint8_t>(image_idx % 10));
    const std::vector<uint8_t> pixels = images(image_idx, 1, 3072);
    bytes.insert(bytes.end(), pixels.begin(), pixels.end());
  }
  return bytes;
}

// Batch b (1..5) holds images [2(b-1), 2b); the test batch images 100 and 101.
void write_tiny_cifar10(const std::string& folder) {
  for (int batch_idx = 1; batch_idx <= 5; ++batch_idx)
    write_bytes(folder + "/data_batch_" + std::to_string(batch_idx) + ".bin",
                cifar_records(2 * (batch_idx - 1), 2));
  write_bytes(folder + "/test_batch.bin", cifar_records(100, 2));
}

models::Model cifar_model() {
  return models::make_model("mlp_tiny", {"in_channels=3", "image_size=32"});
}

// The message of the Error(kBadInput) that `open` throws; fails the test if it throws nothing.
template <typename Open>
std::string bad_input_message(Open open) {
  try {
    open();
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kBadInput) << error.what();
    return error.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// How long loading takes is printed, not asserted (bench/cpu_runs.py times whole runs).
TEST(DatasetsTest, RealFashionMnistLoadsWithSaneValues) {
  if (::access((std::string(kDefaultFashionMnistDir) + "/train-images-idx3-ubyte.gz").c_str(),
               R_OK) != 0)
    GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  const auto started = std::chrono::steady_clock::now();
  const auto source = open_data("fashion-mnist", "", models::make_model("mlp_tiny"), /*seed=*/0);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("fashion-mnist: 60000 + 10000 images loaded in %.3f s\n", load_s);
  EXPECT_EQ(source->name(), "fashion-mnist");
  ASSERT_EQ(source->size(Split::kTrain), 60000);
  ASSERT_EQ(source->size(Split::kTest), 10000);
  std::vector<int64_t> indices;
  for (int64_t sample_idx = 0; sample_idx < 60000; sample_idx += 30) indices.push_back(sample_idx);
  const auto [inputs, targets] = source->batch(Split::kTrain, indices);
  EXPECT_EQ(inputs.sizes(), (std::vector<int64_t>{2000, 1, 28, 28}));
  EXPECT_EQ(inputs.scalar_type(), torch::kFloat32);
  EXPECT_EQ(targets.scalar_type(), torch::kInt64);
  EXPECT_EQ(targets.min().item<int64_t>(), 0);
  EXPECT_EQ(targets.max().item<int64_t>(), 9);
  EXPECT_NEAR(inputs.mean().item<double>(), 0.0, 0.05);
  EXPECT_NEAR(inputs.std().item<double>(), 1.0, 0.05);
  EXPECT_NEAR(inputs.min().item<double>(), -kFashionMean / kFashionStd, 1e-5);
  const auto [test_inputs, test_targets] = source->batch(Split::kTest, {9999});
  EXPECT_EQ(test_inputs.sizes(), (std::vector<int64_t>{1, 1, 28, 28}));
}

TEST(DatasetsTest, HandMadeFashionMnistLoadsExactPixels) {
  TempDir dir;
  write_tiny_fashion_mnist(dir);
  const auto source = open_data("fashion-mnist", dir.path(), models::make_model("mlp_tiny"), 0);
  ASSERT_EQ(source->size(Split::kTrain), 3);
  ASSERT_EQ(source->size(Split::kTest), 2);
  const auto [inputs, targets] = source->batch(Split::kTrain, {2, 0});
  EXPECT_TRUE(torch::equal(targets, torch::tensor({9, 3}, torch::kInt64))) << targets;
  for (auto [row, image_idx] : {std::pair{0, 2}, std::pair{1, 0}})
    for (int pixel_idx : {0, 1, 27, 28, 400, 783}) {
      const double expected =
          (pixel_value(image_idx, pixel_idx) / 255.0 - kFashionMean) / kFashionStd;
      EXPECT_NEAR(inputs[row].flatten()[pixel_idx].item<double>(), expected, 1e-5)
          << "image " << image_idx << " pixel " << pixel_idx;
    }
  const auto [test_inputs, test_targets] = source->batch(Split::kTest, {1});
  EXPECT_EQ(test_targets.item<int64_t>(), 2);
  EXPECT_NEAR(test_inputs.flatten()[5].item<double>(),
              (pixel_value(11, 5) / 255.0 - kFashionMean) / kFashionStd, 1e-5);
}

TEST(DatasetsTest, CorruptFashionMnistFilesAreNamed) {
  TempDir dir;
  write_tiny_fashion_mnist(dir);
  const models::Model model = models::make_model("mlp_tiny");
  auto open = [&] { open_data("fashion-mnist", dir.path(), model, 0); };
  const std::string labels = dir.file("train-labels-idx1-ubyte.gz");
  const std::string images_path = dir.file("train-images-idx3-ubyte.gz");

  write_idx_gz(labels, 0x803, {3}, {3, 0, 9});
  EXPECT_THAT(bad_input_message(open),
              HasSubstr("'" + labels + "' is not a gzip IDX file of labels"));
  write_bytes(labels, {'h', 'e', 'l', 'l', 'o', '\n'});
  EXPECT_THAT(bad_input_message(open), HasSubstr("'" + labels + "' is not a gzip IDX file"));
  write_idx_gz(labels, 0x801, {2}, {3, 0});
  EXPECT_THAT(bad_input_message(open), HasSubstr("'" + labels + "' has 2 labels for 3 images"));
  write_idx_gz(labels, 0x801, {3}, {3, 10, 9});
  EXPECT_THAT(bad_input_message(open), HasSubstr("label 10 of sample 1 is not a class in 0..9"));
  write_idx_gz(labels, 0x801, {3}, {3, 0, 9});

  write_idx_gz(images_path, 0x803, {3, 28, 28}, images(0, 2, 784));
  EXPECT_THAT(bad_input_message(open), HasSubstr("'" + images_path + "' is truncated"));
  write_idx_gz(images_path, 0x803, {3, 32, 32}, images(0, 3, 1024));
  EXPECT_THAT(bad_input_message(open), HasSubstr("holds 32x32 images"));
  // A gzip stream cut in the middle.
  write_idx_gz(images_path, 0x803, {3, 28, 28}, images(0, 3, 784));
  std::ifstream whole(images_path, std::ios::binary);
  std::vector<uint8_t> gz((std::istreambuf_iterator<char>(whole)),
                          std::istreambuf_iterator<char>());
  gz.resize(gz.size() / 2);
  write_bytes(images_path, gz);
  EXPECT_THAT(bad_input_message(open), HasSubstr("'" + images_path + "' is "));
  std::remove(images_path.c_str());
  const std::string missing = bad_input_message(open);
  EXPECT_THAT(missing, HasSubstr("'" + images_path + "' is missing"));
  EXPECT_THAT(missing, HasSubstr("--data-dir"));
}

TEST(DatasetsTest, HandMadeCifar10LoadsExactPixelsInBatchOrder) {
  TempDir dir;
  write_tiny_cifar10(dir.path());
  const auto source = open_data("cifar10", dir.path(), cifar_model(), 0);
  EXPECT_EQ(source->name(), "cifar10");
  ASSERT_EQ(source->size(Split::kTrain), 10);
  ASSERT_EQ(source->size(Split::kTest), 2);
  const auto [inputs, targets] = source->batch(Split::kTrain, {5, 9});
  EXPECT_EQ(inputs.sizes(), (std::vector<int64_t>{2, 3, 32, 32}));
  EXPECT_TRUE(torch::equal(targets, torch::tensor({5, 9}, torch::kInt64))) << targets;
  const double mean[] = {0.4914, 0.4822, 0.4465};
  const double std[] = {0.2470, 0.2435, 0.2616};
  for (int pixel_idx : {0, 1023, 1024, 2047, 2048, 3071}) {
    const int channel = pixel_idx / 1024;
    const double expected = (pixel_value(5, pixel_idx) / 255.0 - mean[channel]) / std[channel];
    EXPECT_NEAR(inputs[0].flatten()[pixel_idx].item<double>(), expected, 1e-5) << pixel_idx;
  }
  EXPECT_EQ(source->batch(Split::kTest, {1}).second.item<int64_t>(), 101 % 10);

  // The unpacked archive's folder is found inside --data-dir.
  TempDir parent;
  ASSERT_EQ(::mkdir(parent.file("cifar-10-batches-bin").c_str(), 0755), 0);
  write_tiny_cifar10(parent.file("cifar-10-batches-bin"));
  EXPECT_EQ(open_data("cifar10", parent.path(), cifar_model(), 0)->size(Split::kTrain), 10);
}

TEST(DatasetsTest, CorruptCifar10FilesAreNamed) {
  TempDir dir;
  write_tiny_cifar10(dir.path());
  auto open = [&] { open_data("cifar10", dir.path(), cifar_model(), 0); };
  const std::string batch3 = dir.file("data_batch_3.bin");
  std::vector<uint8_t> records = cifar_records(4, 2);
  records.pop_back();
  write_bytes(batch3, records);
  EXPECT_THAT(bad_input_message(open), HasSubstr("'" + batch3 + "' is truncated"));
  records = cifar_records(4, 2);
  records[3073] = 10;
  write_bytes(batch3, records);
  EXPECT_THAT(bad_input_message(open), HasSubstr("'" + batch3 + "': record 1 has label 10"));
  std::remove(batch3.c_str());
  EXPECT_THAT(bad_input_message(open), HasSubstr("'" + batch3 + "' is missing"));
  EXPECT_THAT(bad_input_message([] { open_data("cifar10", "", cifar_model(), 0); }),
              HasSubstr("needs --data-dir"));
}

TEST(DatasetsTest, ModelsThatDoNotFitTheImagesAreToldHowToFit) {
  const std::string wrong_shape =
      bad_input_message([] { open_data("fashion-mnist", "", cifar_model(), 0); });
  EXPECT_THAT(wrong_shape, HasSubstr("takes input [3, 32, 32]"));
  EXPECT_THAT(wrong_shape, HasSubstr("fashion-mnist has images [1, 28, 28]"));
  EXPECT_THAT(wrong_shape, HasSubstr("--model-arg in_channels=1 --model-arg image_size=28"));

  const std::string few_classes = bad_input_message([] {
    open_data("cifar10", "/nonexistent",
              models::make_model("mlp_tiny", {"in_channels=3", "image_size=32", "num_classes=5"}),
              0);
  });
  EXPECT_THAT(few_classes, HasSubstr("with 5 classes"));
  EXPECT_THAT(few_classes, HasSubstr("--model-arg num_classes=10"));
  EXPECT_THAT(few_classes, ::testing::Not(HasSubstr("in_channels")));

  models::Model tokens = models::make_model("mlp_tiny");
  tokens.name = "gpt_like";
  tokens.input = models::InputSpec{{16}, torch::kInt64, 100};
  EXPECT_THAT(bad_input_message([&] { open_data("fashion-mnist", "", tokens, 0); }),
              HasSubstr("model 'gpt_like' takes int64 tokens [16], not images [1, 28, 28]; use "
                        "--data synthetic"));

  models::Model scripted = cifar_model();
  scripted.config = Json::object();
  EXPECT_THAT(bad_input_message([&] { open_data("fashion-mnist", "", scripted, 0); }),
              HasSubstr("use a model with that input and at least 10 classes"));
}

}  // namespace
}  // namespace pipeplan::executor
