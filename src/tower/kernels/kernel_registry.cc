#include <omp.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>

#include "tower/core/denormals.h"
#include "tower/kernels/kernel.h"

namespace tower {
namespace {
std::map<std::pair<std::string, DeviceKind>, KernelFactory>& registry() {
  static std::map<std::pair<std::string, DeviceKind>, KernelFactory> kernels;
  return kernels;
}

class SimpleKernel : public Kernel {
 public:
  SimpleKernel(const Node& node, SimpleKernelFn fn) : node_(node), fn_(std::move(fn)) {}
  void run(const KernelIO& io) override { fn_(node_, io); }

 private:
  const Node& node_;
  SimpleKernelFn fn_;
};

std::map<DeviceKind, ReorderFactory>& reorders() {
  static std::map<DeviceKind, ReorderFactory> factories;
  return factories;
}
}  // namespace

size_t Layout::bytes(const TensorSpec& spec) const {
  return format_ ? format_->bytes()
                 : static_cast<size_t>(spec.shape.numel()) * dtype_size(spec.dtype);
}

bool Layout::operator==(const Layout& other) const {
  if (!format_ || !other.format_) return !format_ && !other.format_;
  return format_ == other.format_ || format_->equals(*other.format_);
}

ReorderRegistrar::ReorderRegistrar(DeviceKind kind, ReorderFactory factory) {
  TOWER_CHECK_MSG(!reorders().count(kind), "reorder kernel registered twice");
  reorders()[kind] = std::move(factory);
}

const ReorderFactory* find_reorder(DeviceKind kind) {
  auto it = reorders().find(kind);
  return it == reorders().end() ? nullptr : &it->second;
}

KernelRegistrar::KernelRegistrar(const std::string& op, DeviceKind kind, KernelFactory factory) {
  TOWER_CHECK_MSG(!registry().count({op, kind}), "kernel for {} registered twice", op);
  registry()[{op, kind}] = std::move(factory);
}

const KernelFactory* find_kernel(const std::string& op, DeviceKind kind) {
  auto it = registry().find({op, kind});
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<std::string> registered_kernels(DeviceKind kind) {
  std::vector<std::string> names;
  for (auto& [key, factory] : registry())
    if (key.second == kind) names.push_back(key.first);
  return names;
}

KernelFactory simple_kernel(SimpleKernelFn fn) {
  return [fn = std::move(fn)](const Node& node, const KernelContext&) {
    return std::make_unique<SimpleKernel>(node, fn);
  };
}

void zero_denormals_on_team(int threads) {
  thread_local int done = 1;  // the largest team of this thread's that has the mode
  if (threads <= done) return;
#pragma omp parallel num_threads(threads)
  if (omp_get_thread_num() != 0) set_denormals_are_zero(true);
  done = threads;
}

void set_kernel_threads(int num_threads) { omp_set_num_threads(num_threads < 1 ? 1 : num_threads); }
int kernel_threads() { return omp_get_max_threads(); }

std::vector<int> kernel_team_tids(int threads) {
  std::vector<int> tids(static_cast<size_t>(std::max(threads, 1)), 0);
#pragma omp parallel num_threads(static_cast <int>(tids.size()))
  tids[static_cast<size_t>(omp_get_thread_num())] = static_cast<int>(gettid());
  return tids;
}

#if !defined(__SANITIZE_THREAD__)
void run_on_team(int threads, const std::function<void(int member)>& fn) {
#pragma omp parallel num_threads(std::max(threads, 1))
  fn(omp_get_thread_num());
}
#else
// libgomp is not built with ThreadSanitizer, which therefore sees neither that a parallel region's
// start orders its members after the caller's earlier writes (the function reaches them through
// the caller's stack) nor that its end orders the caller after them. Under ThreadSanitizer the
// function goes through an atomic instead (one team at a time) and the end is declared.
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
namespace {
std::mutex team_mutex;
std::atomic<const std::function<void(int)>*> team_fn{nullptr};
}  // namespace

void run_on_team(int threads, const std::function<void(int member)>& fn) {
  std::lock_guard<std::mutex> lock(team_mutex);
  team_fn.store(&fn, std::memory_order_release);
#pragma omp parallel num_threads(std::max(threads, 1))
  {
    (*team_fn.load(std::memory_order_acquire))(omp_get_thread_num());
    __tsan_release(&team_fn);
  }
  __tsan_acquire(&team_fn);
}
#endif

}  // namespace tower
