#include "tower/io/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "tower/io/atomic_file.h"
#include "tower/io/safetensors.h"

namespace tower {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kStem = "model.ckpt-";
constexpr std::string_view kTensorsExt = ".safetensors";
constexpr std::string_view kStateExt = ".json";
constexpr std::string_view kIndexName = "checkpoint";

std::string checkpoint_name(int64_t step) { return fmt::format("{}{}", kStem, step); }

// The step of "model.ckpt-<step>" written as tower writes it (no sign, no leading zeros).
std::optional<int64_t> parse_checkpoint_name(std::string_view name) {
  if (!name.starts_with(kStem)) return std::nullopt;
  std::string_view digits = name.substr(kStem.size());
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  int64_t step = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size() || step < 0) return std::nullopt;
  return step;
}

bool is_complete(const std::string& prefix) {
  std::error_code ec;
  return fs::is_regular_file(prefix + std::string(kTensorsExt), ec) &&
         fs::is_regular_file(prefix + std::string(kStateExt), ec);
}

// The prefix the index names as latest, or nothing when there is no usable index.
std::optional<std::string> read_index(const std::string& dir) {
  std::ifstream in(fs::path(dir) / kIndexName);
  if (!in) return std::nullopt;
  constexpr std::string_view key = "model_checkpoint_path:";
  std::string line;
  while (std::getline(in, line)) {
    std::string_view rest(line);
    if (!rest.starts_with(key)) continue;
    rest.remove_prefix(key.size());
    size_t open = rest.find('"'), close = rest.rfind('"');
    if (open == std::string_view::npos || close <= open + 1) return std::nullopt;
    fs::path named(std::string(rest.substr(open + 1, close - open - 1)));
    // A name no file system holds is an unreadable index, not a path to look up.
    if (named.native().size() > 4096 || named.filename().native().size() > 255) return std::nullopt;
    return named.is_absolute() ? named.string() : (fs::path(dir) / named).string();
  }
  return std::nullopt;
}

void write_index(const std::string& dir, int64_t latest, const std::vector<int64_t>& kept) {
  std::string text = fmt::format("model_checkpoint_path: \"{}\"\n", checkpoint_name(latest));
  for (int64_t step : kept)
    if (step != latest)
      text += fmt::format("all_model_checkpoint_paths: \"{}\"\n", checkpoint_name(step));
  text += fmt::format("all_model_checkpoint_paths: \"{}\"\n", checkpoint_name(latest));
  atomic_write_file((fs::path(dir) / kIndexName).string(), text);
}

// Deletes every model.ckpt-<step>.* file (complete, partial or leftover .tmp) whose step is not
// kept. The state file goes first, so a checkpoint never looks complete while half deleted.
void delete_unkept(const std::string& dir, const std::vector<int64_t>& kept) {
  std::vector<fs::path> state_files, other_files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    size_t dot = name.find('.', kStem.size());
    if (dot == std::string::npos) continue;
    auto step = parse_checkpoint_name(std::string_view(name).substr(0, dot));
    if (!step || std::find(kept.begin(), kept.end(), *step) != kept.end()) continue;
    (name.substr(dot) == kStateExt ? state_files : other_files).push_back(entry.path());
  }
  // Failing to delete an old checkpoint loses nothing, so it is not worth stopping training for.
  for (const auto& p : state_files) fs::remove(p, ec);
  for (const auto& p : other_files) fs::remove(p, ec);
}

std::string strip_suffix(std::string prefix) {
  for (std::string_view ext : {kTensorsExt, kStateExt})
    if (std::string_view(prefix).ends_with(ext)) prefix.resize(prefix.size() - ext.size());
  return prefix;
}

}  // namespace

std::string checkpoint_prefix(const std::string& dir, int64_t step) {
  return (fs::path(dir) / checkpoint_name(step)).string();
}

void checkpoint_save(const std::string& dir, int64_t step,
                     const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                     const nlohmann::json& state, int keep_last, int64_t keep_also) {
  if (step < 0)
    fail("cannot save a checkpoint for step {} in '{}': steps are non-negative", step, dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create the checkpoint directory '{}': {}", dir, ec.message());

  const std::string prefix = checkpoint_prefix(dir, step);
  safetensors_write(prefix + std::string(kTensorsExt), tensors, {{"step", std::to_string(step)}},
                    Checksums::yes);
  atomic_write_file(prefix + std::string(kStateExt), state.dump(2) + "\n");

  std::vector<int64_t> others = checkpoint_list(dir);
  const bool keep_that =
      keep_also != step && std::find(others.begin(), others.end(), keep_also) != others.end();
  others.erase(std::remove(others.begin(), others.end(), step), others.end());
  others.erase(std::remove(others.begin(), others.end(), keep_also), others.end());
  if (keep_last > 0 && others.size() > static_cast<size_t>(keep_last - 1))
    others.erase(others.begin(), others.end() - (keep_last - 1));
  std::vector<int64_t> kept = others;
  if (keep_that) kept.insert(std::lower_bound(kept.begin(), kept.end(), keep_also), keep_also);
  kept.push_back(step);
  write_index(dir, step, kept);
  if (keep_last > 0) delete_unkept(dir, kept);
}

std::optional<std::string> checkpoint_latest(const std::string& dir) {
  if (auto named = read_index(dir); named && is_complete(*named)) return named;
  std::vector<int64_t> steps = checkpoint_list(dir);
  if (steps.empty()) return std::nullopt;
  return checkpoint_prefix(dir, steps.back());
}

CheckpointData checkpoint_load(const std::string& prefix_or_file) {
  CheckpointData data;
  data.prefix = strip_suffix(prefix_or_file);
  const std::string tensors_path = data.prefix + std::string(kTensorsExt);
  const std::string state_path = data.prefix + std::string(kStateExt);
  std::error_code ec;
  const bool has_tensors = fs::exists(tensors_path, ec), has_state = fs::exists(state_path, ec);
  if (!has_tensors && !has_state)
    fail("no checkpoint '{}': neither '{}' nor '{}' exists", data.prefix, tensors_path, state_path);
  if (!has_state)
    fail(
        "'{}' has no state file '{}': it holds weights but no training run to resume (another "
        "tool's file, or a tower save cut short). `tower train --init_from {}` starts a new run "
        "from its weights",
        tensors_path, state_path, tensors_path);
  if (!has_tensors)
    fail("checkpoint '{}' is incomplete: '{}' is missing", data.prefix, tensors_path);

  SafetensorsFile file = safetensors_read(tensors_path);
  data.tensors = std::move(file.tensors);

  std::ifstream in(state_path);
  if (!in) fail("cannot open checkpoint state file '{}'", state_path);
  try {
    data.state = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {  // syntax, or a number past a double (1e400)
    fail("checkpoint state file '{}' is corrupt: not valid JSON ({})", state_path, e.what());
  }

  // The step travels inside the tensors file, so a checkpoint renamed by hand still knows it.
  if (auto it = file.metadata.find("step"); it != file.metadata.end()) {
    const std::string& text = it->second;
    auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), data.step);
    if (err != std::errc() || end != text.data() + text.size() || data.step < 0)
      fail("safetensors file '{}' is corrupt: its metadata step '{}' is not a step number",
           tensors_path, text);
  } else if (auto step = parse_checkpoint_name(fs::path(data.prefix).filename().string())) {
    data.step = *step;
  } else {
    fail(
        "checkpoint '{}' does not say its step: no \"step\" metadata in '{}' and the name is not "
        "model.ckpt-<step>",
        data.prefix, tensors_path);
  }
  return data;
}

namespace {
// Steps of the files model.ckpt-<step><ext> in `dir` whose prefix `keep` accepts, ascending.
template <typename Keep>
std::vector<int64_t> steps_of(const std::string& dir, std::string_view ext, Keep keep) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (!std::string_view(name).ends_with(ext)) continue;
    auto step = parse_checkpoint_name(std::string_view(name).substr(0, name.size() - ext.size()));
    if (step && keep(checkpoint_prefix(dir, *step))) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}
}  // namespace

std::vector<int64_t> checkpoint_list(const std::string& dir) {
  return steps_of(dir, kStateExt, is_complete);
}

std::vector<int64_t> checkpoint_list_incomplete(const std::string& dir) {
  return steps_of(dir, kTensorsExt, [](const std::string& prefix) {
    std::error_code ec;
    return !fs::exists(prefix + std::string(kStateExt), ec);
  });
}

std::optional<std::string> checkpoint_indexed(const std::string& dir) { return read_index(dir); }

}  // namespace tower
