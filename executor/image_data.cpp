// Image data sets: formats, the model/data match check and the normalising in-memory source.
#include "executor/image_data.h"

#include "common/error.h"
#include "common/units.h"

namespace pipeplan::executor {
namespace {

bool config_has(const models::Model& model, const char* key) {
  return model.config.is_object() && model.config.contains(key);
}

// The `--model-arg KEY=VALUE`s that make `model` fit `format`, or "" when the model has no
// configuration fields for it (a TorchScript file).
std::string fixing_model_args(const models::Model& model, const ImageFormat& format) {
  const std::vector<int64_t>& want = format.sample_shape;
  const std::vector<int64_t>& have = model.input.sample_shape;
  std::string args;
  auto add = [&](const char* key, int64_t value) {
    if (config_has(model, key)) args += detail::concat(" --model-arg ", key, "=", value);
  };
  if (have.size() != 3 || have[0] != want[0]) add("in_channels", want[0]);
  if (have.size() != 3 || have[1] != want[1] || have[2] != want[2]) add("image_size", want[1]);
  if (model.target.num_classes < format.num_classes) add("num_classes", format.num_classes);
  return args;
}

// Pixels stay uint8 in memory (47 MB for Fashion-MNIST's training split, not 188 MB as float);
// a batch is converted and normalised when it is taken.
class ImageSource : public DataSource {
 public:
  ImageSource(const ImageFormat& format, ImageSplit train, ImageSplit test, torch::Dtype dtype)
      : name_(format.name), dtype_(dtype), splits_{std::move(train), std::move(test)} {
    const auto channels = static_cast<int64_t>(format.mean.size());
    PIPEPLAN_ASSERT(format.std.size() == format.mean.size() &&
                    channels == format.sample_shape.at(0));
    // (pixel / 255 - mean) / std = pixel * scale + shift, per channel.
    scale_ = torch::tensor(format.std, torch::kFloat64).mul(255).reciprocal().to(torch::kFloat32);
    shift_ = torch::tensor(format.mean, torch::kFloat64)
                 .neg()
                 .div(torch::tensor(format.std, torch::kFloat64))
                 .to(torch::kFloat32);
    scale_ = scale_.view({1, channels, 1, 1});
    shift_ = shift_.view({1, channels, 1, 1});
  }

  int64_t size(Split split) const override { return splits_[index(split)].labels.size(0); }

  std::pair<torch::Tensor, torch::Tensor> batch(
      Split split, const std::vector<int64_t>& indices) const override {
    const ImageSplit& data = splits_[index(split)];
    const torch::Tensor idx = torch::tensor(indices, torch::kInt64);
    torch::Tensor inputs =
        data.pixels.index_select(0, idx).to(torch::kFloat32).mul_(scale_).add_(shift_);
    return {inputs.to(dtype_), data.labels.index_select(0, idx)};
  }

  std::string name() const override { return name_; }

 private:
  static int index(Split split) { return split == Split::kTrain ? 0 : 1; }

  std::string name_;
  torch::Dtype dtype_;
  ImageSplit splits_[2];
  torch::Tensor scale_;
  torch::Tensor shift_;
};

}  // namespace

ImageFormat fashion_mnist_format() {
  return ImageFormat{"fashion-mnist", {1, 28, 28}, 10, {0.2860}, {0.3530}};
}

ImageFormat cifar10_format() {
  return ImageFormat{
      "cifar10", {3, 32, 32}, 10, {0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616}};
}

void check_model_fits_images(const models::Model& model, const ImageFormat& format) {
  const std::string data = "--data " + format.name + ": model " + quote(model.name);
  PIPEPLAN_CHECK(model.input.dtype != torch::kInt64, data, " takes int64 tokens ",
                 format_shape(model.input.sample_shape), ", not images ",
                 format_shape(format.sample_shape), "; use --data synthetic for it");
  const bool fits =
      c10::isFloatingType(model.input.dtype) && model.input.sample_shape == format.sample_shape &&
      model.target.num_classes >= format.num_classes &&
      model.target.loss == models::LossKind::kCrossEntropy && model.target.sample_shape.empty();
  if (fits) return;
  const std::string args = fixing_model_args(model, format);
  PIPEPLAN_CHECK(false, data, " takes input ", format_shape(model.input.sample_shape), " with ",
                 model.target.num_classes, " classes but ", format.name, " has images ",
                 format_shape(format.sample_shape), " of ", format.num_classes, " classes; ",
                 args.empty() ? detail::concat("use a model with that input and at least ",
                                               format.num_classes, " classes")
                              : "build the model with" + args);
}

std::unique_ptr<DataSource> make_image_source(const ImageFormat& format, ImageSplit train,
                                              ImageSplit test, torch::Dtype dtype) {
  PIPEPLAN_ASSERT(c10::isFloatingType(dtype));
  return std::make_unique<ImageSource>(format, std::move(train), std::move(test), dtype);
}

}  // namespace pipeplan::executor
