// Runs one node's kernel directly, on any device, as the runtime would (test helper, header
// only): the op table compares every backend's kernel against the CPU one with it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tower/core/device.h"
#include "tower/core/philox.h"
#include "tower/kernels/kernel.h"

namespace tower::testing {

// Buffers that outlive the views wrapping them.
struct Buffers {
  std::vector<Tensor> storage;
  // A zero-filled buffer for `spec` in `layout` (a blocked layout may need more bytes than plain),
  // viewed with the spec's shape.
  Tensor make(const TensorSpec& spec, const Layout& layout, Device device) {
    const auto bytes = static_cast<int64_t>(std::max<size_t>(layout.bytes(spec), 1));
    storage.emplace_back(Shape{bytes}, DType::u8, device);
    return Tensor::wrap(storage.back().raw_data(), spec.shape, spec.dtype, device);
  }
};

// Binds and runs `kernel` once on `io`, with its scratch.
inline void run_kernel_once(Kernel& kernel, KernelIO& io, Device device) {
  Tensor scratch(Shape{static_cast<int64_t>(kernel.scratch_bytes())}, DType::u8, device);
  io.scratch = scratch.raw_data();
  kernel.bind(io);
  kernel.run(io);
}

// `t` converted from layout `from` to `to` with the device's reorder kernel (or `t` itself).
inline Tensor reorder(const Value& value, Tensor t, const Layout& from, const Layout& to,
                      Device device, Buffers& buffers) {
  if (from == to) return t;
  const ReorderFactory* factory = find_reorder(device.kind);
  if (factory == nullptr) fail("no layout conversion on {}", device.to_string());
  std::unique_ptr<Kernel> kernel = (*factory)(value, from, to);
  KernelIO io;
  io.inputs.push_back(std::move(t));
  io.outputs.push_back(buffers.make(value.spec(), to, device));
  run_kernel_once(*kernel, io, device);
  return std::move(io.outputs[0]);
}

// Runs `node`'s kernel for `device` on copies of the host inputs; returns the outputs on the host,
// plain. Inputs and outputs are converted where the kernel reads or writes another layout (the
// CPU convolutions' blocked ones), as the runtime does. The default stream orders the kernels and
// the copies.
inline std::vector<Tensor> run_kernel(const Node& node, Device device,
                                      const std::vector<Tensor>& inputs,
                                      bool deterministic = true) {
  const KernelFactory* factory = find_kernel(node.op, device.kind);
  if (factory == nullptr) fail("no {} kernel for {}", device.to_string(), node.op);
  std::unique_ptr<Kernel> kernel =
      (*factory)(node, KernelContext{device, 1, nullptr, {}, deterministic});
  Buffers buffers;
  KernelIO io;
  io.step = 7;  // any step: keys the dropout mask
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor plain = buffers.make(node.inputs[i].spec(), Layout{}, device);
    plain.copy_from(inputs[i]);
    io.inputs.push_back(reorder(node.inputs[i], std::move(plain), Layout{},
                                kernel->input_layout(static_cast<int>(i)), device, buffers));
  }
  for (size_t o = 0; o < node.outputs.size(); ++o)
    io.outputs.push_back(
        buffers.make(node.outputs[o], kernel->output_layout(static_cast<int>(o)), device));
  run_kernel_once(*kernel, io, device);
  std::vector<Tensor> out;
  for (size_t o = 0; o < io.outputs.size(); ++o) {
    const Value value{const_cast<Node*>(&node), static_cast<int>(o)};
    Tensor plain = reorder(value, io.outputs[o].view(), kernel->output_layout(static_cast<int>(o)),
                           Layout{}, device, buffers);
    out.emplace_back(plain.shape(), plain.dtype());
    out.back().copy_from(plain);
  }
  return out;
}

// The CPU multiplies bf16 (--precision bf16 runs).
inline bool cpu_has_bf16() {
  const CpuInfo cpu = cpu_info();
  return cpu.avx512_bf16 || cpu.amx;
}

// Labels in [0, classes), fixed by the seed.
inline Tensor random_labels(const Shape& shape, uint64_t seed, int32_t classes) {
  Tensor t(shape, DType::i32);
  Philox rng(seed, 23);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<int32_t>()[i] =
        static_cast<int32_t>(rng.below(static_cast<uint64_t>(i), static_cast<uint32_t>(classes)));
  return t;
}

inline bool have_gpu(std::string& why) {
#ifndef TOWER_HAVE_CUDA
  why = "this build has no CUDA backend (configure with -DTOWER_CUDA=ON where the CUDA toolkit is)";
  return false;
#else
  if (cuda_devices().empty()) {
    why = "no CUDA device on this machine: the GPU kernels are compiled but not run here";
    return false;
  }
  return true;
#endif
}

// The GPU outputs against the CPU ones: class indices exactly, floats within `tolerance` relative
// to max(1, |cpu value|).
inline void expect_kernels_close(const std::vector<Tensor>& cpu, const std::vector<Tensor>& cuda,
                                 double tolerance, const std::string& op) {
  for (size_t o = 0; o < cpu.size(); ++o) {
    if (cpu[o].dtype() == DType::i32) {
      const int32_t* a = cpu[o].data<int32_t>();
      const int32_t* g = cuda[o].data<int32_t>();
      int64_t differ = 0;
      for (int64_t i = 0; i < cpu[o].numel(); ++i) differ += a[i] != g[i];
      EXPECT_EQ(differ, 0) << op << " output " << o;
      continue;
    }
    const float* a = cpu[o].data<float>();
    const float* g = cuda[o].data<float>();
    double worst = 0;
    for (int64_t i = 0; i < cpu[o].numel(); ++i)
      worst =
          std::max(worst, std::fabs(double(a[i]) - g[i]) / std::max(1.0, std::fabs(double(a[i]))));
    EXPECT_LE(worst, tolerance) << op << " output " << o;
  }
}

}  // namespace tower::testing
