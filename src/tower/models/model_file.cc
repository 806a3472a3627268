#include "tower/models/model_file.h"

#include <cctype>
#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace tower {
namespace {

using Json = nlohmann::json;

// What a layer's build step sees: the data set's classes, the mode and the model's updates.
struct Context {
  int num_classes = 0;
  Mode mode = Mode::train;
  std::vector<Value> updates;
};
using Step = std::function<Value(const Scope&, Value, Context&)>;

// The keys of one JSON object, each checked; every error names where it is ("layer 3 (conv2)").
class Keys {
 public:
  Keys(const Json& object, std::string origin, std::string where)
      : object_(object), origin_(std::move(origin)), where_(std::move(where)) {
    if (!object_.is_object()) fail("{}: {} must be a JSON object, got {}", origin_, where_, dump());
  }
  // Every key present must be one of `allowed`.
  void only(std::initializer_list<const char*> allowed) const {
    std::set<std::string> ok(allowed.begin(), allowed.end());
    for (const auto& [key, value] : object_.items())
      if (!ok.contains(key)) {
        std::string list;
        for (const std::string& k : ok) list += (list.empty() ? "" : ", ") + k;
        fail("{}: {} has no key '{}' (its keys: {})", origin_, where_, key, list);
      }
  }
  bool has(const char* key) const { return object_.contains(key); }
  const Json& get(const char* key) const {
    if (!has(key)) fail("{}: {} needs the key '{}'", origin_, where_, key);
    return object_.at(key);
  }
  // Every count of a model file (filters, units, sizes, strides, the batch) is at most kMaxWhole:
  // one past it is a typo, which would otherwise surface as an allocation failure naming no key.
  static constexpr int64_t kMaxWhole = int64_t{1} << 20;
  int64_t whole(const char* key, std::optional<int64_t> fallback, int64_t min = 1) const {
    if (!has(key) && fallback) return *fallback;
    const Json& v = get(key);
    if (!v.is_number_integer() || v.get<int64_t>() < min || v.get<int64_t>() > kMaxWhole)
      bad(key, v, fmt::format("a whole number >= {} and at most {}", min, kMaxWhole));
    return v.get<int64_t>();
  }
  enum class Upper { included, excluded };  // whether max itself is allowed
  float number(const char* key, float fallback, float min, float max, Upper upper) const {
    if (!has(key)) return fallback;
    const Json& v = get(key);
    const double d = v.is_number() ? v.get<double>() : -1e300;
    const bool included = upper == Upper::included;
    if (!v.is_number() || d < min || (included ? d > max : d >= max))
      bad(key, v, fmt::format("a number in [{}, {}{}", min, max, included ? "]" : ")"));
    return static_cast<float>(d);
  }
  std::string text(const char* key, std::optional<std::string> fallback) const {
    if (!has(key) && fallback) return *fallback;
    const Json& v = get(key);
    if (!v.is_string() || v.get<std::string>().empty()) bad(key, v, "a non-empty string");
    return v.get<std::string>();
  }
  bool flag(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const Json& v = get(key);
    if (!v.is_boolean()) bad(key, v, "true or false");
    return v.get<bool>();
  }
  // "same", "valid", or a whole number: that many pixels on each side (`pads`; PyTorch's).
  ops::Padding padding(ops::Padding fallback, int64_t& pads) const {
    pads = 0;
    if (!has("padding")) return fallback;
    if (get("padding").is_number()) {
      pads = whole("padding", std::nullopt, 0);
      return ops::Padding::given;
    }
    const std::string p = get("padding").is_string() ? get("padding").get<std::string>() : "";
    if (p != "same" && p != "valid")
      bad("padding", get("padding"), "\"same\", \"valid\" or the pixels on each side (0 or more)");
    return p == "same" ? ops::Padding::same : ops::Padding::valid;
  }
  nn::Activation activation() const {
    if (!has("activation")) return nn::Activation::none;
    auto a = nn::parse_activation(text("activation", std::nullopt));
    if (!a) bad("activation", get("activation"), "one of none, relu, relu6, elu, sigmoid, tanh");
    return *a;
  }
  // "he_normal", "glorot_uniform", "zeros", "ones", or {"truncated_normal" | "normal": stddev},
  // {"uniform": limit}, {"constant": value}.
  Initializer init(const char* key, Initializer fallback) const {
    if (!has(key)) return fallback;
    const Json& v = get(key);
    const char* expected =
        "\"he_normal\", \"glorot_uniform\", \"zeros\", \"ones\", or one of {\"truncated_normal\": "
        "stddev}, {\"normal\": stddev}, {\"uniform\": limit}, {\"constant\": value}";
    if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (s == "he_normal") return Initializer::he_normal();
      if (s == "glorot_uniform") return Initializer::glorot_uniform();
      if (s == "zeros") return Initializer::zeros();
      if (s == "ones") return Initializer::ones();
    } else if (v.is_object() && v.size() == 1 && v.begin().value().is_number()) {
      const std::string kind = v.begin().key();
      const float x = v.begin().value().get<float>();
      if (kind == "constant") return Initializer::constant(x);
      if (x > 0 && kind == "truncated_normal") return Initializer::truncated_normal(x);
      if (x > 0 && kind == "normal") return Initializer::normal(x);
      if (x > 0 && kind == "uniform") return Initializer::uniform(x);
    }
    bad(key, v, expected);
  }
  [[noreturn]] void bad(const char* key, const Json& v, const std::string& expected) const {
    fail("{}: {}: key '{}' is {} (expected {})", origin_, where_, key, v.dump(), expected);
  }
  std::string dump() const { return object_.dump(); }
  const std::string& origin() const { return origin_; }

 private:
  const Json& object_;
  std::string origin_, where_;
};

nn::BatchNorm bn_options(Keys& k) {
  return nn::BatchNorm{.momentum = k.number("momentum", 0.99f, 0, 1, Keys::Upper::excluded),
                       .epsilon = k.number("epsilon", 1e-3f, 0, 1, Keys::Upper::included)};
}

// `depthwise`: no filters (the layer's input channels times the multiplier).
nn::Conv2D conv_options(Keys& k, bool depthwise = false) {
  int64_t pads = 0;
  const ops::Padding padding = k.padding(ops::Padding::same, pads);
  return nn::Conv2D{.filters = depthwise ? 0 : k.whole("filters", std::nullopt),
                    .kernel = k.whole("kernel", 3),
                    .stride = k.whole("stride", 1),
                    .groups = depthwise ? 1 : k.whole("groups", 1),
                    .dilation = k.whole("dilation", 1),
                    .padding = padding,
                    .pads = pads,
                    .activation = k.activation(),
                    .bias = k.flag("bias", true),
                    .init = k.init("init", Initializer::he_normal()),
                    .bias_init = k.number("bias_init", 0, -1e30f, 1e30f, Keys::Upper::included),
                    .weight_decay = k.number("weight_decay", 0, 0, 1e30f, Keys::Upper::included)};
}

nn::Pool pool_options(Keys& k) {
  int64_t pads = 0;
  const ops::Padding padding = k.padding(ops::Padding::valid, pads);
  return nn::Pool{.size = k.whole("size", 2),
                  .stride = k.whole("stride", 0, 0),
                  .padding = padding,
                  .pads = pads};
}

// The blocks (residual, bottleneck, inverted_residual), or nothing for another type.
std::optional<Step> block_layer(Keys& k, const std::string& type, const std::string& name) {
  if (type == "residual") {
    k.only({"type", "name", "filters", "stride", "padding", "weight_decay", "momentum", "epsilon"});
    // "padding": 1 pads the 3x3 convolutions as torchvision does
    int64_t pads = 0;
    const ops::Padding padding = k.padding(ops::Padding::same, pads);
    if (padding == ops::Padding::valid || (padding == ops::Padding::given && pads != 1))
      k.bad("padding", k.get("padding"), "\"same\" or 1");
    nn::Residual o{.filters = k.whole("filters", std::nullopt),
                   .stride = k.whole("stride", 1),
                   .weight_decay = k.number("weight_decay", 0, 0, 1e30f, Keys::Upper::included),
                   .batch_norm = bn_options(k),
                   .padding = padding};
    return [name, o](const Scope& s, Value x, Context& c) {
      return nn::residual_block(s, name, x, c.mode, c.updates, o);
    };
  }
  if (type == "bottleneck" || type == "inverted_residual") {
    k.only(
        {"type", "name", "filters", "stride", "expansion", "weight_decay", "momentum", "epsilon"});
    const bool bottleneck = type == "bottleneck";
    const int64_t filters = k.whole("filters", std::nullopt), stride = k.whole("stride", 1),
                  expansion = k.whole("expansion", bottleneck ? 4 : 6);
    const float wd = k.number("weight_decay", 0, 0, 1e30f, Keys::Upper::included);
    const nn::BatchNorm bn = bn_options(k);
    if (bottleneck)
      return [name, o = nn::Bottleneck{filters, stride, expansion, wd, bn}](const Scope& s, Value x,
                                                                            Context& c) {
        return nn::bottleneck_block(s, name, x, c.mode, c.updates, o);
      };
    return [name, o = nn::InvertedResidual{filters, stride, expansion, wd, bn}](
               const Scope& s, Value x, Context& c) {
      return nn::inverted_residual_block(s, name, x, c.mode, c.updates, o);
    };
  }
  return std::nullopt;
}

// The layers with variables (they need a name), or nothing for another type.
std::optional<Step> layer_with_variables(Keys& k, const std::string& type,
                                         const std::string& name) {
  if (type == "conv2d") {
    k.only({"type", "name", "filters", "kernel", "stride", "groups", "dilation", "padding",
            "activation", "bias", "init", "bias_init", "weight_decay"});
    return [name, o = conv_options(k)](const Scope& s, Value x, Context&) {
      return nn::conv2d(s, name, x, o);
    };
  }
  if (type == "depthwise_conv2d") {
    k.only({"type", "name", "multiplier", "kernel", "stride", "dilation", "padding", "activation",
            "bias", "init", "bias_init", "weight_decay"});
    return
        [name, o = conv_options(k, true), m = k.whole("multiplier", 1)](
            const Scope& s, Value x, Context&) { return nn::depthwise_conv2d(s, name, x, o, m); };
  }
  if (type == "conv_bn") {
    k.only({"type", "name", "filters", "kernel", "stride", "groups", "dilation", "padding",
            "activation", "init", "weight_decay", "momentum", "epsilon"});
    return [name, o = conv_options(k), bn = bn_options(k)](const Scope& s, Value x, Context& c) {
      return nn::conv_bn(s, name, x, c.mode, c.updates, o, bn);
    };
  }
  if (type == "dense") {
    k.only({"type", "name", "units", "activation", "bias", "init", "bias_init", "weight_decay"});
    // units: a number, or "num_classes" (the data set's, for the last layer).
    const bool classes = k.has("units") && k.get("units") == "num_classes";
    nn::Dense o{.units = classes ? 0 : k.whole("units", std::nullopt),
                .activation = k.activation(),
                .bias = k.flag("bias", true),
                .init = k.init("init", Initializer::glorot_uniform()),
                .bias_init = k.number("bias_init", 0, -1e30f, 1e30f, Keys::Upper::included),
                .weight_decay = k.number("weight_decay", 0, 0, 1e30f, Keys::Upper::included)};
    return [name, o, classes](const Scope& s, Value x, Context& c) {
      nn::Dense d = o;
      if (classes) d.units = c.num_classes;
      return nn::dense(s, name, x, d);
    };
  }
  if (type == "batch_norm") {
    k.only({"type", "name", "momentum", "epsilon"});
    return [name, bn = bn_options(k)](const Scope& s, Value x, Context& c) {
      return nn::batch_norm(s, name, x, c.mode, c.updates, bn);
    };
  }
  return block_layer(k, type, name);
}

// The layers without variables, or nothing for another type.
std::optional<Step> layer_without_variables(Keys& k, const std::string& type,
                                            const std::string& name) {
  if (type == "max_pool" || type == "avg_pool") {
    k.only({"type", "name", "size", "stride", "padding"});
    const bool max = type == "max_pool";
    return [name, max, o = pool_options(k)](const Scope& s, Value x, Context&) {
      return max ? nn::max_pool(s, name, x, o) : nn::avg_pool(s, name, x, o);
    };
  }
  if (type == "lrn") {
    k.only({"type", "name", "depth_radius", "bias", "alpha", "beta"});
    ops::LRNAttrs o{.depth_radius = k.whole("depth_radius", 5, 0),
                    .bias = k.number("bias", 1.0f, 0, 1e30f, Keys::Upper::included),
                    .alpha = k.number("alpha", 1.0f, 0, 1e30f, Keys::Upper::included),
                    .beta = k.number("beta", 0.5f, 0, 1e30f, Keys::Upper::included)};
    return [name, o](const Scope& s, Value x, Context&) { return nn::lrn(s, name, x, o); };
  }
  if (type == "dropout") {
    k.only({"type", "name", "rate"});
    k.get("rate");  // required
    const float rate = k.number("rate", 0, 0, 1, Keys::Upper::excluded);
    return [rate](const Scope& s, Value x, Context& c) { return nn::dropout(s, x, rate, c.mode); };
  }
  if (type == "global_avg_pool" || type == "flatten") {
    k.only({"type", "name"});
    const bool pool = type == "global_avg_pool";
    return [pool](const Scope& s, Value x, Context&) {
      return pool ? nn::global_avg_pool(s, x) : nn::flatten(s, x);
    };
  }
  if (auto a = nn::parse_activation(type); a && *a != nn::Activation::none) {
    k.only({"type", "name"});
    return [a = *a](const Scope& s, Value x, Context&) { return nn::activation(s, x, a); };
  }
  return std::nullopt;
}

// A layer's build step from its JSON object (index i, for errors and default names).
Step parse_layer(const Json& layer, size_t i, const std::string& origin) {
  std::string where = fmt::format("layer {}", i);
  if (layer.is_object() && layer.contains("name") && layer["name"].is_string())
    where += fmt::format(" ({})", layer["name"].get<std::string>());
  Keys k(layer, origin, where);
  const std::string type = k.text("type", std::nullopt);
  const bool named = type == "conv2d" || type == "depthwise_conv2d" || type == "conv_bn" ||
                     type == "dense" || type == "batch_norm" || type == "residual" ||
                     type == "bottleneck" || type == "inverted_residual";
  const std::string name =
      k.text("name", named ? std::nullopt : std::optional(type + std::to_string(i)));
  if (std::optional<Step> step = layer_with_variables(k, type, name)) return *step;
  if (std::optional<Step> step = layer_without_variables(k, type, name)) return *step;
  k.bad("type", k.get("type"),
        "one of conv2d, depthwise_conv2d, conv_bn, dense, batch_norm, residual, bottleneck, "
        "inverted_residual, max_pool, avg_pool, global_avg_pool, flatten, dropout, lrn, relu, "
        "relu6, elu, sigmoid, tanh");
}

Recipe parse_recipe(const Json& json, const std::string& origin) {
  Keys k(json, origin, "\"recipe\"");
  k.only({"optimizer", "momentum", "lr", "lr_schedule", "batch_size", "epochs", "ema_decay",
          "weight_decay", "augmentation", "data"});
  Recipe r;
  r.optimizer = k.text("optimizer", r.optimizer);
  r.momentum = k.number("momentum", r.momentum, 0, 1, Keys::Upper::excluded);
  r.lr = k.number("lr", r.lr, 0, 1e30f, Keys::Upper::included);
  r.lr_schedule = k.text("lr_schedule", r.lr_schedule);
  r.batch_size = k.whole("batch_size", r.batch_size);
  r.epochs = k.number("epochs", static_cast<float>(r.epochs), 0, 1e6f, Keys::Upper::included);
  r.ema_decay = k.number("ema_decay", r.ema_decay, 0, 1, Keys::Upper::excluded);
  r.weight_decay = k.number("weight_decay", r.weight_decay, 0, 1e30f, Keys::Upper::included);
  r.augmentation = k.text("augmentation", r.augmentation);
  r.data = k.text("data", std::string());
  return r;
}

// "imagenet", or {"mean": [...], "stddev": [...]} with a value per input channel (deviations > 0).
Normalization parse_normalization(const Keys& top, int64_t channels) {
  const Json& v = top.get("normalization");
  const char* expected =
      "\"imagenet\" or {\"mean\": [...], \"stddev\": [...]}, a value per channel";
  if (v.is_string() && v.get<std::string>() == "imagenet" && channels == 3)
    return imagenet_normalization();
  if (!v.is_object()) top.bad("normalization", v, expected);
  Keys k(v, top.origin(), "normalization");
  k.only({"mean", "stddev"});
  Normalization n;
  for (const auto& [key, out] : {std::pair{"mean", &n.mean}, {"stddev", &n.stddev}}) {
    const Json& list = k.get(key);
    if (!list.is_array() || list.size() != static_cast<size_t>(channels))
      k.bad(key, list, fmt::format("a list of {} numbers, one per input channel", channels));
    for (const Json& x : list) {
      const bool positive = std::string(key) == "stddev";
      if (!x.is_number() || !std::isfinite(x.get<double>()) || (positive && x.get<double>() <= 0))
        k.bad(key, list, positive ? "numbers > 0" : "finite numbers");
      out->push_back(x.get<float>());
    }
  }
  return n;
}

}  // namespace

ModelDef parse_model_file(const std::string& text, const std::string& origin) {
  Json json;
  try {
    json = Json::parse(text);
  } catch (const Json::exception& e) {  // a syntax error, or a number past a double (1e400)
    fail("{}: not valid JSON: {}", origin, e.what());
  }
  Keys top(json, origin, "the file");
  top.only({"name", "description", "input", "normalization", "recipe", "layers"});
  ModelDef def;
  def.name = top.text("name", std::nullopt);
  for (char c : def.name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
      top.bad("name", top.get("name"), "letters, digits, '_', '-' and '.' only");
  def.description = top.text("description", "from the model file " + origin);
  const Json& input = top.get("input");
  if (!input.is_array() || input.size() != 3) top.bad("input", input, "[channels, height, width]");
  std::vector<int64_t> dims;
  for (const Json& d : input) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1)
      top.bad("input", input, "[channels, height, width] of whole numbers >= 1");
    dims.push_back(d.get<int64_t>());
  }
  def.default_input = Shape(dims);
  if (top.has("normalization")) def.normalization = parse_normalization(top, dims[0]);
  if (top.has("recipe")) def.recipe = parse_recipe(top.get("recipe"), origin);
  const Json& layers = top.get("layers");
  if (!layers.is_array() || layers.empty()) top.bad("layers", layers, "a non-empty list of layers");
  std::vector<Step> steps;
  for (size_t i = 0; i < layers.size(); ++i) steps.push_back(parse_layer(layers[i], i, origin));
  def.build = [steps, origin](const Scope& scope, Value images, int num_classes, Mode mode) {
    Context c{num_classes, mode, {}};
    Value x = images;
    for (size_t i = 0; i < steps.size(); ++i) {
      try {
        x = steps[i](scope, x, c);
      } catch (const Error& e) {
        fail("{}: layer {}: {}", origin, i, e.what());
      }
    }
    const Shape& y = x.shape();
    if (y.rank() != 2 || y[1] != num_classes)
      fail(
          "{}: the last layer gives values of shape {}, but the model must give (N, {}) logits, "
          "one per class: end with a dense layer of \"units\": \"num_classes\"",
          origin, y.to_string(), num_classes);
    return ModelOutputs{x, std::move(c.updates)};
  };
  def.source = text;
  // Shape mistakes show now, not at the first step.
  count_parameters(def, def.default_input, 10);
  return def;
}

std::string register_model_file(const std::string& text, const std::string& origin) {
  ModelDef def = parse_model_file(text, origin);
  std::string name = def.name;
  try {
    register_model(std::move(def));
  } catch (const Error& e) {
    fail("{}: {}", origin, e.what());
  }
  return name;
}

std::string load_model_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read the model file '{}'", path);
  std::ostringstream text;
  text << in.rdbuf();
  return register_model_file(text.str(), path);
}

}  // namespace tower
