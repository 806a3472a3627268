#include "tower/train/training_state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "tower/core/error.h"
#include "tower/models/model_file.h"
#include "tower/parallel/communicator.h"
#include "tower/train/lr_schedule.h"

namespace tower {
namespace {

using Json = nlohmann::json;

nlohmann::ordered_json identity_json(const RunIdentity& r) {
  nlohmann::ordered_json json = {{"model", r.model}, {"data", r.data}};
  if (!r.model_file.empty()) json["model_file"] = r.model_file;
  if (r.micro_batch_size > 0) {
    json["global_batch_size"] = r.global_batch_size;
    json["micro_batch_size"] = r.micro_batch_size;
  } else {
    json["batch_size"] = r.batch_size;
    json["num_towers"] = r.num_towers;
    json["ranks"] = r.ranks;
  }
  json["strategy"] = r.strategy;
  json["optimizer"] = r.optimizer;
  json["seed"] = r.seed;
  if (r.bn_momentum > 0) json["bn_momentum"] = r.bn_momentum;
  if (!r.freeze.empty()) json["freeze"] = r.freeze;
  return json;
}

// Reads the keys of one JSON object, each checked for presence, type and range; every error
// names the file and the key's path ("run.batch_size").
class Reader {
 public:
  Reader(const Json& object, std::string file, std::string path = "")
      : object_(object), file_(std::move(file)), path_(std::move(path)) {
    if (!object_.is_object())
      fail("checkpoint state file '{}': {} is not a JSON object", file_,
           path_.empty() ? std::string("the file") : "'" + path_ + "'");
  }
  const Json& at(const std::string& key, bool (Json::*is)() const, const char* expected) const {
    auto it = object_.find(key);
    if (it == object_.end()) error(key, "is missing", expected);
    if (!((*it).*is)()) error(key, "is " + it->dump(), expected);
    return *it;
  }
  int64_t whole(const std::string& key, int64_t min) const {
    const Json& v = at(key, &Json::is_number_integer, "a whole number");
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      error(key, "is " + v.dump(), "a whole number that fits 64 bits");
    if (v.get<int64_t>() < min)
      error(key, "is " + v.dump(), fmt::format("a whole number >= {}", min));
    return v.get<int64_t>();
  }
  std::string text(const std::string& key) const {
    std::string s = at(key, &Json::is_string, "a string").get<std::string>();
    if (s.empty()) error(key, "is empty", "a non-empty string");
    return s;
  }
  Reader object(const std::string& key) const {
    return Reader(at(key, &Json::is_object, "a JSON object"), file_, name(key));
  }
  bool has(const std::string& key) const { return object_.contains(key); }
  [[noreturn]] void error(const std::string& key, const std::string& what,
                          const std::string& expected) const {
    fail("checkpoint state file '{}': key '{}' {} (expected {})", file_, name(key), what, expected);
  }

 private:
  std::string name(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const Json& object_;
  std::string file_, path_;
};

EvalProgress eval_progress_from_json(const Reader& r) {
  EvalProgress p;
  const Json& best = r.at("best", &Json::is_number, "a precision in [0, 1]");
  if (!(best.get<double>() >= 0 && best.get<double>() <= 1))
    r.error("best", "is " + best.dump(), "a precision in [0, 1]");
  p.best = best.get<double>();
  p.best_step = r.whole("best_step", 0);
  p.since_best = r.whole("since_best", 0);
  p.plateau_wait = r.whole("plateau_wait", 0);
  p.lr_reductions = r.whole("lr_reductions", 0);
  return p;
}

// {"mean": [...], "stddev": [...]}: one value per channel each, the deviations > 0.
Normalization normalization_from(const Reader& r) {
  Normalization n;
  const auto values = [&r](const char* key, std::vector<float>& out, bool positive) {
    for (const Json& v : r.at(key, &Json::is_array, "a list of numbers")) {
      if (!v.is_number() || !std::isfinite(v.get<double>()) || (positive && v.get<double>() <= 0))
        r.error(key, "holds " + v.dump(), positive ? "numbers > 0" : "finite numbers");
      out.push_back(v.get<float>());
    }
  };
  values("mean", n.mean, false);
  values("stddev", n.stddev, true);
  if (n.mean.empty() || n.mean.size() != n.stddev.size())
    r.error("stddev", fmt::format("has {} values for {} means", n.stddev.size(), n.mean.size()),
            "one per channel");
  return n;
}

}  // namespace

Json eval_progress_to_json(const EvalProgress& p) {
  return {{"best", p.best},
          {"best_step", p.best_step},
          {"since_best", p.since_best},
          {"plateau_wait", p.plateau_wait},
          {"lr_reductions", p.lr_reductions}};
}

EvalProgress eval_progress_from_json(const Json& json, const std::string& file) {
  return eval_progress_from_json(Reader(json, file, "progress"));
}

Json training_state_to_json(const TrainingState& s) {
  Json json = {{"step", s.step},
               {"position", {{"epoch", s.epoch}, {"step", s.epoch_step}}},
               {"run", Json(identity_json(s.run))},
               {"devices", s.devices},
               {"ema", s.ema},
               {"augmentation", s.augmentation}};
  if (!s.classes.empty()) json["classes"] = s.classes;
  if (s.image_shape.rank() == 3) json["image_shape"] = s.image_shape.dims();
  if (s.test_fraction > 0) json["test_fraction"] = s.test_fraction;
  if (!s.program.empty()) json["program"] = s.program;
  if (s.progress.best_step >= 0) json["progress"] = eval_progress_to_json(s.progress);
  if (!s.normalization.empty())
    json["normalization"] = {{"mean", s.normalization.mean}, {"stddev", s.normalization.stddev}};
  if (!s.init.file.empty())
    json["init_from"] = {
        {"file", s.init.file}, {"sha256", s.init.sha256}, {"source", s.init.source}};
  if (s.schedule.total_steps > 0)
    json["schedule"] = {{"lr_schedule", s.schedule.spec},
                        {"lr", s.schedule.lr},
                        {"total_steps", s.schedule.total_steps}};
  return json;
}

TrainingState training_state_from_json(const Json& json, const std::string& file) {
  Reader top(json, file);
  TrainingState s;
  s.step = top.whole("step", 0);
  Reader position = top.object("position");
  s.epoch = position.whole("epoch", 0);
  s.epoch_step = position.whole("step", 0);
  Reader run = top.object("run");
  s.run.model = run.text("model");
  s.run.data = run.text("data");
  if (run.has("model_file")) s.run.model_file = run.text("model_file");
  if (run.has("micro_batch_size")) {
    s.run.global_batch_size = run.whole("global_batch_size", 1);
    s.run.micro_batch_size = run.whole("micro_batch_size", 1);
  } else {
    s.run.batch_size = run.whole("batch_size", 1);
    s.run.num_towers = run.whole("num_towers", 1);
    s.run.ranks = run.whole("ranks", 1);
  }
  s.run.strategy = run.text("strategy");
  s.run.optimizer = run.text("optimizer");
  s.run.seed = static_cast<uint64_t>(run.whole("seed", 0));
  if (run.has("bn_momentum")) {
    const Json& m = run.at("bn_momentum", &Json::is_number, "a number");
    if (!(m.get<double>() > 0 && m.get<double>() < 1))
      run.error("bn_momentum", "is " + m.dump(), "a number in (0, 1)");
    s.run.bn_momentum = m.get<float>();
  }
  if (run.has("freeze")) s.run.freeze = run.text("freeze");
  if (top.has("normalization")) s.normalization = normalization_from(top.object("normalization"));
  if (top.has("init_from")) {
    Reader init = top.object("init_from");
    s.init = {init.text("file"), init.text("sha256"), init.text("source")};
  }
  for (const Json& d : top.at("devices", &Json::is_array, "a list of devices")) {
    if (!d.is_string()) top.error("devices", "holds " + d.dump(), "a list of device names");
    s.devices.push_back(d.get<std::string>());
  }
  s.ema = top.at("ema", &Json::is_boolean, "true or false").get<bool>();
  if (top.has("augmentation")) s.augmentation = top.text("augmentation");
  if (top.has("classes"))
    for (const Json& c : top.at("classes", &Json::is_array, "a list of class names")) {
      if (!c.is_string()) top.error("classes", "holds " + c.dump(), "a list of class names");
      s.classes.push_back(c.get<std::string>());
    }
  if (top.has("image_shape")) {
    std::vector<int64_t> dims;
    for (const Json& d : top.at("image_shape", &Json::is_array, "[C, H, W]")) {
      if (!d.is_number_integer() || d.get<int64_t>() < 1)
        top.error("image_shape", "holds " + d.dump(), "[C, H, W] of whole numbers >= 1");
      dims.push_back(d.get<int64_t>());
    }
    if (dims.size() != 3)
      top.error("image_shape", "has " + std::to_string(dims.size()) + " values", "[C, H, W]");
    s.image_shape = Shape(dims);
  }
  if (top.has("program")) s.program = top.text("program");
  if (top.has("test_fraction")) {
    const Json& f = top.at("test_fraction", &Json::is_number, "a number in (0, 1)");
    if (!(f.get<double>() > 0 && f.get<double>() < 1))
      top.error("test_fraction", "is " + f.dump(), "a number in (0, 1)");
    s.test_fraction = f.get<double>();
  }
  if (top.has("progress")) s.progress = eval_progress_from_json(top.object("progress"));
  if (top.has("schedule")) {
    Reader schedule = top.object("schedule");
    s.schedule.spec = schedule.text("lr_schedule");
    s.schedule.lr = schedule.at("lr", &Json::is_number, "a number").get<double>();
    s.schedule.total_steps = schedule.whole("total_steps", 1);
  }
  return s;
}

std::vector<IdentityDifference> differences(const RunIdentity& saved, const RunIdentity& now) {
  std::vector<IdentityDifference> found;
  // The step's work first: with micro-batches, towers and ranks may change, G and M may not.
  auto size = [](int64_t v) { return v > 0 ? std::to_string(v) : std::string("none"); };
  if (saved.global_batch_size != now.global_batch_size)
    found.push_back(
        {"global_batch_size", size(saved.global_batch_size), size(now.global_batch_size)});
  if (saved.micro_batch_size != now.micro_batch_size)
    found.push_back({"micro_batch_size", size(saved.micro_batch_size), size(now.micro_batch_size)});
  if (saved.model_file != now.model_file)  // the texts themselves are too long to show
    found.push_back({"model_file", saved.model_file.empty() ? "none" : "one file",
                     now.model_file.empty() ? "none" : "another"});
  const nlohmann::ordered_json a = identity_json(saved), b = identity_json(now);
  for (const auto& [key, value] : a.items()) {
    if (key == "model_file" || key == "global_batch_size" || key == "micro_batch_size") continue;
    const auto it = b.find(key);
    if (it == b.end())
      found.push_back({key, value.dump(), "none"});
    else if (*it != value)
      found.push_back({key, value.dump(), it->dump()});
  }
  for (const auto& [key, value] : b.items())
    if (!a.contains(key) && key != "model_file" && key != "global_batch_size" &&
        key != "micro_batch_size")
      found.push_back({key, "none", value.dump()});
  return found;
}

const ModelDef& run_model(const TrainingState& state, const std::string& origin) {
  const RunIdentity& run = state.run;
  if (!run.model_file.empty()) register_model_file(run.model_file, "the model file of " + origin);
  const std::vector<std::string> known = model_names();
  if (std::find(known.begin(), known.end(), run.model) == known.end() && !state.program.empty() &&
      state.program != this_program())
    fail(
        "{}: model '{}' was registered by the program that trained it, '{}', not by this one "
        "('{}'): run that program's eval, predict or export (its cli_main has them all)",
        origin, run.model, state.program, this_program());
  return get_model(run.model);
}

std::string this_program() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::string() : self.filename().string();
}

void save_training_checkpoint(const std::string& dir, const TrainingState& state,
                              const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                              int keep_last, int64_t keep_also) {
  checkpoint_save(dir, state.step, tensors, training_state_to_json(state), keep_last, keep_also);
}

namespace {
TrainingState validated_state(const CheckpointData& data) {
  const std::string file = data.prefix + ".json";
  TrainingState state;
  try {
    state = training_state_from_json(data.state, file);
  } catch (const Error& e) {
    throw ForeignStateError(
        fmt::format("{} (not a state file written by `tower train`)", e.what()));
  }
  if (state.step != data.step)
    fail("checkpoint state file '{}': key 'step' is {}, but its tensors file is of step {}", file,
         state.step, data.step);
  return state;
}

}  // namespace

TrainingCheckpoint load_training_checkpoint(const std::string& prefix) {
  TrainingCheckpoint c{checkpoint_load(prefix), {}};
  c.state = validated_state(c.data);
  return c;
}

std::string older_checkpoint_hint(const std::string& dir, int64_t before_step,
                                  const std::string& flag) {
  std::vector<int64_t> steps = checkpoint_list(dir);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it >= before_step) continue;
    const std::string prefix = checkpoint_prefix(dir, *it);
    try {
      load_training_checkpoint(prefix);
      return fmt::format("the checkpoint before it, {}, is usable: pass {} {}", prefix, flag,
                         prefix);
    } catch (const Error&) {
    }
  }
  return fmt::format("no older checkpoint in '{}' is usable", dir);
}

namespace {
// Renames the files of a damaged checkpoint to <file>.damaged (or .damaged-2, ... when taken), so
// that the run resuming before it cannot overwrite the evidence; returns the new names.
std::string keep_aside(const std::string& prefix) {
  namespace fs = std::filesystem;
  std::string names;
  for (const char* ext : {".safetensors", ".json"}) {
    const std::string file = prefix + ext;
    std::error_code ec;
    if (!fs::exists(file, ec)) continue;
    std::string aside = file + ".damaged";
    for (int n = 2; fs::exists(aside, ec); ++n) aside = file + ".damaged-" + std::to_string(n);
    fs::rename(file, aside, ec);
    if (ec) fail("cannot keep the damaged file '{}' aside as '{}': {}", file, aside, ec.message());
    names += (names.empty() ? "" : " and ") + aside;
  }
  return names;
}
}  // namespace

std::optional<TrainingCheckpoint> find_resume_checkpoint(const std::string& dir) {
  const std::vector<int64_t> steps = checkpoint_list(dir);
  // Damaged checkpoints newer than the one resumed are kept aside (renamed) once a usable one is
  // found; with none usable, nothing is renamed and the run stops.
  std::vector<std::pair<std::string, std::string>> damaged;  // prefix, what is wrong
  // The index is written after the state file, so an index naming a checkpoint without one means
  // that files were deleted: the same rule as damage (starting over would overwrite the rest).
  std::optional<std::string> lost;
  if (auto named = checkpoint_indexed(dir); named && !std::filesystem::exists(*named + ".json") &&
                                            std::filesystem::exists(*named + ".safetensors")) {
    lost = *named;
    damaged.emplace_back(*named, fmt::format("'{}/checkpoint' names {}, but its state file {}.json "
                                             "is missing (deleted?)",
                                             dir, *named, *named));
    if (steps.empty())
      fail(
          "{}; no checkpoint of this dir is complete: move its files away or use another "
          "--train_dir",
          damaged.back().second);
  }
  // Tensors without their state file and newer than every complete checkpoint: a save that was
  // interrupted (the state file is written second). Said, then left to be overwritten.
  for (int64_t step : checkpoint_list_incomplete(dir))
    if ((steps.empty() || step > steps.back()) && checkpoint_prefix(dir, step) != lost)
      std::fprintf(stderr,
                   "%swarning: ignoring %s.safetensors: its state file is missing (a save that was "
                   "interrupted?); it will be overwritten\n",
                   log_prefix().c_str(), checkpoint_prefix(dir, step).c_str());
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string prefix = checkpoint_prefix(dir, *it);
    CheckpointData data;
    try {
      data = checkpoint_load(prefix);
    } catch (const Error& e) {
      damaged.emplace_back(prefix, e.what());
      continue;
    }
    for (const auto& [bad, why] : damaged)
      std::fprintf(stderr, "%swarning: %s; kept aside as %s\n", log_prefix().c_str(), why.c_str(),
                   keep_aside(bad).c_str());
    TrainingCheckpoint c{std::move(data), {}};
    try {
      c.state = validated_state(c.data);
    } catch (const Error& e) {
      fail("{}\n{}", e.what(), older_checkpoint_hint(dir, *it, "--resume_from"));
    }
    if (it != steps.rbegin())
      std::fprintf(stderr, "%swarning: resuming from the older checkpoint %s\n",
                   log_prefix().c_str(), prefix.c_str());
    return c;
  }
  for (const auto& [bad, why] : damaged)
    std::fprintf(stderr, "%swarning: %s\n", log_prefix().c_str(), why.c_str());
  if (!steps.empty())
    fail(
        "none of the {} checkpoints in '{}' is usable (see the warnings above); move them away or "
        "use another --train_dir",
        steps.size(), dir);
  return std::nullopt;
}

// A checkpoint of another run (model, data, layout, optimizer, seed) is refused with every
// difference at once.
void refuse_other_run(const TrainingCheckpoint& checkpoint, const RunIdentity& now) {
  const std::vector<IdentityDifference> diffs = differences(checkpoint.state.run, now);
  if (diffs.empty()) return;
  std::vector<std::string> was, is;
  bool layout = false, other = false;
  for (const IdentityDifference& d : diffs) {
    was.push_back(d.key + " = " + d.saved);
    is.push_back(d.key + " = " + d.now);
    layout |= d.key == "batch_size" || d.key == "num_towers" || d.key == "ranks";
    other |= d.key == "data" || d.key == "model" || d.key == "model_file";
  }
  fail(
      "checkpoint {} was written by a run with {}, but this run has {}; a resume continues that "
      "run: use the same flags{}{}",
      checkpoint.data.prefix, fmt::join(was, ", "), fmt::join(is, ", "),
      layout ? ". A run started with --global_batch_size and --micro_batch_size resumes on any "
               "number of towers and ranks"
             : "",
      other ? fmt::format(". To train on other data or classes starting from its weights, start "
                          "a new run in another --train_dir with --init_from {}",
                          checkpoint.data.prefix)
            : ", or another --train_dir");
}

// Resuming with other --max_steps, --epochs, --lr or --lr_schedule changes the learning rate
// of the steps still to train (a cosine decay stretched or cut short): refused unless asked for.
void refuse_schedule_change(const TrainingCheckpoint& checkpoint, const ScheduleRecord& now,
                            int64_t from_step, int64_t steps_per_epoch) {
  const ScheduleRecord& saved = checkpoint.state.schedule;
  if (saved.total_steps <= 0) return;  // an older checkpoint: nothing to compare with
  std::unique_ptr<LrSchedule> before;
  try {
    before = parse_lr_schedule(saved.spec, static_cast<float>(saved.lr), steps_per_epoch,
                               saved.total_steps);
  } catch (const Error& e) {
    fail("checkpoint {}: its learning-rate schedule: {}", checkpoint.data.prefix, e.what());
  }
  const std::unique_ptr<LrSchedule> after =
      parse_lr_schedule(now.spec, static_cast<float>(now.lr), steps_per_epoch, now.total_steps);
  const int64_t end = now.total_steps;  // past its own end, a schedule continues as it would
  const int64_t stride = std::max<int64_t>(1, (end - from_step) / 100000);
  for (int64_t s = from_step; s < end; s += stride) {
    if (before->lr(s) == after->lr(s)) continue;
    fail(
        "checkpoint {} was trained with --lr_schedule {} --lr {} over {} steps, this run asks "
        "for --lr_schedule {} --lr {} over {} steps: at step {} the learning rate would be {:g} "
        "instead of {:g}. Pass --allow_schedule_change to resume with the new schedule, or "
        "resume with the flags of the first run",
        checkpoint.data.prefix, saved.spec, static_cast<float>(saved.lr), saved.total_steps,
        now.spec, static_cast<float>(now.lr), now.total_steps, s, after->lr(s), before->lr(s));
  }
}

// The train dir exists (created if need be), is a directory and can be written.
void prepare_train_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    fail("--train_dir '{}' is a file, not a directory", dir);
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create --train_dir '{}': {}", dir, ec.message());
  if (::access(dir.c_str(), W_OK) != 0)
    fail("--train_dir '{}' is not writable: {}", dir, std::strerror(errno));
}

// One writer per train dir: an advisory lock on DIR/.lock, held while the run lasts (the kernel
// drops the lock of a killed process, so a stale one never blocks). Returns the lock's descriptor.
int lock_train_dir(const std::string& dir) {
  const std::string file = dir + "/.lock";
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot open the lock file '{}' of --train_dir: {}", file, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof pid - 1, 0);
    ::close(fd);
    fail(
        "--train_dir '{}' is in use by another `tower train` (pid {}): wait for it to end, or use "
        "another --train_dir",
        dir, n > 0 ? std::string(pid, static_cast<size_t>(n)) : std::string("unknown"));
  }
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The pid is only for the message of a second run; the lock itself holds.
  }
  return fd;
}

}  // namespace tower
