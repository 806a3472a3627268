// oneDNN glue shared by the CPU kernels (only kernel files include this).
// Naming follows oneDNN's examples: *_md, *_mem, *_pd, *_prim, *_args.
#pragma once

#include <dnnl.hpp>
#include <optional>
#include <string>
#include <unordered_map>

#include "tower/core/tensor.h"
#include "tower/graph/graph.h"
#include "tower/kernels/kernel.h"

namespace tower::cpu {

dnnl::engine& engine();         // the process's CPU engine
dnnl::stream& thread_stream();  // a stream per calling thread (the device's thread)

// Plain row-major descriptor for a shape (rank 1..5: a, ab, abc, abcd, abcde), f32 by default.
dnnl::memory::desc plain_md(const Shape& shape,
                            dnnl::memory::data_type type = dnnl::memory::data_type::f32);
dnnl::memory::dims to_dims(const Shape& shape);
// A oneDNN descriptor as a Layout (the plain Layout when it is plain_md(shape)), and back.
Layout to_layout(const dnnl::memory::desc& md, const Shape& shape);
dnnl::memory::desc md_of(const Shape& shape, const Layout& layout);
// Whether `md` is row-major over its own dimensions (as plain_md makes them), of any type.
bool is_row_major(const dnnl::memory::desc& md);
// A filter (O, I, KH, KW) as the weights of the backward-data convolution that computes its
// forward one (conv.cc): v[i, o, r, c] = w[o, i, KH - 1 - r, KW - 1 - c], in `md` (dims I, O, KH,
// KW). md_of gives `md`; the runtime's reorder (reorder.cc) flips a plain filter into it.
Layout flipped_filter_layout(const dnnl::memory::desc& md);
bool is_flipped_filter(const Layout& layout);
// v = the plain filter w (of shape `w_shape`) flipped, plain (flipped_filter_layout's order).
void flip_filter(const float* w, const Shape& w_shape, float* v);
// A 4-D layout with the channels (dim 1) grouped innermost in blocks of `block` (nChw8c, nChw16c;
// 1 for a strided one such as nchw; C for channels last, nhwc): element (n, c, h, w) lies at
// n*strides[0] + (c/block)*strides[1] + h*strides[2] + w*strides[3] + c%block. f32 only. For
// hand-written kernels.
struct ChannelBlocks {
  int64_t block = 1;
  int64_t strides[4] = {0, 0, 0, 0};
};
std::optional<ChannelBlocks> channel_blocks(const dnnl::memory::desc& md);
// `md` is `f32_md` with bf16 elements instead (same dims and blocking, no padding).
bool is_bf16_copy(const dnnl::memory::desc& f32_md, const dnnl::memory::desc& md);
// A memory object over a tensor's buffer (no copy).
dnnl::memory make_memory(const dnnl::memory::desc& md, const Tensor& tensor);

// Primitive attributes asking oneDNN to use the scratchpad we plan (no allocation in a step).
dnnl::primitive_attr user_scratchpad();
// Binds the primitive's scratchpad (`md`, from its primitive descriptor) to `scratch`, when it
// needs one.
void add_scratchpad(std::unordered_map<int, dnnl::memory>& args, const dnnl::memory::desc& md,
                    void* scratch);
// Bytes rounded up to a 64-byte multiple (sub-buffers of a kernel's scratch stay aligned).
constexpr size_t align64(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Runs a primitive on the calling thread's stream and waits; rethrows oneDNN errors as
// tower::Error naming the node.
void execute(const Node& node, const dnnl::primitive& prim,
             const std::unordered_map<int, dnnl::memory>& args);

// Builds something with oneDNN (a primitive descriptor...), turning dnnl::error into a
// tower::Error naming the node.
template <typename F>
auto build(const Node& node, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    fail("{} ({}): oneDNN could not build the kernel: {}", node.name, node.op, e.what());
  }
}

}  // namespace tower::cpu
