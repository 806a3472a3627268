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

// Building the towers, in stages: check the devices, build the graph (one tower per device),
// make the replicas of the variables (rank 0's values on every rank), compile each tower, and
// make the reducer.
DataParallel::DataParallel(const Shape& example_shape, int64_t global_batch,
                           const TowerFn& tower_fn, DataParallelOptions options)
    : comm_(options.comm), global_batch_(global_batch), micro_batch_(options.micro_batch) {
  if (comm_ == nullptr) {
    own_comm_ = make_single_communicator();
    comm_ = own_comm_.get();
  }
  check_devices(options);
  build_graph(example_shape, tower_fn, options);
  make_replicas(options);
  compile_towers(options);
}

void DataParallel::check_devices(const DataParallelOptions& options) {
  const int n = static_cast<int>(options.devices.size());
  if (n == 0) fail("no devices given: pass --devices cpu:0,... or --num_devices N");
  if (micro_batch_ > 0) {
    if (global_batch_ % micro_batch_ != 0)
      fail("this rank's batch of {} examples is not a whole number of micro-batches of {}",
           global_batch_, micro_batch_);
    if (global_batch_ / micro_batch_ < n)
      fail(
          "this rank has {} micro-batches of {} per step but {} towers: every tower needs at "
          "least one micro-batch",
          global_batch_ / micro_batch_, micro_batch_, n);
  } else if (global_batch_ < n) {
    fail(
        "the global batch ({}) is smaller than the number of towers ({}): every tower needs at "
        "least one example",
        global_batch_, n);
  }
  for (const Device& d : options.devices)
    if (d.kind != options.devices[0].kind)
      fail(
          "cannot mix CPU and GPU towers in one run ({} and {}): give only cpu:N or only cuda:N "
          "devices (--allow_soft_placement puts missing GPUs on CPUs)",
          options.devices[0].to_string(), d.to_string());
  staged_ = options.stage_through_host || options.devices[0].kind != DeviceKind::cpu;
#ifdef TOWER_HAVE_NCCL
  // GPU towers with mirrored replicas reduce on the GPUs; central keeps the classic host average.
  nccl_ = options.devices[0].kind == DeviceKind::cuda && options.strategy == Strategy::allreduce &&
          micro_batch_ == 0;
#endif
}

// The model function once per device under "tower_<i>" (tower 0 creates the variables, the others
// reuse them), each with its slice of the batch and the gradients of its loss. With micro-batches
// it is built once, for one micro-batch, and every tower compiles that same graph: its nodes (and
// so the keys of their random numbers) do not depend on the tower.
void DataParallel::build_graph(const Shape& example_shape, const TowerFn& tower_fn,
                               const DataParallelOptions& options) {
  const int n = static_cast<int>(options.devices.size());
  std::vector<int> threads = options.threads;
  if (threads.empty()) threads = split_cores(cpu_info().num_cores, n);
  TOWER_CHECK(static_cast<int>(threads.size()) == n);
  graph_.seed = options.seed;
  Scope root(graph_);
  // What is shared out: examples, or micro-batches of `unit` examples.
  const int64_t unit = micro_batch_ > 0 ? micro_batch_ : 1, units = global_batch_ / unit;
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
    if (micro_batch_ > 0 && i > 0) {
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
    const int64_t rows = micro_batch_ > 0 ? micro_batch_ : t.batch;
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
  std::vector<std::pair<std::string, std::string>> shapes;
  for (const VariableInfo& v : graph_.variables())
    shapes.emplace_back(v.name, v.value.shape().to_string());
  if (micro_batch_ == 0) shapes.emplace_back("towers", std::to_string(n));  // else: any count
  shapes.emplace_back("batch", std::to_string(global_batch_));
  check_same_on_all_ranks(*comm_, shapes, "variables");
  for (auto& replica : replicas_) {
    std::vector<Tensor*> tensors;
    for (const std::string& name : replica->names()) tensors.push_back(&replica->get(name));
    broadcast_from_rank0(*comm_, tensors, "initial variables");
  }
}

// Each tower's Program (loss, metrics and gradients fetched; tower 0 also runs the updates), then
// the reducer over the gradient buffers. With micro-batches the updates see only micro-batch 0
// (rank 0's tower 0): tower 0 runs the others with a second program without them.
void DataParallel::compile_towers(const DataParallelOptions& options) {
  const int n = num_towers();
  std::vector<std::vector<Tensor>> grad_buffers;
  std::vector<float> weights;
  // One-thread CPU towers that run once a step share contended mode (ProgramGroup).
  std::shared_ptr<ProgramGroup> group;
  if (n >= 2 && micro_batch_ == 0 &&
      std::all_of(towers_.begin(), towers_.end(), [](const Tower& t) {
        return t.device.kind == DeviceKind::cpu && t.threads == 1;
      }))
    group = std::make_shared<ProgramGroup>(n);
  for (int i = 0; i < n; ++i) {
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
    std::vector<Value> updates;
    if (i == 0 && (micro_batch_ == 0 || t.first_micro == 0)) updates = t.outputs.updates;
    t.program = std::make_unique<Program>(graph_, fetches, *vars, program_options, updates);
    if (micro_batch_ > 0 && !updates.empty() && t.batch > micro_batch_)
      t.plain = std::make_unique<Program>(graph_, fetches, *vars, program_options);
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
    weights.push_back(static_cast<float>(t.batch) /
                      static_cast<float>(global_batch_ * comm_->size()));
  }
  if (micro_batch_ > 0) {
    std::vector<Shape> shapes;
    for (const VariableInfo& v : trainable_) shapes.push_back(v.value.shape());
    MicroBatchLayout layout;
    layout.micro_batches = global_batch_ / micro_batch_ * comm_->size();
    layout.rank_first = towers_[0].first_micro;
    for (const Tower& t : towers_) layout.tower_count.push_back(t.batch / micro_batch_);
    const int scalars = 1 + static_cast<int>(towers_[0].outputs.metrics.size());
    auto tree =
        std::make_unique<TreeReducer>(shapes, num_replicas(), std::move(layout), scalars, comm_);
    tree_ = tree.get();
    reducer_ = std::move(tree);
    return;
  }
#ifdef TOWER_HAVE_NCCL
  if (nccl_) {
    std::vector<void*> streams;
    for (const Tower& t : towers_) streams.push_back(t.program->stream());
    reducer_ = make_nccl_reducer(std::move(grad_buffers), std::move(weights), std::move(streams),
                                 options.bucket_bytes, comm_);
    return;
  }
#endif
  if (options.strategy == Strategy::central)
    reducer_ = make_central_reducer(std::move(grad_buffers), std::move(weights), comm_);
  else
    reducer_ = make_allreduce_reducer(std::move(grad_buffers), std::move(weights),
                                      options.bucket_bytes, comm_);
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

int64_t DataParallel::tower_batch(int tower) const {
  return towers_.at(static_cast<size_t>(tower)).batch;
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
  const bool prefetched = prefetched_ != nullptr && prefetched_ == images.raw_data();
  prefetched_ = nullptr;
  if (micro_batch_ == 0)
    for (Tower& t : towers_) {
      if (!prefetched) copy_inputs(t, *t.program, images, labels, t.offset, t.batch);
      if (t.copy_stream != nullptr) device_ops(t.device.kind).synchronize(t.copy_stream);
    }
  reducer_->begin_step();
  std::vector<std::future<void>> running;
  for (size_t i = 0; i < towers_.size(); ++i) {
    Tower& t = towers_[i];
    running.push_back(t.worker->submit([this, &t, i, step, &images, &labels] {
      try {
        if (micro_batch_ > 0)
          run_micro_batches(t, static_cast<int>(i), step, images, labels);
        else
          run_tower(t, static_cast<int>(i), step);
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

  if (tree_ != nullptr) {
    const std::vector<float>& means = tree_->mean_scalars();
    return StepResult{means[0], std::vector<float>(means.begin() + 1, means.end())};
  }
  // [loss, metrics...] weighted by each tower's share of the batch of all ranks.
  std::vector<float> sums(1 + towers_[0].outputs.metrics.size(), 0.0f);
  for (const Tower& t : towers_) {
    float w = static_cast<float>(t.batch) / static_cast<float>(global_batch_ * comm_->size());
    for (size_t m = 0; m < sums.size(); ++m)
      sums[m] += w * fetched(t, static_cast<int>(m)).data<float>()[0];
  }
  comm_->allreduce_sum(sums.data(), static_cast<int64_t>(sums.size()));
  return StepResult{sums[0], std::vector<float>(sums.begin() + 1, sums.end())};
}

void DataParallel::prefetch(const Tensor& images, const Tensor& labels) {
  if (towers_[0].copy_stream == nullptr || micro_batch_ > 0) return;
  TOWER_CHECK(images.shape().rank() >= 1 && images.shape()[0] == global_batch_ &&
              labels.shape() == Shape{global_batch_});
  for (Tower& t : towers_) copy_inputs(t, *t.program, images, labels, t.offset, t.batch);
  prefetched_ = images.raw_data();
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

// On the tower's worker thread: (staged) refresh its variables from the host replica, run forward
// and backward, and hand each gradient to the reducer as it is ready. NCCL takes the gradients
// from the device, ordered after their kernels on the GPU; host copies wait for the kernels.
void DataParallel::run_tower(Tower& t, int index, uint64_t step) {
  if (trace::active())
    trace::name_thread(fmt::format("tower {} ({})", index, t.device.to_string()));
  if (staged_) t.device_vars->copy_from(*replicas_[static_cast<size_t>(t.replica)]);
  const int first_grad = 1 + static_cast<int>(t.outputs.metrics.size());
  t.program->run(step, [&](int fetch) {
    if (staged_ && !(nccl_ && fetch >= first_grad)) {
      t.program->synchronize();
      t.staged[static_cast<size_t>(fetch)].copy_from(t.program->output(fetch));
    }
    if (fetch >= first_grad) reducer_->ready(index, fetch - first_grad);
  });
}

// On the tower's worker thread: each of its micro-batches in turn, forward and backward, its
// gradients handed to the tree as it finishes. Random numbers (dropout) are keyed by the step and
// the micro-batch, not the tower.
void DataParallel::run_micro_batches(Tower& t, int index, uint64_t step, const Tensor& images,
                                     const Tensor& labels) {
  if (trace::active())
    trace::name_thread(fmt::format("tower {} ({})", index, t.device.to_string()));
  if (staged_) t.device_vars->copy_from(*replicas_[static_cast<size_t>(t.replica)]);
  const int first_grad = 1 + static_cast<int>(t.outputs.metrics.size());
  const int64_t rank_first = towers_[0].first_micro;
  std::vector<const Tensor*> grads(t.grads.size());
  std::vector<float> scalars(static_cast<size_t>(first_grad));
  for (int64_t micro = t.first_micro; micro < t.first_micro + t.batch / micro_batch_; ++micro) {
    Program& program = t.plain != nullptr && micro != 0 ? *t.plain : *t.program;
    copy_inputs(t, program, images, labels, (micro - rank_first) * micro_batch_, micro_batch_);
    if (t.copy_stream != nullptr) device_ops(t.device.kind).synchronize(t.copy_stream);
    program.run(philox_stream(step, static_cast<uint64_t>(micro)));
    for (int f = 0; f < program.num_fetches(); ++f) {
      const Tensor* value = &program.output(f);
      if (staged_) {
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

std::vector<Device> rank_devices(const std::vector<Device>& requested, int local_rank) {
  int gpus = 0;
  for (const Device& d : requested) gpus += d.kind == DeviceKind::cuda ? 1 : 0;
  std::vector<Device> result = requested;
  for (Device& d : result)
    if (d.kind == DeviceKind::cuda) d.index += local_rank * gpus;
  return result;
}

DevicePlan select_devices(const DeviceRequest& request, const Communicator& comm) {
  DevicePlan plan;
  plan.cores = request.threads > 0 ? request.threads : cores_per_rank(comm);
  if (!request.devices.empty()) {
    const int cpus = cpu_info().num_cores;
    for (const Device& d : request.devices)
      if (d.kind == DeviceKind::cpu && d.index >= cpus)
        fail(
            "--devices: {} does not exist; this machine has {} logical CPU device{} (cpu:0 to "
            "cpu:{}), one per core",
            d.to_string(), cpus, cpus == 1 ? "" : "s", cpus - 1);
    plan.devices =
        resolve_devices(request.devices, request.allow_soft_placement, comm.local_rank());
  } else {
    if (request.num_devices < 0 || request.num_devices > kMaxTowersPerRank)
      fail("--num_devices must be between 1 and {}, got {}", kMaxTowersPerRank,
           request.num_devices);
    const int n = request.num_devices > 0 ? request.num_devices : plan.cores;
    for (int i = 0; i < n; ++i) plan.devices.push_back(Device{DeviceKind::cpu, i});
  }
  plan.threads = split_cores(plan.cores, static_cast<int>(plan.devices.size()));
  // The hardware checks, here rather than when the programs are built: before anything is loaded.
  for (const Device& d : plan.devices) check_precision_supported(request.precision, d);
  return plan;
}

std::vector<Device> resolve_devices(const std::vector<Device>& asked, bool allow_soft_placement,
                                    int local_rank) {
  const std::vector<Device> requested = rank_devices(asked, local_rank);
  const int gpus = has_device_ops(DeviceKind::cuda) ? static_cast<int>(cuda_devices().size()) : 0;
  std::vector<std::string> missing;
  for (const Device& d : requested)
    if (d.kind == DeviceKind::cuda && d.index >= gpus) missing.push_back(d.to_string());
  if (missing.empty()) return requested;
  if (!allow_soft_placement)
    fail(
        "device {} was requested{}, but {}; pass --allow_soft_placement to run the towers on the "
        "CPU instead",
        missing[0],
        local_rank > 0
            ? fmt::format(" (rank {} of this machine: ranks count their GPUs from local rank x "
                          "GPUs per rank)",
                          local_rank)
            : std::string(),
        has_device_ops(DeviceKind::cuda) ? fmt::format("this machine has {} CUDA device(s)", gpus)
                                         : std::string("this build of tower has no CUDA backend"));
  // CPU and GPU towers do not mix: once one GPU is missing, every tower goes to a CPU device.
  std::vector<Device> result;
  for (size_t i = 0; i < requested.size(); ++i) {
    const Device cpu{DeviceKind::cpu, static_cast<int>(i)};
    if (requested[i].kind == DeviceKind::cuda)
      std::fprintf(stderr, "%swarning: %s is not available, placing its tower on %s\n",
                   log_prefix().c_str(), requested[i].to_string().c_str(), cpu.to_string().c_str());
    result.push_back(requested[i].kind == DeviceKind::cuda ? cpu : requested[i]);
  }
  return result;
}

}  // namespace tower
