// Tests for models/blocks.h: attention masking, parameter count, truncated-normal init.
#include "models/blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"

namespace pipeplan::models {
namespace {

BlockShape small_shape(bool causal, BlockInit init) {
  BlockShape shape;
  shape.hidden = 12;
  shape.heads = 3;
  shape.mlp_dim = 20;
  shape.depth = 2;
  shape.causal = causal;
  shape.init = init;
  return shape;
}

// Output rows [0, changed_from) of `block` before and after the tokens from `changed_from` on
// are replaced; true when all earlier rows stay exactly the same.
bool earlier_tokens_unchanged(TransformerBlock& block, int64_t changed_from) {
  torch::NoGradGuard no_grad;
  const torch::Tensor input = torch::randn({2, 6, 12});
  torch::Tensor changed = input.clone();
  changed.slice(/*dim=*/1, changed_from).normal_();
  const torch::Tensor before = block.forward(input).slice(1, 0, changed_from);
  const torch::Tensor after = block.forward(changed).slice(1, 0, changed_from);
  return torch::equal(before, after);
}

TEST(BlocksTest, CausalBlockIgnoresLaterTokens) {
  torch::manual_seed(1);
  TransformerBlock decoder(small_shape(/*causal=*/true, BlockInit::kGpt));
  EXPECT_TRUE(earlier_tokens_unchanged(decoder, /*changed_from=*/3));
  TransformerBlock encoder(small_shape(/*causal=*/false, BlockInit::kVit));
  EXPECT_FALSE(earlier_tokens_unchanged(encoder, /*changed_from=*/3));
}

TEST(BlocksTest, AttentionMatchesAReferenceComputation) {
  // One head, hidden 2: check the matmul attention against softmax(q·kᵀ/√d)·v by hand.
  torch::manual_seed(2);
  BlockShape shape = small_shape(/*causal=*/true, BlockInit::kGpt);
  shape.hidden = 2;
  shape.heads = 1;
  TransformerBlock block(shape);
  const torch::Tensor input = torch::randn({1, 3, 2});
  const auto params = block.named_parameters();
  const torch::Tensor x = torch::layer_norm(input, {2}, params["ln_1.weight"], params["ln_1.bias"],
                                            layer_norm_eps(BlockInit::kGpt));
  const auto qkv = torch::linear(x, params["in_proj.weight"], params["in_proj.bias"]).chunk(3, -1);
  const torch::Tensor scores = torch::matmul(qkv[0], qkv[1].transpose(1, 2)) / std::sqrt(2.0);
  const torch::Tensor mask = torch::ones({3, 3}).triu(1).to(torch::kBool);
  const torch::Tensor mixed = torch::matmul(scores.masked_fill(mask, -1e30).softmax(-1), qkv[2]);
  torch::Tensor expected =
      input + torch::linear(mixed, params["out_proj.weight"], params["out_proj.bias"]);
  const torch::Tensor h = torch::layer_norm(expected, {2}, params["ln_2.weight"],
                                            params["ln_2.bias"], layer_norm_eps(BlockInit::kGpt));
  expected = expected +
             torch::linear(torch::gelu(torch::linear(h, params["fc1.weight"], params["fc1.bias"])),
                           params["fc2.weight"], params["fc2.bias"]);
  EXPECT_TRUE(torch::allclose(block.forward(input), expected, /*rtol=*/1e-5, /*atol=*/1e-6));
}

TEST(BlocksTest, ParameterCountMatchesBuiltBlock) {
  for (BlockInit init : {BlockInit::kVit, BlockInit::kGpt}) {
    const BlockShape shape = small_shape(/*causal=*/false, init);
    const LayerSpec spec = transformer_block_spec(/*block_idx=*/4, shape);
    EXPECT_EQ(spec.name, "block4");
    EXPECT_EQ(spec.kind, "block");
    int64_t built = 0;
    for (const auto& param : spec.build()->parameters()) built += param.numel();
    EXPECT_EQ(built, spec.param_count);
    EXPECT_EQ(transformer_block_param_count(/*hidden=*/12, /*mlp_dim=*/20), built);
  }
}

// Joining every rank's shard gives the whole parameter back, for each of a block's parameters
// and each group size dividing its heads and MLP width; shards of unequal shapes are refused.
TEST(BlocksTest, JoiningTheShardsGivesTheWholeParameter) {
  BlockShape shape = small_shape(/*causal=*/true, BlockInit::kGpt);
  shape.heads = 4;
  shape.mlp_dim = 24;
  const LayerPtr block = transformer_block_spec(0, shape).build();
  int split = 0;
  for (int tp : {2, 4})
    for (const auto& param : block->named_parameters()) {
      std::vector<torch::Tensor> shards;
      for (int tp_rank = 0; tp_rank < tp; ++tp_rank)
        shards.push_back(block_parameter_shard(param.key(), param.value(), shape, tp_rank, tp));
      split += shards.front().numel() < param.value().numel();
      const torch::Tensor joined = block_parameter_join(param.key(), shards);
      ASSERT_TRUE(joined.defined()) << param.key();
      EXPECT_TRUE(torch::equal(joined, param.value())) << param.key() << " tp=" << tp;
    }
  EXPECT_EQ(split,
            2 * 6);  // in_proj weight and bias, out_proj.weight, fc1 weight and bias, fc2.weight
  EXPECT_FALSE(
      block_parameter_join("fc1.weight", {torch::zeros({2, 3}), torch::zeros({3, 3})}).defined());
}

TEST(BlocksTest, TruncNormalIsBoundedWithTheRequestedSpread) {
  torch::manual_seed(3);
  torch::Tensor values = torch::empty({200000});
  trunc_normal_(values, /*std=*/0.5);
  EXPECT_LE(values.abs().max().item<double>(), 1.0);
  EXPECT_NEAR(values.mean().item<double>(), 0.0, 0.01);
  // A normal truncated at ±2σ has standard deviation 0.8796σ.
  EXPECT_NEAR(values.std().item<double>(), 0.8796 * 0.5, 0.01);
}

TEST(BlocksTest, HiddenMustBeAMultipleOfHeads) {
  const Json config{{"hidden", 10}, {"heads", 4}};
  try {
    check_hidden_heads("vit_tiny", config);
    ADD_FAILURE() << "hidden=10 heads=4 was accepted";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(),
                 "model 'vit_tiny': hidden=10 is not divisible by heads=4; expected a multiple "
                 "of heads");
  }
  EXPECT_NO_THROW(check_hidden_heads("vit_tiny", Json{{"hidden", 12}, {"heads", 4}}));
}

}  // namespace
}  // namespace pipeplan::models
