// The runtime's layout conversions on CPU: a oneDNN reorder between two descriptors of a value.
#include <optional>

#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

class ReorderKernel : public Kernel {
 public:
  // `value` names the converted value in errors; its node outlives the kernel (the graph does).
  ReorderKernel(const Value& value, const Layout& from, const Layout& to)
      : node_(*value.node), from_(from), to_(to) {
    from_md_ = md_of(value.shape(), from);
    to_md_ = md_of(value.shape(), to);
    if (value.shape().numel() == 0) return;  // nothing to convert (oneDNN skips empty tensors)
    prim_ = build(node_, [&] {
      return dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from_md_, engine(), to_md_));
    });
  }
  void bind(const KernelIO& io) override {
    args_ = {{DNNL_ARG_FROM, make_memory(from_md_, io.inputs[0])},
             {DNNL_ARG_TO, make_memory(to_md_, io.outputs[0])}};
  }
  void run(const KernelIO&) override {
    if (prim_) execute(node_, *prim_, args_);
  }
  Layout input_layout(int) const override { return from_; }
  Layout output_layout(int) const override { return to_; }

 private:
  const Node& node_;
  Layout from_, to_;
  dnnl::memory::desc from_md_, to_md_;
  std::optional<dnnl::reorder> prim_;
  std::unordered_map<int, dnnl::memory> args_;
};

ReorderRegistrar reorder{DeviceKind::cpu,
                         [](const Value& value, const Layout& from, const Layout& to) {
                           return std::make_unique<ReorderKernel>(value, from, to);
                         }};

}  // namespace
}  // namespace tower::cpu
