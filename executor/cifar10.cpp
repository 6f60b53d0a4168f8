// CIFAR-10's binary version: label byte + 3072 CHW pixel bytes per record, five training batches
// and one test batch, validated while read.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/error.h"
#include "executor/image_data.h"

namespace pipeplan::executor {
namespace {

constexpr int64_t kPixelBytes = 3 * 32 * 32;
constexpr int64_t kRecordBytes = 1 + kPixelBytes;
constexpr const char* kTrainFiles[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                       "data_batch_4.bin", "data_batch_5.bin"};
constexpr const char* kTestFile = "test_batch.bin";
// The folder name inside the official cifar-10-binary.tar.gz.
constexpr const char* kArchiveFolder = "cifar-10-batches-bin";

bool is_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// A whole file; throws naming it when it cannot be read.
std::vector<uint8_t> read_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  PIPEPLAN_CHECK(file != nullptr, "--data cifar10: ", quote(path),
                 " cannot be opened: ", std::strerror(errno));
  struct stat info {};
  PIPEPLAN_CHECK(::fstat(::fileno(file.get()), &info) == 0, "--data cifar10: ", quote(path),
                 " cannot be read: ", std::strerror(errno));
  std::vector<uint8_t> bytes(static_cast<size_t>(info.st_size));
  const size_t got = std::fread(bytes.data(), 1, bytes.size(), file.get());
  PIPEPLAN_CHECK(got == bytes.size(), "--data cifar10: ", quote(path),
                 " cannot be read: ", std::strerror(errno));
  return bytes;
}

// The bytes of one batch file, checked: whole records, labels < num_classes.
std::vector<uint8_t> read_records(const std::string& path, int64_t num_classes) {
  std::vector<uint8_t> bytes = read_file(path);
  const auto size = static_cast<int64_t>(bytes.size());
  PIPEPLAN_CHECK(size > 0 && size % kRecordBytes == 0, "--data cifar10: ", quote(path),
                 " is truncated or not a CIFAR-10 binary batch: ", size,
                 " bytes is not a whole number of ", kRecordBytes, "-byte records");
  for (int64_t record_idx = 0; record_idx < size / kRecordBytes; ++record_idx) {
    const int label = bytes[static_cast<size_t>(record_idx * kRecordBytes)];
    PIPEPLAN_CHECK(label < num_classes, "--data cifar10: ", quote(path), ": record ", record_idx,
                   " has label ", label, ", not a class in 0..", num_classes - 1,
                   " (is this CIFAR-100?)");
  }
  return bytes;
}

// Records of several files as one split: pixels uint8 [n, 3, 32, 32], labels int64 [n].
ImageSplit read_split(const std::vector<std::string>& paths, int64_t num_classes) {
  std::vector<std::vector<uint8_t>> files;
  int64_t count = 0;
  for (const std::string& path : paths) {
    files.push_back(read_records(path, num_classes));
    count += static_cast<int64_t>(files.back().size()) / kRecordBytes;
  }
  ImageSplit split{torch::empty({count, 3, 32, 32}, torch::kUInt8),
                   torch::empty({count}, torch::kInt64)};
  uint8_t* pixels = split.pixels.data_ptr<uint8_t>();
  int64_t* labels = split.labels.data_ptr<int64_t>();
  for (const std::vector<uint8_t>& bytes : files)
    for (size_t offset = 0; offset < bytes.size(); offset += kRecordBytes) {
      *labels++ = bytes[offset];
      std::memcpy(pixels, bytes.data() + offset + 1, kPixelBytes);
      pixels += kPixelBytes;
    }
  return split;
}

// `dir`, or its cifar-10-batches-bin subfolder when the files are there (the archive unpacked).
std::string batches_folder(const std::string& dir) {
  PIPEPLAN_CHECK(!dir.empty(),
                 "--data cifar10 needs --data-dir DIR with CIFAR-10's binary version "
                 "(data_batch_1.bin ... data_batch_5.bin, test_batch.bin)");
  const std::string nested = dir + "/" + kArchiveFolder;
  if (!is_file(dir + "/" + kTestFile) && is_file(nested + "/" + kTestFile)) return nested;
  return dir;
}

}  // namespace

std::unique_ptr<DataSource> open_cifar10(const std::string& dir, const models::Model& model) {
  const ImageFormat format = cifar10_format();
  check_model_fits_images(model, format);
  const std::string folder = batches_folder(dir);
  std::vector<std::string> paths;
  for (const char* name : kTrainFiles) paths.push_back(folder + "/" + name);
  paths.push_back(folder + "/" + kTestFile);
  for (const std::string& path : paths)
    PIPEPLAN_CHECK(is_file(path), "--data cifar10: ", quote(path),
                   " is missing; give --data-dir a folder with CIFAR-10's binary version");
  ImageSplit train = read_split({paths.begin(), paths.end() - 1}, format.num_classes);
  ImageSplit test = read_split({paths.back()}, format.num_classes);
  return make_image_source(format, std::move(train), std::move(test), model.input.dtype);
}

}  // namespace pipeplan::executor
