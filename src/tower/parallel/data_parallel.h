// Synchronous data parallelism over towers: the model is built once per device under the name
// scope "tower_<i>", all towers sharing one set of variables (created by tower 0, reused by the
// others). Each step every tower runs forward + backward on its slice of the global batch on its
// own thread, the GradientReducer averages the gradients (weighted by examples), and the trainer
// updates every replica (DataParallelOptimizer).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "tower/core/thread_pool.h"
#include "tower/graph/graph.h"
#include "tower/parallel/devices.h"
#include "tower/parallel/gradient_reducer.h"
#include "tower/parallel/tree_reducer.h"
#include "tower/runtime/program.h"
#include "tower/runtime/variable_store.h"

namespace tower {

// What the model function returns for one tower.
struct TowerOutputs {
  Value loss;                  // scalar: this tower's total loss (mean over its examples + decay)
  std::vector<Value> metrics;  // scalars averaged over towers like the loss (e.g. accuracy)
  std::vector<Value> updates;  // side-effect nodes (moving averages); run on tower 0 only
};
using TowerFn = std::function<TowerOutputs(const Scope& scope, Value images, Value labels)>;

struct DataParallelOptions {
  std::vector<Device> devices{Device{}};
  std::vector<int> threads;  // per device; empty: split the machine's cores
  Strategy strategy = Strategy::allreduce;
  size_t bucket_bytes = 25u << 20;
  uint64_t seed = 0;  // variable initialization
  // Other processes training the same model (each with its own towers and an equal share of the
  // batch); null: this process alone. Initial variables then come from rank 0.
  Communicator* comm = nullptr;
  // Towers with memory of their own: each keeps a device copy of the variables, refreshed from
  // the host replicas before every step, and hands its gradients over through host buffers.
  // Always so for GPU towers; for CPU towers tests turn it on to check that path.
  bool stage_through_host = false;
  // How every tower's program is compiled and run (deterministic kernels, precision, contended
  // mode, fusion, layouts); its device, threads and group are set per tower. Two or more
  // one-thread CPU towers without micro-batches share contended mode as a ProgramGroup: in
  // contended mode each tower's thread also takes the others' tasks.
  ProgramOptions program;
  // > 0: the batch is cut into micro-batches of this many examples, each with its own forward and
  // backward pass, and their gradients are summed by one fixed tree over micro-batch indices
  // (tree_reducer.h), whatever tower or rank computes them: the same bits for any number of
  // towers, ranks and threads per tower. The strategy then only decides the
  // replicas. 0: each tower runs its whole share at once (the classic towers).
  int64_t micro_batch = 0;
};

struct StepResult {
  float loss = 0;
  std::vector<float> metrics;
};

class DataParallel {
 public:
  // example_shape: one input example, e.g. (C, H, W). global_batch (this process's share with
  // several ranks) is split as evenly as possible over the towers (the first ones get one more
  // example, or micro-batch, when it does not divide).
  DataParallel(const Shape& example_shape, int64_t global_batch, const TowerFn& tower_fn,
               DataParallelOptions options);
  ~DataParallel();

  int num_towers() const { return static_cast<int>(towers_.size()); }
  // The threads of this process's towers together: the cores they take.
  int num_threads() const;
  int64_t tower_batch(int tower) const;
  // images: (B, ...) f32, labels: (B,) i32 with B the global batch. The loss and metrics are
  // averaged over all ranks.
  StepResult step(const Tensor& images, const Tensor& labels, uint64_t step);
  // Starts copying the next step's batch into GPU towers' input buffers (from page-locked memory,
  // on a copy stream, while the caller updates the variables); step() with the same tensors then
  // only waits for the copies. A no-op for CPU towers.
  void prefetch(const Tensor& images, const Tensor& labels);

  Graph& graph() { return graph_; }
  const std::vector<VariableInfo>& trainable() const { return trainable_; }
  int num_replicas() const { return static_cast<int>(replicas_.size()); }
  Communicator& comm() { return *comm_; }
  VariableStore& replica(int r) { return *replicas_[static_cast<size_t>(r)]; }
  const VariableStore& replica(int r) const { return *replicas_[static_cast<size_t>(r)]; }
  // The averaged gradient of trainable()[v] as seen by replica r, valid after step().
  Tensor& gradient(int r, int v) { return reducer_->result(r, v); }
  const Tensor& gradient(int r, int v) const { return reducer_->result(r, v); }
  const GradientReducer& reducer() const { return *reducer_; }
  const Program& program(int tower) const { return *towers_[static_cast<size_t>(tower)].program; }
  Program& program(int tower) { return *towers_[static_cast<size_t>(tower)].program; }
  // Bitwise check that every replica holds the same trainable values (debug builds run it
  // after each update through the trainer).
  bool replicas_identical() const;

 private:
  struct Tower {
    Device device;
    int threads = 1;
    int64_t offset = 0, batch = 0;  // its rows of the batch
    int64_t first_micro = 0;        // micro-batches: its first one (of all ranks)
    Value images, labels;
    TowerOutputs outputs;
    std::vector<Value> grads;
    std::unique_ptr<Program> program;
    std::unique_ptr<Program> plain;  // micro-batches: tower 0 without the updates (after the first)
    std::unique_ptr<ThreadPool> worker;
    int replica = 0;                             // the host replica it reads
    std::unique_ptr<VariableStore> device_vars;  // staged: its own copy of the variables
    std::vector<Tensor> staged;                  // staged: host copies of the fetches
    void* copy_stream = nullptr;                 // GPU: input copies
    void* pinned = nullptr;                      // GPU: page-locked images then labels
  };
  class Mode;  // how a step runs the towers: the classic towers or micro-batches
  class ClassicTowers;
  class MicroBatches;
  void check_devices(const DataParallelOptions& options);
  void build_graph(const Shape& example_shape, const TowerFn& tower_fn,
                   const DataParallelOptions& options);
  void make_replicas(const DataParallelOptions& options);
  void compile_towers(const DataParallelOptions& options);
  void copy_inputs(Tower& t, Program& program, const Tensor& images, const Tensor& labels,
                   int64_t offset, int64_t rows);
  const Tensor& fetched(const Tower& t, int fetch) const;
  float weight(const Tower& t) const;  // its share of the batch of all ranks
  Graph graph_;
  std::vector<VariableInfo> trainable_;
  std::vector<std::unique_ptr<VariableStore>> replicas_;
  std::vector<Tower> towers_;
  std::unique_ptr<Mode> mode_;
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<Communicator> own_comm_;  // when the options gave none
  Communicator* comm_;
  int64_t global_batch_;
  bool staged_ = false;
  bool nccl_ = false;                       // GPU towers reducing with NCCL (builds with NCCL)
  int64_t steps_run_ = 0;                   // calls of step()
  std::vector<std::string> non_trainable_;  // variables the graph updates (moving averages)
};

}  // namespace tower
