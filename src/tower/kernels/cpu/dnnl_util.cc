#include "tower/kernels/cpu/dnnl_util.h"

namespace tower::cpu {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
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

dnnl::memory make_memory(const dnnl::memory::desc& md, const Tensor& tensor) {
  return dnnl::memory(md, engine(), const_cast<void*>(tensor.raw_data()));
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
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
