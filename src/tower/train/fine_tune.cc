#include "tower/train/fine_tune.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "tower/core/sha256.h"
#include "tower/io/checkpoint.h"
#include "tower/io/safetensors.h"
#include "tower/train/ema.h"

namespace tower {
namespace fs = std::filesystem;
namespace {

// The file's tensors and what they are.
struct Source {
  std::string file, what;
  std::map<std::string, Tensor> tensors;
  bool averages = false;  // a tower checkpoint with moving averages of the weights
};

bool exists(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

// A tower checkpoint: its state file names the run that wrote it.
Source read_checkpoint(const std::string& prefix) {
  CheckpointData data = checkpoint_load(prefix);
  const nlohmann::json& state = data.state;
  const auto run =
      state.is_object() ? state.value("run", nlohmann::json::object()) : nlohmann::json::object();
  Source source{.file = data.prefix + ".safetensors"};
  source.averages = state.is_object() && state.value("ema", false);
  source.what = fmt::format("a tower checkpoint of {} on {} at step {}{}",
                            run.is_object() ? run.value("model", std::string("?")) : "?",
                            run.is_object() ? run.value("data", std::string("?")) : "?", data.step,
                            source.averages ? " (its moving averages of the weights)" : "");
  source.tensors = std::move(data.tensors);
  return source;
}

Source read_source(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const auto latest = checkpoint_latest(path);
    if (!latest) fail("--init_from {}: the directory holds no complete checkpoint", path);
    return read_checkpoint(*latest);
  }
  std::string prefix = path;
  for (const char* ext : {".safetensors", ".json"})
    if (prefix.ends_with(ext)) prefix.resize(prefix.size() - std::string(ext).size());
  if (exists(prefix + ".json") && exists(prefix + ".safetensors")) return read_checkpoint(prefix);
  const std::string file = exists(path) ? path : prefix + ".safetensors";
  if (!exists(file) || path.ends_with(".json"))
    fail("--init_from {}: no such safetensors file or tower checkpoint", path);
  SafetensorsFile read = safetensors_read(file);
  return {.file = file, .what = "a safetensors file", .tensors = std::move(read.tensors)};
}

// The file's tensor as f32 in this model's layout.
Tensor as_variable(const std::string& key, const Tensor& t, bool transposed,
                   const std::string& file) {
  Tensor f32(t.shape(), DType::f32);
  if (t.dtype() == DType::f32) {
    f32.copy_from(t);
  } else if (t.dtype() == DType::bf16) {
    const auto* in = static_cast<const uint16_t*>(t.raw_data());
    float* out = f32.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = bf16_to_f32(in[i]);
  } else {
    fail("--init_from {}: tensor '{}' is {}; weights must be F32 or BF16", file, key,
         dtype_name(t.dtype()));
  }
  if (!transposed) return f32;
  const int64_t rows = t.shape()[0], cols = t.shape()[1];
  Tensor out(Shape{cols, rows}, DType::f32);
  const float* in = f32.data<float>();
  float* o = out.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) o[c * rows + r] = in[r * cols + c];
  return out;
}

// Where each variable lies in the file, in the naming that finds the most of them.
struct Found {
  std::string key;
  bool transposed = false;
};
std::vector<std::optional<Found>> locate(const Source& source, const ModelDef& model,
                                         const std::vector<InitVariable>& variables,
                                         std::string& naming) {
  std::vector<std::optional<Found>> own(variables.size()), foreign(variables.size());
  size_t own_count = 0, foreign_count = 0;
  for (size_t i = 0; i < variables.size(); ++i) {
    const std::string& name = variables[i].name;
    const std::string average = ExponentialMovingAverage::shadow_name(name);
    if (source.averages && source.tensors.count(average))
      own[i] = Found{average};
    else if (source.tensors.count(name))
      own[i] = Found{name};
    own_count += own[i] ? 1 : 0;
    if (!model.foreign_names) continue;
    for (const ForeignName& f : model.foreign_names(name))
      if (source.tensors.count(f.key)) {
        foreign[i] = Found{f.key, f.transposed};
        ++foreign_count;
        break;
      }
  }
  if (foreign_count > own_count) {
    naming = fmt::format("{}'s foreign names (torchvision's or timm's)", model.name);
    return foreign;
  }
  naming = "tower's names";
  return own;
}

std::string shape_text(const Shape& shape) { return shape.to_string(); }

std::vector<std::string> first_names(const std::vector<InitVariable>& variables, size_t n) {
  std::vector<std::string> names;
  for (size_t i = 0; i < std::min(n, variables.size()); ++i) names.push_back(variables[i].name);
  return names;
}

// The tensors of the file that no variable took.
void list_unused(const Source& source, const std::vector<std::optional<Found>>& found,
                 const std::vector<InitVariable>& variables, InitFrom& init) {
  std::set<std::string> used;
  for (const auto& f : found)
    if (f) used.insert(f->key);
  for (const auto& [key, tensor] : source.tensors) {
    if (used.count(key)) continue;
    // A variable's raw values where its average was taken, an optimizer slot or moving average
    // of a variable, or PyTorch's batch counter.
    const bool of_variable = std::any_of(variables.begin(), variables.end(),
                                         [&](const auto& v) { return within_scope(key, v.name); });
    if (key.ends_with("num_batches_tracked"))
      ++init.counters;
    else if (of_variable)
      ++init.skipped;
    else
      init.ignored.push_back(fmt::format("{} {}", key, shape_text(tensor.shape())));
  }
}

}  // namespace

InitFrom read_init_from(const std::string& path, const ModelDef& model,
                        const std::vector<InitVariable>& variables, bool partial) {
  Source source = read_source(path);
  InitFrom init{.file = source.file, .sha256 = sha256_file(source.file)};
  std::string naming;
  const std::vector<std::optional<Found>> found = locate(source, model, variables, naming);
  init.source = fmt::format("{}, {}", source.what, naming);
  std::vector<std::string> errors;
  for (size_t i = 0; i < variables.size(); ++i) {
    const InitVariable& v = variables[i];
    if (!found[i]) {
      if (v.head)
        init.reinitialized.push_back(fmt::format("{}: not in the file (a new head)", v.name));
      else
        (partial ? init.missing : errors).push_back(fmt::format("{}: not in the file", v.name));
      continue;
    }
    const Tensor& t = source.tensors.at(found[i]->key);
    const bool transposed = found[i]->transposed && t.shape().rank() == 2;
    const Shape in_model =
        transposed ? Shape{t.shape()[1], t.shape()[0]} : t.shape();  // the file's, our layout
    if (in_model != v.shape) {
      const std::string why = fmt::format("{}: the file's '{}' is {}{}, the model's {}", v.name,
                                          found[i]->key, shape_text(t.shape()),
                                          transposed ? " (transposed)" : "", shape_text(v.shape));
      if (v.head)
        init.reinitialized.push_back(why + " (a new head for this run's classes)");
      else
        (partial ? init.missing : errors).push_back(why);
      continue;
    }
    init.values.emplace(v.name, as_variable(found[i]->key, t, transposed, source.file));
  }
  if (init.values.empty())
    fail(
        "--init_from {}: none of its {} tensors fits model {} ({}; the model's first variables: "
        "{})",
        path, source.tensors.size(), model.name, init.source,
        fmt::join(first_names(variables, 3), ", "));
  if (!errors.empty())
    fail(
        "--init_from {} ({}) does not fit model {}: {} of its {} variables{}:\n  {}\n"
        "--init_partial starts them as initialized instead",
        path, init.source, model.name, errors.size(), variables.size(),
        errors.size() > 20 ? " (the first 20)" : "",
        fmt::join(errors.begin(), errors.begin() + std::min<size_t>(20, errors.size()), "\n  "));
  list_unused(source, found, variables, init);
  init.loaded = init.values.size();
  return init;
}

std::string InitFrom::report(size_t variables) const {
  std::string text = fmt::format("init from {} (sha256 {}): {}\n  {} of {} variables loaded\n",
                                 file, sha256, source, loaded, variables);
  const auto list = [&text](const char* what, const std::vector<std::string>& lines) {
    if (lines.empty()) return;
    text += fmt::format("  {} {}:\n", lines.size(), what);
    for (const std::string& line : lines) text += fmt::format("    {}\n", line);
  };
  list("re-initialized", reinitialized);
  list("not in the file, started as initialized (--init_partial)", missing);
  list("tensors of the file ignored (no variable of that name)", ignored);
  if (skipped > 0)
    text += fmt::format(
        "  {} tensors skipped: optimizer state and raw weights beside their averages (a new run "
        "starts its own)\n",
        skipped);
  if (counters > 0)
    text += fmt::format("  {} batch counters skipped (num_batches_tracked: tower has none)\n",
                        counters);
  return text;
}

std::string to_model_names(std::map<std::string, Tensor>& tensors, const ModelDef& model) {
  if (!model.foreign_names) return "tower's names";
  Source source{.tensors = std::move(tensors)};
  // The names do not depend on the class count or the image size.
  const std::vector<InitVariable> variables = model_variables(model, model.default_input, 10);
  std::string naming;
  const std::vector<std::optional<Found>> found = locate(source, model, variables, naming);
  std::map<std::string, Tensor> renamed;
  for (size_t i = 0; i < variables.size(); ++i) {
    if (!found[i] || found[i]->key == variables[i].name) continue;
    const auto it = source.tensors.find(found[i]->key);
    const bool transposed = found[i]->transposed && it->second.shape().rank() == 2;
    renamed.emplace(variables[i].name, as_variable(it->first, it->second, transposed, "the file"));
    source.tensors.erase(it);
  }
  for (auto& [name, tensor] : renamed) source.tensors.insert_or_assign(name, std::move(tensor));
  tensors = std::move(source.tensors);
  return naming;
}

std::vector<InitVariable> model_variables(const ModelDef& model, const Shape& input,
                                          int num_classes) {
  // The classifier is what changes shape with the class count.
  const auto build = [&](int classes) {
    Graph graph;
    Scope scope(graph);
    std::vector<int64_t> dims = {1};
    for (int64_t d : input.dims()) dims.push_back(d);
    model.build(scope, scope.placeholder("images", Shape(dims)), classes, Mode::train);
    std::vector<InitVariable> variables;
    for (const VariableInfo& v : graph.variables()) variables.push_back({v.name, v.spec.shape});
    return variables;
  };
  std::vector<InitVariable> variables = build(num_classes);
  const std::vector<InitVariable> other = build(num_classes + 1);
  for (size_t i = 0; i < variables.size(); ++i)
    variables[i].head = i >= other.size() || other[i].shape != variables[i].shape;
  return variables;
}

namespace {
std::string top_scope(const std::string& name) { return name.substr(0, name.find('/')); }
}  // namespace

std::vector<std::string> resolve_freeze(const std::string& spec,
                                        const std::vector<InitVariable>& variables) {
  std::vector<std::string> scopes, tops;
  for (const InitVariable& v : variables)
    if (std::find(tops.begin(), tops.end(), top_scope(v.name)) == tops.end())
      tops.push_back(top_scope(v.name));
  if (spec.empty()) return scopes;
  if (spec == "backbone") {
    for (const std::string& top : tops)
      if (std::none_of(variables.begin(), variables.end(),
                       [&](const auto& v) { return v.head && within_scope(v.name, top); }))
        scopes.push_back(top);
    if (scopes.empty()) fail("--freeze backbone: the model has no variables outside its head");
    return scopes;
  }
  size_t begin = 0;
  while (begin <= spec.size()) {
    size_t end = spec.find(',', begin);
    if (end == std::string::npos) end = spec.size();
    std::string scope = spec.substr(begin, end - begin);
    std::replace(scope.begin(), scope.end(), '.', '/');
    while (!scope.empty() && scope.back() == '/') scope.pop_back();
    if (scope.empty() || std::none_of(variables.begin(), variables.end(),
                                      [&](const auto& v) { return within_scope(v.name, scope); }))
      fail("--freeze '{}': no variable of the model lies under '{}' (its scopes: {}, or backbone)",
           spec, scope, fmt::join(tops, ", "));
    scopes.push_back(scope);
    begin = end + 1;
  }
  return scopes;
}

std::string frozen_line(const std::vector<std::string>& scopes,
                        const std::vector<InitVariable>& variables, const Thaw& thaw) {
  if (scopes.empty()) return "";
  int64_t count = 0, parameters = 0;
  for (const InitVariable& v : variables)
    if (std::any_of(scopes.begin(), scopes.end(),
                    [&](const auto& s) { return within_scope(v.name, s); })) {
      ++count;
      parameters += v.shape.numel();
    }
  return fmt::format(
      "frozen: {} ({} variables, {} values): no gradient, no optimizer state, no update; batch "
      "norms among them normalize with their moving averages{}\n",
      fmt::join(scopes, ", "), count, parameters,
      thaw.step >= 0 ? fmt::format("; they thaw at step {} (epoch {:g}), then the learning rate "
                                   "is x {:g}",
                                   thaw.step, thaw.epochs, thaw.lr_factor)
                     : "");
}

}  // namespace tower
