// The ImageNet models users hold weights for, as torchvision builds them, layer for layer and
// shape for shape (padding included: torchvision pads 1 pixel on each side of a stride-2 3x3,
// where SAME pads 0 before), so that torchvision's weights fit them one to one:
// - resnet18, resnet34 (basic blocks) and resnet50 (bottleneck blocks, v1.5: the stride on the
//   3x3): conv 7x7/2 (pad 3) - BN - ReLU - max pool 3x3/2 (pad 1) - four stages - global average
//   pooling - linear.
// - mobilenet_v2 (width 1.0): conv 3x3/2 - BN - ReLU6 - 17 inverted residuals - conv 1x1 (1280) -
//   BN - ReLU6 - global average pooling - dropout 0.2 - linear.
// Batch norm as PyTorch's: epsilon 1e-5, momentum 0.1 (moving-average decay 0.9).
//
// Their variables are found in torchvision's state dicts (and timm's, whose ResNets share
// torchvision's names) by torchvision_resnet_names and mobilenet_v2_names below;
// num_batches_tracked has no counterpart.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>

#include "tower/models/model.h"

namespace tower {
namespace {

// PyTorch's batch norm: momentum 0.1 is a decay of 0.9.
const nn::BatchNorm kBatchNorm{.momentum = 0.9f, .epsilon = 1e-5f};
constexpr float kResnetWeightDecay = 1e-4f;
constexpr float kMobileNetWeightDecay = 4e-5f;

// Variable names split at '/': the scopes and the last part ("weights", "gamma", ...).
std::vector<std::string> parts_of(const std::string& name) {
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t end; (end = name.find('/', begin)) != std::string::npos; begin = end + 1)
    parts.push_back(name.substr(begin, end - begin));
  parts.push_back(name.substr(begin));
  return parts;
}

// PyTorch's name of a convolution's or a batch norm's tensor: "weight" for both a filter and
// gamma, "running_mean" for moving_mean...; nothing for another name.
std::optional<std::string> torch_leaf(const std::string& leaf) {
  if (leaf == "weights" || leaf == "gamma") return "weight";
  if (leaf == "biases" || leaf == "beta") return "bias";
  if (leaf == "moving_mean") return "running_mean";
  if (leaf == "moving_variance") return "running_var";
  return std::nullopt;
}
bool is_bn(const std::string& leaf) { return leaf != "weights" && leaf != "biases"; }

// torchvision's (and timm's) ResNets: conv1/bn1, layer{s}.{b}.conv{i}/bn{i}, the shortcut as
// downsample.0 (conv) and downsample.1 (bn), fc (transposed).
std::vector<ForeignName> torchvision_resnet_names(const std::string& variable) {
  const std::vector<std::string> p = parts_of(variable);
  const auto leaf = torch_leaf(p.back());
  if (!leaf) return {};
  const bool bn = is_bn(p.back());
  if (p.size() == 2 && p[0] == "fc") return {{"fc." + *leaf, p.back() == "weights"}};
  if (p.size() == 2 && p[0] == "conv1") return {{(bn ? "bn1." : "conv1.") + *leaf}};
  if (p.size() != 4) return {};
  const std::string block = p[0] + "." + p[1] + ".";
  if (p[2] == "shortcut") return {{block + (bn ? "downsample.1." : "downsample.0.") + *leaf}};
  if (p[2].rfind("conv", 0) != 0) return {};
  return {{block + (bn ? "bn" + p[2].substr(4) : p[2]) + "." + *leaf}};
}

// MobileNetV2's features/{i} (0: the stem, 18: the last 1x1 conv; 1 to 17: the inverted
// residuals, whose expand/depthwise/project convolutions torchvision numbers in turn) and its
// classifier: torchvision's names first, then timm's mobilenetv2_100 (conv_stem/bn1,
// blocks.{stage}.{block}.conv_pw/bn1, conv_dw/bn2, conv_pwl/bn3, conv_head/bn2, classifier).
std::vector<ForeignName> mobilenet_v2_names(const std::string& variable) {
  const std::vector<std::string> p = parts_of(variable);
  const auto leaf = torch_leaf(p.back());
  if (!leaf) return {};
  const bool bn = is_bn(p.back());
  if (p.size() == 2 && p[0] == "classifier")
    return {{"classifier.1." + *leaf, p.back() == "weights"},
            {"classifier." + *leaf, p.back() == "weights"}};
  if (p[0] != "features" || p.size() < 3) return {};
  const int i = std::stoi(p[1]);
  if (p.size() == 3) {  // the stem and the head: conv, bn
    const std::string timm = i == 0 ? (bn ? "bn1." : "conv_stem.") : (bn ? "bn2." : "conv_head.");
    return {{fmt::format("features.{}.{}.{}", i, bn ? 1 : 0, *leaf)}, {timm + *leaf}};
  }
  // The block's convolutions in torchvision's order, with timm's names of each and its batch norm
  // (block 1 has no expansion).
  using Names = std::vector<std::array<const char*, 3>>;
  const Names convs = i == 1 ? Names{{"depthwise", "conv_dw", "bn1"}, {"project", "conv_pw", "bn2"}}
                             : Names{{"expand", "conv_pw", "bn1"},
                                     {"depthwise", "conv_dw", "bn2"},
                                     {"project", "conv_pwl", "bn3"}};
  const auto at =
      std::find_if(convs.begin(), convs.end(), [&](const auto& c) { return p[2] == c[0]; });
  if (at == convs.end()) return {};
  const int k = static_cast<int>(at - convs.begin());
  const bool last = k + 1 == static_cast<int>(convs.size());  // project: no ReLU6, plain index
  const std::string tv = last ? fmt::format("features.{}.conv.{}.{}", i, k + (bn ? 1 : 0), *leaf)
                              : fmt::format("features.{}.conv.{}.{}.{}", i, k, bn ? 1 : 0, *leaf);
  constexpr std::array<int, 7> kStageBlocks = {1, 2, 3, 4, 3, 3, 1};
  size_t stage = 0;
  int block = i - 1;
  while (stage < kStageBlocks.size() && block >= kStageBlocks[stage])
    block -= kStageBlocks[stage++];
  const char* timm_name = (*at)[bn ? 2 : 1];
  return {{tv}, {fmt::format("blocks.{}.{}.{}.{}", stage, block, timm_name, *leaf)}};
}

// The stem of the ResNets: conv 7x7/2, BN, ReLU, max pool 3x3/2 with torchvision's padding.
Value resnet_stem(const Scope& s, Value images, Mode mode, std::vector<Value>& updates) {
  Value x = nn::conv_bn(s, "conv1", images, mode, updates,
                        {.filters = 64,
                         .kernel = 7,
                         .stride = 2,
                         .padding = ops::Padding::given,
                         .pads = 3,
                         .activation = nn::Activation::relu,
                         .weight_decay = kResnetWeightDecay},
                        kBatchNorm);
  return nn::max_pool(s, "maxpool", x,
                      {.size = 3, .stride = 2, .padding = ops::Padding::given, .pads = 1});
}

Value resnet_head(const Scope& s, Value x, int num_classes) {
  return nn::dense(s, "fc", nn::global_avg_pool(s, x),
                   {.units = num_classes, .weight_decay = kResnetWeightDecay});
}

// Blocks per stage (64, 128, 256, 512 filters; stride 2 at the start of stages 2 to 4).
ModelFn resnet(std::array<int, 4> blocks, bool bottleneck) {
  return [blocks, bottleneck](const Scope& s, Value images, int num_classes, Mode mode) {
    std::vector<Value> updates;
    Value x = resnet_stem(s, images, mode, updates);
    for (int stage = 0; stage < 4; ++stage)
      for (int b = 0; b < blocks[static_cast<size_t>(stage)]; ++b) {
        const std::string name = fmt::format("layer{}/{}", stage + 1, b);
        const int64_t filters = int64_t{64} << stage, stride = stage > 0 && b == 0 ? 2 : 1;
        x = bottleneck ? nn::bottleneck_block(s, name, x, mode, updates,
                                              {.filters = filters,
                                               .stride = stride,
                                               .weight_decay = kResnetWeightDecay,
                                               .batch_norm = kBatchNorm})
                       : nn::residual_block(s, name, x, mode, updates,
                                            {.filters = filters,
                                             .stride = stride,
                                             .weight_decay = kResnetWeightDecay,
                                             .batch_norm = kBatchNorm,
                                             .padding = ops::Padding::given});
      }
    return ModelOutputs{resnet_head(s, x, num_classes), updates};
  };
}

ModelOutputs mobilenet_v2(const Scope& s, Value images, int num_classes, Mode mode) {
  std::vector<Value> updates;
  Value x = nn::conv_bn(s, "features/0", images, mode, updates,
                        {.filters = 32,
                         .kernel = 3,
                         .stride = 2,
                         .padding = ops::Padding::given,
                         .pads = 1,
                         .activation = nn::Activation::relu6,
                         .weight_decay = kMobileNetWeightDecay},
                        kBatchNorm);
  // (expansion, channels, blocks, first stride): the paper's table 2
  const int64_t settings[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                  {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  int index = 1;
  for (const auto& [t, c, n, stride] : settings)
    for (int64_t i = 0; i < n; ++i)
      x = nn::inverted_residual_block(s, fmt::format("features/{}", index++), x, mode, updates,
                                      {.filters = c,
                                       .stride = i == 0 ? stride : 1,
                                       .expansion = t,
                                       .weight_decay = kMobileNetWeightDecay,
                                       .batch_norm = kBatchNorm});
  x = nn::conv_bn(s, fmt::format("features/{}", index), x, mode, updates,
                  {.filters = 1280,
                   .kernel = 1,
                   .activation = nn::Activation::relu6,
                   .weight_decay = kMobileNetWeightDecay},
                  kBatchNorm);
  x = nn::dropout(s, nn::global_avg_pool(s, x), 0.2f, mode);
  Value logits =
      nn::dense(s, "classifier", x, {.units = num_classes, .weight_decay = kMobileNetWeightDecay});
  return {logits, updates};
}

// The ImageNet recipe of torchvision's references, per tower of 32 images: SGD with momentum
// 0.9, lr 0.1 (ResNets) or 0.045 (MobileNetV2) per 256 images, cosine decay after 5 warm-up
// epochs (the weight decay is the models': 1e-4, 4e-5), random resized crops and flips (image
// folders decoded at 8/7 of the size, the crops and the evaluation's central crop at 7/8 of it).
Recipe imagenet_recipe(double epochs, float lr_per_256) {
  return Recipe{.optimizer = "momentum",
                .momentum = 0.9f,
                .lr = lr_per_256 * 32 / 256,
                .lr_schedule = "cosine:warmup_epochs=5",
                .batch_size = 32,
                .epochs = epochs,
                .augmentation = "random-resized-crop"};
}

const Shape kImageNetInput{3, 224, 224};

}  // namespace

Normalization imagenet_normalization() {
  return {{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
}

namespace {

ModelRegistrar resnet18_registrar{{"resnet18", "ResNet-18 (torchvision's)", kImageNetInput,
                                   resnet({2, 2, 2, 2}, false), imagenet_recipe(90, 0.1f), "",
                                   torchvision_resnet_names, imagenet_normalization()}};
ModelRegistrar resnet34_registrar{{"resnet34", "ResNet-34 (torchvision's)", kImageNetInput,
                                   resnet({3, 4, 6, 3}, false), imagenet_recipe(90, 0.1f), "",
                                   torchvision_resnet_names, imagenet_normalization()}};
ModelRegistrar resnet50_registrar{{"resnet50", "ResNet-50 v1.5 (torchvision's)", kImageNetInput,
                                   resnet({3, 4, 6, 3}, true), imagenet_recipe(90, 0.1f), "",
                                   torchvision_resnet_names, imagenet_normalization()}};
ModelRegistrar mobilenet_v2_registrar{{"mobilenet_v2", "MobileNetV2 (torchvision's)",
                                       kImageNetInput, mobilenet_v2, imagenet_recipe(300, 0.045f),
                                       "", mobilenet_v2_names, imagenet_normalization()}};

}  // namespace
}  // namespace tower
