#include "tower/parallel/data_parallel.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include "tower/core/allocator.h"
#include "tower/core/philox.h"
#include "tower/core/trace.h"
#include "tower/graph/gradients.h"

namespace tower {

// What differs between the two ways a step runs its towers, behind one interface:
// - ClassicTowers: each tower runs its whole share of the batch at once, and the strategy's
//   reducer averages the gradients (weighted by examples);
// - MicroBatches: the batch is cut into micro-batches that the towers run in turn, and one fixed
//   tree over micro-batch indices sums their gradients (tree_reducer.h): the same bits for any
//   number of towers and ranks.
// DataParallel builds, compiles, feeds and runs the towers; the mode decides each of these points.
class DataParallel::Mode {
 public:
  explicit Mode(DataParallel& dp) : dp_(dp) {}
  virtual ~Mode() = default;
  // The examples in one unit of what is shared out over the towers.
  virtual int64_t unit() const = 0;
  // The rows of tower t's programs.
  virtual int64_t program_rows(const Tower& t) const = 0;
  // Whether tower i > 0 builds a graph of its own, or compiles tower 0's.
  virtual bool own_graph() const = 0;
  // What every rank's variables must agree on besides their shapes.
  virtual void add_layout(std::vector<std::pair<std::string, std::string>>& keys) const {}
  // The contended-mode group the towers share, if any.
  virtual std::shared_ptr<ProgramGroup> group() const { return nullptr; }
  // Tower i's programs over `fetches` on `vars`.
  virtual void compile(Tower& t, int i, const std::vector<Value>& fetches, VariableStore& vars,
                       const ProgramOptions& options) = 0;
  virtual std::unique_ptr<GradientReducer> make_reducer(
      std::vector<std::vector<Tensor>> grad_buffers, std::vector<float> weights,
      const DataParallelOptions& options) = 0;
  // Before the towers start: the inputs they all read.
  virtual void feed(const Tensor& images, const Tensor& labels) {}
  // On tower `index`'s worker thread.
  virtual void run(Tower& t, int index, uint64_t step, const Tensor& images,
                   const Tensor& labels) = 0;
  // After the reducer finished: the loss and metrics, averaged over every rank's examples.
  virtual StepResult result() = 0;
  virtual void prefetch(const Tensor& images, const Tensor& labels) {}

 protected:
  DataParallel& dp_;
};

class DataParallel::ClassicTowers final : public Mode {
 public:
  using Mode::Mode;
  int64_t unit() const override { return 1; }
  int64_t program_rows(const Tower& t) const override { return t.batch; }
  bool own_graph() const override { return true; }
  void add_layout(std::vector<std::pair<std::string, std::string>>& keys) const override {
    keys.emplace_back("towers", std::to_string(dp_.num_towers()));
  }
  // One-thread CPU towers share contended mode (ProgramGroup).
  std::shared_ptr<ProgramGroup> group() const override {
    const auto& towers = dp_.towers_;
    if (towers.size() < 2 || !std::all_of(towers.begin(), towers.end(), [](const Tower& t) {
          return t.device.kind == DeviceKind::cpu && t.threads == 1;
        }))
      return nullptr;
    return std::make_shared<ProgramGroup>(static_cast<int>(towers.size()));
  }
  // Tower 0 also runs the graph's updates (moving averages).
  void compile(Tower& t, int i, const std::vector<Value>& fetches, VariableStore& vars,
               const ProgramOptions& options) override {
    t.program = std::make_unique<Program>(dp_.graph_, fetches, vars, options,
                                          i == 0 ? t.outputs.updates : std::vector<Value>{});
  }
  std::unique_ptr<GradientReducer> make_reducer(std::vector<std::vector<Tensor>> grad_buffers,
                                                std::vector<float> weights,
                                                const DataParallelOptions& options) override {
#ifdef TOWER_HAVE_NCCL
    if (dp_.nccl_) {
      std::vector<void*> streams;
      for (const Tower& t : dp_.towers_) streams.push_back(t.program->stream());
      return make_nccl_reducer(std::move(grad_buffers), std::move(weights), std::move(streams),
                               options.bucket_bytes, dp_.comm_);
    }
#endif
    if (options.strategy == Strategy::central)
      return make_central_reducer(std::move(grad_buffers), std::move(weights), dp_.comm_);
    return make_allreduce_reducer(std::move(grad_buffers), std::move(weights), options.bucket_bytes,
                                  dp_.comm_);
  }
  void feed(const Tensor& images, const Tensor& labels) override {
    const bool prefetched = prefetched_ != nullptr && prefetched_ == images.raw_data();
    prefetched_ = nullptr;
    for (Tower& t : dp_.towers_) {
      if (!prefetched) dp_.copy_inputs(t, *t.program, images, labels, t.offset, t.batch);
      if (t.copy_stream != nullptr) device_ops(t.device.kind).synchronize(t.copy_stream);
    }
  }
  // (Staged) refresh the tower's variables from the host replica, run forward and backward, hand
  // each gradient to the reducer as it is ready, then help it. NCCL takes the gradients from the
  // device, ordered after their kernels on the GPU; host copies wait for the kernels.
  void run(Tower& t, int index, uint64_t step, const Tensor&, const Tensor&) override {
    if (dp_.staged_) t.device_vars->copy_from(*dp_.replicas_[static_cast<size_t>(t.replica)]);
    const int first_grad = 1 + static_cast<int>(t.outputs.metrics.size());
    t.program->run(step, [&](int fetch) {
      if (dp_.staged_ && !(dp_.nccl_ && fetch >= first_grad)) {
        t.program->synchronize();
        t.staged[static_cast<size_t>(fetch)].copy_from(t.program->output(fetch));
      }
      if (fetch >= first_grad) dp_.reducer_->ready(index, fetch - first_grad);
    });
    dp_.reducer_->help(index);
  }
  // [loss, metrics...] weighted by each tower's share of the batch of all ranks.
  StepResult result() override {
    std::vector<float> sums(1 + dp_.towers_[0].outputs.metrics.size(), 0.0f);
    for (const Tower& t : dp_.towers_) {
      const float w = dp_.weight(t);
      for (size_t m = 0; m < sums.size(); ++m)
        sums[m] += w * dp_.fetched(t, static_cast<int>(m)).data<float>()[0];
    }
    dp_.comm_->allreduce_sum(sums.data(), static_cast<int64_t>(sums.size()));
    return StepResult{sums[0], std::vector<float>(sums.begin() + 1, sums.end())};
  }
  void prefetch(const Tensor& images, const Tensor& labels) override {
    if (dp_.towers_[0].copy_stream == nullptr) return;
    for (Tower& t : dp_.towers_) dp_.copy_inputs(t, *t.program, images, labels, t.offset, t.batch);
    prefetched_ = images.raw_data();
  }

 private:
  const void* prefetched_ = nullptr;  // the images prefetch() is copying
};

class DataParallel::MicroBatches final : public Mode {
 public:
  MicroBatches(DataParallel& dp, int64_t micro) : Mode(dp), micro_(micro) {}
  int64_t unit() const override { return micro_; }
  int64_t program_rows(const Tower&) const override { return micro_; }
  // Built once, for one micro-batch: its nodes (and so the keys of their random numbers) do not
  // depend on the tower.
  bool own_graph() const override { return false; }
  // The updates see only micro-batch 0 (rank 0's tower 0), which then runs its other micro-batches
  // with a second program without them.
  void compile(Tower& t, int, const std::vector<Value>& fetches, VariableStore& vars,
               const ProgramOptions& options) override {
    const std::vector<Value> updates =
        t.first_micro == 0 ? t.outputs.updates : std::vector<Value>{};
    t.program = std::make_unique<Program>(dp_.graph_, fetches, vars, options, updates);
    if (!updates.empty() && t.batch > micro_)
      t.plain = std::make_unique<Program>(dp_.graph_, fetches, vars, options);
  }
  std::unique_ptr<GradientReducer> make_reducer(std::vector<std::vector<Tensor>>,
                                                std::vector<float>,
                                                const DataParallelOptions&) override {
    std::vector<Shape> shapes;
    for (const VariableInfo& v : dp_.trainable_) shapes.push_back(v.value.shape());
    MicroBatchLayout layout;
    layout.micro_batches = dp_.global_batch_ / micro_ * dp_.comm_->size();
    layout.rank_first = dp_.towers_[0].first_micro;
    for (const Tower& t : dp_.towers_) layout.tower_count.push_back(t.batch / micro_);
    const int scalars = 1 + static_cast<int>(dp_.towers_[0].outputs.metrics.size());
    auto tree = std::make_unique<TreeReducer>(shapes, dp_.num_replicas(), std::move(layout),
                                              scalars, dp_.comm_);
    tree_ = tree.get();
    return tree;
  }
  // Each of the tower's micro-batches in turn, forward and backward, its gradients handed to the
  // tree as it finishes. Random numbers (dropout) are keyed by the step and the micro-batch, not
  // the tower.
  void run(Tower& t, int index, uint64_t step, const Tensor& images,
           const Tensor& labels) override {
    if (dp_.staged_) t.device_vars->copy_from(*dp_.replicas_[static_cast<size_t>(t.replica)]);
    const int first_grad = 1 + static_cast<int>(t.outputs.metrics.size());
    const int64_t rank_first = dp_.towers_[0].first_micro;
    std::vector<const Tensor*> grads(t.grads.size());
    std::vector<float> scalars(static_cast<size_t>(first_grad));
    for (int64_t micro = t.first_micro; micro < t.first_micro + t.batch / micro_; ++micro) {
      Program& program = t.plain != nullptr && micro != 0 ? *t.plain : *t.program;
      dp_.copy_inputs(t, program, images, labels, (micro - rank_first) * micro_, micro_);
      if (t.copy_stream != nullptr) device_ops(t.device.kind).synchronize(t.copy_stream);
      program.run(philox_stream(step, static_cast<uint64_t>(micro)));
      for (int f = 0; f < program.num_fetches(); ++f) {
        const Tensor* value = &program.output(f);
        if (dp_.staged_) {
          program.synchronize();
          t.staged[static_cast<size_t>(f)].copy_from(*value);
          value = &t.staged[static_cast<size_t>(f)];
        }
        if (f < first_grad)
          scalars[static_cast<size_t>(f)] = value->data<float>()[0];
        else
          grads[static_cast<size_t>(f - first_grad)] = value;
      }
      tree_->add(index, micro, grads, scalars.data());
    }
  }
  StepResult result() override {
    const std::vector<float>& means = tree_->mean_scalars();
    return StepResult{means[0], std::vector<float>(means.begin() + 1, means.end())};
  }

 private:
  int64_t micro_;
  TreeReducer* tree_ = nullptr;  // the reducer
};

// Building the towers, in stages: check the devices, build the graph (one tower per device),
// make the replicas of the variables (rank 0's values on every rank), compile each tower, and
// make the reducer.
DataParallel::DataParallel(const Shape& example_shape, int64_t global_batch,
                           const TowerFn& tower_fn, DataParallelOptions options)
    : comm_(options.comm), global_batch_(global_batch) {
  if (comm_ == nullptr) {
    own_comm_ = make_single_communicator();
    comm_ = own_comm_.get();
  }
  if (options.micro_batch > 0)
    mode_ = std::make_unique<MicroBatches>(*this, options.micro_batch);
  else
    mode_ = std::make_unique<ClassicTowers>(*this);
  check_devices(options);
  build_graph(example_shape, tower_fn, options);
  make_replicas(options);
  compile_towers(options);
}

void DataParallel::check_devices(const DataParallelOptions& options) {
  check_tower_share(global_batch_, options.micro_batch,
                    static_cast<int64_t>(options.devices.size()));
  for (const Device& d : options.devices)
    if (d.kind != options.devices[0].kind)
      fail(
          "cannot mix CPU and GPU towers in one run ({} and {}): give only cpu:N or only cuda:N "
          "devices (--allow_soft_placement puts missing GPUs on CPUs)",
          options.devices[0].to_string(), d.to_string());
  staged_ = options.stage_through_host || options.devices[0].kind != DeviceKind::cpu;
#ifdef TOWER_HAVE_NCCL
  // Classic GPU towers with mirrored replicas reduce on the GPUs; central keeps the host average.
  nccl_ = options.devices[0].kind == DeviceKind::cuda && options.strategy == Strategy::allreduce &&
          options.micro_batch == 0;
#endif
}

// The model function once per device under "tower_<i>" (tower 0 creates the variables, the others
// reuse them), each with its slice of the batch and the gradients of its loss; or (the mode says)
// once, with every tower compiling tower 0's graph.
void DataParallel::build_graph(const Shape& example_shape, const TowerFn& tower_fn,
                               const DataParallelOptions& options) {
  const int n = static_cast<int>(options.devices.size());
  std::vector<int> threads = options.threads;
  if (threads.empty()) threads = split_cores(cpu_info().num_cores, n);
  TOWER_CHECK(static_cast<int>(threads.size()) == n);
  graph_.seed = options.seed;
  Scope root(graph_);
  // What is shared out: examples, or micro-batches of `unit` examples.
  const int64_t unit = mode_->unit(), units = global_batch_ / unit;
  int64_t offset = 0;
  towers_.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    Tower& t = towers_[static_cast<size_t>(i)];
    t.device = options.devices[static_cast<size_t>(i)];
    t.threads = threads[static_cast<size_t>(i)];
    t.batch = (units / n + (i < units % n ? 1 : 0)) * unit;
    t.offset = offset;
    t.first_micro = comm_->rank() * units + offset / unit;
    offset += t.batch;
    if (i > 0 && !mode_->own_graph()) {
      const Tower& first = towers_[0];
      t.images = first.images;
      t.labels = first.labels;
      t.outputs = first.outputs;
      t.grads = first.grads;
      continue;
    }
    Scope scope = root.name_scope(fmt::format("tower_{}", i))
                      .with_device(t.device)
                      .with_reuse(i == 0 ? Reuse::no : Reuse::yes);
    const int64_t rows = mode_->program_rows(t);
    std::vector<int64_t> dims = {rows};
    for (int64_t d : example_shape.dims()) dims.push_back(d);
    t.images = scope.placeholder("images", Shape(dims));
    t.labels = scope.placeholder("labels", Shape{rows}, DType::i32);
    t.outputs = tower_fn(scope, t.images, t.labels);
    if (i == 0) trainable_ = graph_.trainable_variables();
    std::vector<Value> xs;
    for (const VariableInfo& v : trainable_) xs.push_back(v.value);
    t.grads = gradients(scope.name_scope("gradients"), t.outputs.loss, xs);
    for (size_t v = 0; v < xs.size(); ++v)
      if (!t.grads[v].defined())
        fail("variable '{}' is trainable but the loss does not depend on it", trainable_[v].name);
  }
}

// Variables: one master copy (central) or one replica per tower (allreduce), all initialized
// identically; on the host when the towers have memory of their own. Every rank must build the
// same variables before rank 0's initial values are copied to all.
void DataParallel::make_replicas(const DataParallelOptions& options) {
  const int n = num_towers();
  const int num_replicas = options.strategy == Strategy::central ? 1 : n;
  for (int r = 0; r < num_replicas; ++r) {
    replicas_.push_back(std::make_unique<VariableStore>(
        staged_ ? Device{} : towers_[static_cast<size_t>(r)].device));
    replicas_.back()->initialize(graph_, options.seed);
  }
  for (const VariableInfo& v : graph_.variables())
    if (v.trainable == Trainable::no) non_trainable_.push_back(v.name);
  std::vector<std::pair<std::string, std::string>> keys;
  for (const VariableInfo& v : graph_.variables())
    keys.emplace_back(v.name, v.value.shape().to_string());
  mode_->add_layout(keys);
  keys.emplace_back("batch", std::to_string(global_batch_));
  check_same_on_all_ranks(*comm_, keys, "variables");
  for (auto& replica : replicas_) {
    std::vector<Tensor*> tensors;
    for (const std::string& name : replica->names()) tensors.push_back(&replica->get(name));
    broadcast_from_rank0(*comm_, tensors, "initial variables");
  }
}

// Each tower's programs (loss, metrics and gradients fetched), its worker thread and (GPU) its
// copy stream, then the reducer over the gradient buffers.
void DataParallel::compile_towers(const DataParallelOptions& options) {
  std::vector<std::vector<Tensor>> grad_buffers;
  std::vector<float> weights;
  const std::shared_ptr<ProgramGroup> group = mode_->group();
  for (int i = 0; i < num_towers(); ++i) {
    Tower& t = towers_[static_cast<size_t>(i)];
    std::vector<Value> fetches = {t.outputs.loss};
    fetches.insert(fetches.end(), t.outputs.metrics.begin(), t.outputs.metrics.end());
    fetches.insert(fetches.end(), t.grads.begin(), t.grads.end());
    t.replica = num_replicas() == 1 ? 0 : i;
    VariableStore* vars = replicas_[static_cast<size_t>(t.replica)].get();
    if (staged_) {
      t.device_vars = std::make_unique<VariableStore>(t.device);
      t.device_vars->copy_from(*vars);
      vars = t.device_vars.get();
    }
    ProgramOptions program_options = options.program;
    program_options.device = t.device;
    program_options.num_threads = t.threads;
    program_options.group = group;
    program_options.group_member = i;
    mode_->compile(t, i, fetches, *vars, program_options);
    t.worker = std::make_unique<ThreadPool>(1);
    if (t.device.kind != DeviceKind::cpu) {
      const DeviceOps& ops = device_ops(t.device.kind);
      t.copy_stream = ops.create_stream(t.device.index);
      t.pinned =
          ops.host_alloc(t.program->input(t.images).nbytes() + t.program->input(t.labels).nbytes());
    }
    if (staged_)
      for (int f = 0; f < t.program->num_fetches(); ++f)
        t.staged.emplace_back(t.program->output(f).shape(), t.program->output(f).dtype());
    std::vector<Tensor> views;
    const int first_grad = 1 + static_cast<int>(t.outputs.metrics.size());
    for (size_t v = 0; v < t.grads.size(); ++v) {
      const int fetch = first_grad + static_cast<int>(v);
      views.push_back(nccl_ ? t.program->output(fetch).view() : fetched(t, fetch).view());
    }
    grad_buffers.push_back(std::move(views));
    weights.push_back(weight(t));
  }
  reducer_ = mode_->make_reducer(std::move(grad_buffers), std::move(weights), options);
}

DataParallel::~DataParallel() {
  for (Tower& t : towers_) {
    if (t.copy_stream == nullptr) continue;
    const DeviceOps& ops = device_ops(t.device.kind);
    ops.synchronize(t.copy_stream);
    ops.destroy_stream(t.copy_stream);
    ops.host_free(t.pinned);
  }
}

int DataParallel::num_threads() const {
  int threads = 0;
  for (const Tower& t : towers_) threads += t.threads;
  return threads;
}

int64_t DataParallel::tower_batch(int tower) const {
  return towers_.at(static_cast<size_t>(tower)).batch;
}

float DataParallel::weight(const Tower& t) const {
  return static_cast<float>(t.batch) / static_cast<float>(global_batch_ * comm_->size());
}

StepResult DataParallel::step(const Tensor& images, const Tensor& labels, uint64_t step) {
  if (images.shape().rank() < 1 || images.shape()[0] != global_batch_ ||
      labels.shape() != Shape{global_batch_})
    fail("batch of shape {} with labels {} does not match the global batch size {}",
         images.shape().to_string(), labels.shape().to_string(), global_batch_);
  // An update of one replica alone (an Optimizer on replica_params(dp, 0) under allreduce) would
  // train every other tower on stale weights without a word: the first updates are checked.
  if (++steps_run_ <= 3 && !replicas_identical())
    fail(
        "the replicas of the variables differ before step {}: each replica (Strategy::allreduce) "
        "holds its own copy, and only some were updated. Update them all with "
        "DataParallelOptimizer (train/optimizer.h) or use tower::train()",
        step);
  mode_->feed(images, labels);
  reducer_->begin_step();
  std::vector<std::future<void>> running;
  for (size_t i = 0; i < towers_.size(); ++i) {
    Tower& t = towers_[i];
    running.push_back(t.worker->submit([this, &t, i, step, &images, &labels] {
      try {
        if (trace::active())
          trace::name_thread(fmt::format("tower {} ({})", i, t.device.to_string()));
        mode_->run(t, static_cast<int>(i), step, images, labels);
      } catch (...) {
        reducer_->abort();  // the others must not wait for this tower's gradients
        throw;
      }
    }));
  }
  std::exception_ptr error = wait_all(running);
  try {
    reducer_->finish();
  } catch (...) {
    if (!error) throw;  // a tower's own error says more
  }
  if (error) std::rethrow_exception(error);
  // The graph's own updates (moving averages) ran on tower 0: bring them to the host (after all
  // towers are done, since they read the host replicas when they start).
  if (staged_)
    for (const std::string& name : non_trainable_)
      replicas_[0]->get(name).copy_from(towers_[0].device_vars->get(name));
  return mode_->result();
}

void DataParallel::prefetch(const Tensor& images, const Tensor& labels) {
  TOWER_CHECK(images.shape().rank() >= 1 && images.shape()[0] == global_batch_ &&
              labels.shape() == Shape{global_batch_});
  mode_->prefetch(images, labels);
}

// Rows [offset, offset + rows) of the batch into the program's input buffers: directly on CPU
// towers; through the tower's page-locked buffer and copy stream on GPU towers (the caller waits
// for the stream).
void DataParallel::copy_inputs(Tower& t, Program& program, const Tensor& images,
                               const Tensor& labels, int64_t offset, int64_t rows) {
  Tensor& in_images = program.input(t.images);
  Tensor& in_labels = program.input(t.labels);
  const Tensor x = images.slice(offset, offset + rows), y = labels.slice(offset, offset + rows);
  if (t.copy_stream == nullptr) {
    in_images.copy_from(x);
    in_labels.copy_from(y);
    return;
  }
  const DeviceOps& ops = device_ops(t.device.kind);
  ops.synchronize(t.copy_stream);  // the pinned buffer is free again
  auto* pinned = static_cast<char*>(t.pinned);
  std::memcpy(pinned, x.raw_data(), x.nbytes());
  std::memcpy(pinned + x.nbytes(), y.raw_data(), y.nbytes());
  ops.copy_async(in_images.raw_data(), pinned, x.nbytes(), t.copy_stream);
  ops.copy_async(in_labels.raw_data(), pinned + x.nbytes(), y.nbytes(), t.copy_stream);
}

const Tensor& DataParallel::fetched(const Tower& t, int fetch) const {
  return staged_ ? t.staged[static_cast<size_t>(fetch)] : t.program->output(fetch);
}

bool DataParallel::replicas_identical() const {
  for (size_t r = 1; r < replicas_.size(); ++r)
    for (const VariableInfo& v : trainable_) {
      const Tensor& a = replicas_[0]->get(v.name);
      const Tensor& b = replicas_[r]->get(v.name);
      if (std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) != 0) return false;
    }
  return true;
}

}  // namespace tower
