// Fashion-MNIST: the four gzip IDX files read with zlib into uint8 tensors, validated on the way.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>

#include "common/error.h"
#include "executor/image_data.h"

namespace pipeplan::executor {
namespace {

// IDX magic numbers: two zero bytes, the element type (0x08 = unsigned byte), the dimension count.
constexpr uint32_t kIdxImagesMagic = 0x00000803;
constexpr uint32_t kIdxLabelsMagic = 0x00000801;
constexpr int64_t kImageSide = 28;
// A header claiming more images than this is corrupt, not a data set to hold in memory.
constexpr int64_t kMaxImages = 10'000'000;
// zlib's input buffer; larger than its 8 KiB default, for fewer system calls.
constexpr unsigned kGzBufferBytes = 1 << 20;
// gzread takes an unsigned int count; reads are split into pieces of at most this.
constexpr size_t kGzReadPieceBytes = 1 << 30;

// A gzip file open for reading; zlib reads a file that is not gzip as it is ("transparent"), so
// its contents are judged by the IDX magic number, not by whether it was compressed.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {
    PIPEPLAN_CHECK(file_ != nullptr, quote(path), " cannot be opened: ", std::strerror(errno));
    gzbuffer(file_, kGzBufferBytes);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;
  ~GzReader() { gzclose(file_); }

  /// Reads exactly `size` bytes of `what` or throws naming the file: truncated or corrupt.
  void read_exact(void* out, size_t size, const char* what) {
    auto* bytes = static_cast<unsigned char*>(out);
    size_t done = 0;
    while (done < size) {
      const auto piece = static_cast<unsigned>(std::min(size - done, kGzReadPieceBytes));
      const int got = gzread(file_, bytes + done, piece);
      PIPEPLAN_CHECK(got >= 0, quote(path_), " is corrupt: ", zlib_error());
      PIPEPLAN_CHECK(got > 0, quote(path_), " is truncated: it ends after ", done, " of the ", size,
                     " bytes of ", what);
      done += static_cast<size_t>(got);
    }
  }

  /// A big-endian 32-bit number.
  uint32_t read_u32(const char* what) {
    std::array<unsigned char, 4> bytes{};
    read_exact(bytes.data(), bytes.size(), what);
    return (uint32_t{bytes[0]} << 24) | (uint32_t{bytes[1]} << 16) | (uint32_t{bytes[2]} << 8) |
           uint32_t{bytes[3]};
  }

  /// Throws unless the file ends here.
  void expect_end(int64_t count, const char* what) {
    unsigned char extra = 0;
    const int got = gzread(file_, &extra, 1);
    PIPEPLAN_CHECK(got >= 0, quote(path_), " is corrupt: ", zlib_error());
    PIPEPLAN_CHECK(got == 0, quote(path_), " has more data after its ", count, " ", what,
                   "; is it an IDX file of this data set?");
  }

  const std::string& path() const { return path_; }

 private:
  std::string zlib_error() {
    int code = Z_OK;
    const char* message = gzerror(file_, &code);
    return code == Z_ERRNO ? std::strerror(errno)
                           : (message != nullptr ? message : "unknown zlib error");
  }

  std::string path_;
  gzFile file_;
};

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", value);
  return text;
}

int64_t read_count(GzReader& file, uint32_t magic, const char* what) {
  const uint32_t found = file.read_u32("the IDX header");
  PIPEPLAN_CHECK(found == magic, quote(file.path()), " is not a gzip IDX file of ", what,
                 " (magic number ", hex32(found), ", expected ", hex32(magic), ")");
  const int64_t count = file.read_u32("the IDX header");
  PIPEPLAN_CHECK(count >= 1 && count <= kMaxImages, quote(file.path()), " claims ", count, " ",
                 what, "; expected 1 to ", kMaxImages);
  return count;
}

// uint8 [n, 1, 28, 28].
torch::Tensor read_images(const std::string& path) {
  GzReader file(path);
  const int64_t count = read_count(file, kIdxImagesMagic, "images");
  const int64_t rows = file.read_u32("the IDX header");
  const int64_t cols = file.read_u32("the IDX header");
  PIPEPLAN_CHECK(rows == kImageSide && cols == kImageSide, quote(path), " holds ", rows, "x", cols,
                 " images; Fashion-MNIST's are ", kImageSide, "x", kImageSide);
  torch::Tensor pixels = torch::empty({count, 1, kImageSide, kImageSide}, torch::kUInt8);
  file.read_exact(pixels.data_ptr<uint8_t>(), static_cast<size_t>(pixels.numel()), "pixels");
  file.expect_end(count, "images");
  return pixels;
}

// int64 [n], each < num_classes.
torch::Tensor read_labels(const std::string& path, int64_t num_classes) {
  GzReader file(path);
  const int64_t count = read_count(file, kIdxLabelsMagic, "labels");
  std::vector<uint8_t> bytes(static_cast<size_t>(count));
  file.read_exact(bytes.data(), bytes.size(), "labels");
  file.expect_end(count, "labels");
  for (size_t sample_idx = 0; sample_idx < bytes.size(); ++sample_idx)
    PIPEPLAN_CHECK(bytes[sample_idx] < num_classes, quote(path), ": label ", int{bytes[sample_idx]},
                   " of sample ", sample_idx, " is not a class in 0..", num_classes - 1);
  return torch::tensor(std::vector<int64_t>(bytes.begin(), bytes.end()), torch::kInt64);
}

ImageSplit read_split(const std::string& images_path, const std::string& labels_path,
                      int64_t num_classes) {
  ImageSplit split{read_images(images_path), read_labels(labels_path, num_classes)};
  PIPEPLAN_CHECK(split.labels.size(0) == split.pixels.size(0), quote(labels_path), " has ",
                 split.labels.size(0), " labels for ", split.pixels.size(0), " images in ",
                 quote(images_path));
  return split;
}

}  // namespace

std::unique_ptr<DataSource> open_fashion_mnist(const std::string& dir, const models::Model& model) {
  const ImageFormat format = fashion_mnist_format();
  check_model_fits_images(model, format);
  const std::string folder = dir.empty() ? std::string(kDefaultFashionMnistDir) : dir;
  const char* hint = dir.empty()
                         ? "install Debian's dataset-fashion-mnist or give --data-dir"
                         : "give --data-dir a folder with Fashion-MNIST's four gzip IDX files";
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    const std::string path = folder + "/" + name;
    PIPEPLAN_CHECK(::access(path.c_str(), R_OK) == 0, "--data fashion-mnist: ", quote(path),
                   " is missing or unreadable; ", hint);
  }
  ImageSplit train = read_split(folder + "/train-images-idx3-ubyte.gz",
                                folder + "/train-labels-idx1-ubyte.gz", format.num_classes);
  ImageSplit test = read_split(folder + "/t10k-images-idx3-ubyte.gz",
                               folder + "/t10k-labels-idx1-ubyte.gz", format.num_classes);
  return make_image_source(format, std::move(train), std::move(test), model.input.dtype);
}

}  // namespace pipeplan::executor
