// Synthetic data: learnable, seeded, generated once per split.
#include <ATen/CPUGeneratorImpl.h>

#include "common/hash.h"
#include "executor/data.h"

namespace pipeplan::executor {
namespace {

// Noise added to an image's class prototype; small enough that classes stay separable.
constexpr double kImageNoiseStd = 1.0;
// Each token of the bigram chain moves to one of this many successors.
constexpr int64_t kBigramSuccessors = 4;

// Images: prototype[class] + noise. Tokens: a bigram chain; target = the sequence shifted by one.
class SyntheticSource : public DataSource {
 public:
  SyntheticSource(const models::Model& model, uint64_t seed, int64_t train_size, int64_t test_size)
      : model_(model) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    if (model.input.dtype == torch::kInt64) {
      const int64_t vocab = model.input.token_range;
      successors_ = torch::randint(vocab, {vocab, kBigramSuccessors}, generator, torch::kInt64);
    } else {
      std::vector<int64_t> shape{model.target.num_classes};
      shape.insert(shape.end(), model.input.sample_shape.begin(), model.input.sample_shape.end());
      prototypes_ = torch::randn(shape, generator);
    }
    splits_[0] = generate(train_size, mix_seed(seed, 1));
    splits_[1] = generate(test_size, mix_seed(seed, 2));
  }

  int64_t size(Split split) const override { return splits_[index(split)].first.size(0); }

  std::pair<torch::Tensor, torch::Tensor> batch(Split split,
                                                const std::vector<int64_t>& indices) const override {
    const auto& [inputs, targets] = splits_[index(split)];
    const torch::Tensor idx = torch::tensor(indices, torch::kInt64);
    return {inputs.index_select(0, idx), targets.index_select(0, idx)};
  }

  std::string name() const override { return "synthetic"; }

 private:
  static int index(Split split) { return split == Split::kTrain ? 0 : 1; }

  std::pair<torch::Tensor, torch::Tensor> generate(int64_t count, uint64_t seed) const {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    if (model_.input.dtype != torch::kInt64) {
      const torch::Tensor labels = torch::randint(model_.target.num_classes, {count}, generator, torch::kInt64);
      const torch::Tensor noise = torch::randn(prototypes_.index_select(0, labels).sizes(), generator);
      return {prototypes_.index_select(0, labels) + kImageNoiseStd * noise, labels};
    }
    const int64_t length = model_.input.sample_shape.at(0);
    torch::Tensor tokens = torch::empty({count, length + 1}, torch::kInt64);
    tokens.select(1, 0).copy_(torch::randint(model_.input.token_range, {count}, generator, torch::kInt64));
    for (int64_t pos = 1; pos <= length; ++pos) {
      const torch::Tensor choice = torch::randint(kBigramSuccessors, {count}, generator, torch::kInt64);
      const torch::Tensor rows = successors_.index_select(0, tokens.select(1, pos - 1));
      tokens.select(1, pos).copy_(rows.gather(1, choice.unsqueeze(1)).squeeze(1));
    }
    return {tokens.narrow(1, 0, length).contiguous(), tokens.narrow(1, 1, length).contiguous()};
  }

  models::Model model_;
  torch::Tensor prototypes_;
  torch::Tensor successors_;
  std::pair<torch::Tensor, torch::Tensor> splits_[2];
};

}  // namespace

std::unique_ptr<DataSource> open_synthetic(const models::Model& model, uint64_t seed,
                                           int64_t train_size, int64_t test_size) {
  return std::make_unique<SyntheticSource>(model, seed, train_size, test_size);
}

}  // namespace pipeplan::executor
