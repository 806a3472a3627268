#include "tower/kernels/cpu/dnnl_util.h"

#include "tower/core/device.h"

namespace tower::cpu {

namespace {
// oneDNN dispatches to the level that tower's own kernels use (cpu_isa(): the CPU's level or its
// cap), set before its first primitive.
void cap_dnnl_isa() {
  const CpuIsa isa = cpu_isa();
  if (isa == cpu_native_isa()) return;
  const dnnl::cpu_isa caps[] = {dnnl::cpu_isa::sse41, dnnl::cpu_isa::avx2,
                                dnnl::cpu_isa::avx512_core, dnnl::cpu_isa::avx512_core_bf16,
                                dnnl::cpu_isa::avx512_core_amx};
  try {
    dnnl::set_max_cpu_isa(caps[static_cast<int>(isa)]);
  } catch (const dnnl::error& e) {
    fail("cannot cap oneDNN's instruction set at {}: {}", cpu_isa_name(isa), e.what());
  }
}
}  // namespace

dnnl::engine& engine() {
  static dnnl::engine eng = [] {
    cap_dnnl_isa();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return eng;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(engine());
  return stream;
}

dnnl::memory::dims to_dims(const Shape& shape) {
  return dnnl::memory::dims(shape.dims().begin(), shape.dims().end());
}

dnnl::memory::desc plain_md(const Shape& shape, dnnl::memory::data_type type) {
  using tag = dnnl::memory::format_tag;
  static const tag tags[] = {tag::a, tag::a, tag::ab, tag::abc, tag::abcd, tag::abcde};
  TOWER_CHECK_MSG(shape.rank() <= 5, "oneDNN descriptors support rank <= 5, got {}",
                  shape.to_string());
  if (shape.rank() == 0) return dnnl::memory::desc({1}, type, tag::a);
  return dnnl::memory::desc(to_dims(shape), type, tags[shape.rank()]);
}

namespace {
class DnnlFormat : public Layout::Format {
 public:
  explicit DnnlFormat(const dnnl::memory::desc& md, bool flipped = false)
      : md_(md), flipped_(flipped) {}
  size_t bytes() const override { return md_.get_size(); }
  bool equals(const Format& other) const override {
    auto* o = dynamic_cast<const DnnlFormat*>(&other);
    return o != nullptr && o->md_ == md_ && o->flipped_ == flipped_;
  }
  const dnnl::memory::desc& md() const { return md_; }
  bool flipped() const { return flipped_; }

 private:
  dnnl::memory::desc md_;
  bool flipped_;  // flipped_filter_layout
};
}  // namespace

Layout flipped_filter_layout(const dnnl::memory::desc& md) {
  return Layout(std::make_shared<DnnlFormat>(md, true));
}

void flip_filter(const float* w, const Shape& w_shape, float* v) {
  const int64_t outs = w_shape[0], ins = w_shape[1], kh = w_shape[2], kw = w_shape[3];
  for (int64_t o = 0; o < outs; ++o)
    for (int64_t i = 0; i < ins; ++i)
      for (int64_t r = 0; r < kh; ++r)
        for (int64_t c = 0; c < kw; ++c)
          v[((i * outs + o) * kh + r) * kw + c] =
              w[((o * ins + i) * kh + kh - 1 - r) * kw + kw - 1 - c];
}

bool is_flipped_filter(const Layout& layout) {
  auto* format = dynamic_cast<const DnnlFormat*>(layout.format());
  return format != nullptr && format->flipped();
}

Layout to_layout(const dnnl::memory::desc& md, const Shape& shape) {
  if (md == plain_md(shape)) return {};
  // (a grouped filter's plain 5-D view, (G, K / G, C / G, KH, KW): the plain filter's bytes)
  if (md.data.ndims != shape.rank() && md.data_type() == dnnl::memory::data_type::f32 &&
      is_row_major(md))
    return {};
  return Layout(std::make_shared<DnnlFormat>(md));
}

bool is_row_major(const dnnl::memory::desc& md) {
  return md == plain_md(Shape(md.dims()), md.data_type());
}

dnnl::memory::desc md_of(const Shape& shape, const Layout& layout) {
  if (layout.is_plain()) return plain_md(shape);
  auto* format = dynamic_cast<const DnnlFormat*>(layout.format());
  TOWER_CHECK_MSG(format != nullptr, "not a oneDNN layout");
  return format->md();
}

std::optional<ChannelBlocks> channel_blocks(const dnnl::memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.ndims != 4 || d.format_kind != dnnl_blocked || d.offset0 != 0) return std::nullopt;
  const dnnl_blocking_desc_t& b = d.format_desc.blocking;
  ChannelBlocks blocks;
  if (d.data_type != dnnl_f32) return std::nullopt;
  if (b.inner_nblks == 1 && b.inner_idxs[0] == 1)
    blocks.block = b.inner_blks[0];
  else if (b.inner_nblks != 0)
    return std::nullopt;
  for (int i = 0; i < 4; ++i) blocks.strides[i] = b.strides[i];
  // Channels last (NHWC, what AMX convolutions pick): all channels are one block, so loops over
  // a block run over contiguous memory instead of striding by C.
  if (b.inner_nblks == 0 && b.strides[1] == 1 && d.dims[1] > 1) {
    blocks.block = d.dims[1];
    blocks.strides[1] = 0;
  }
  return blocks;
}

bool is_bf16_copy(const dnnl::memory::desc& f32_md, const dnnl::memory::desc& md) {
  if (f32_md.data_type() != dnnl::memory::data_type::f32 ||
      md.data_type() != dnnl::memory::data_type::bf16 || f32_md.data.offset0 != 0)
    return false;
  for (int i = 0; i < f32_md.data.ndims; ++i)
    if (f32_md.data.padded_dims[i] != f32_md.data.dims[i]) return false;
  dnnl_memory_desc_t as_bf16 = f32_md.data;
  as_bf16.data_type = dnnl_bf16;
  return dnnl_memory_desc_equal(&as_bf16, &md.data) != 0;
}

dnnl::memory make_memory(const dnnl::memory::desc& md, const Tensor& tensor) {
  return dnnl::memory(md, engine(), const_cast<void*>(tensor.raw_data()));
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void add_scratchpad(std::unordered_map<int, dnnl::memory>& args, const dnnl::memory::desc& md,
                    void* scratch) {
  if (md.get_size() > 0) args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(md, engine(), scratch);
}

void execute(const Node& node, const dnnl::primitive& prim,
             const std::unordered_map<int, dnnl::memory>& args) {
  try {
    prim.execute(thread_stream(), args);
    thread_stream().wait();
  } catch (const dnnl::error& e) {
    fail("{} ({}): oneDNN failed: {}", node.name, node.op, e.what());
  }
}

}  // namespace tower::cpu
