#include "tower/io/onnx_model.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include "tower/core/error.h"
#include "tower/io/atomic_file.h"

namespace tower {

struct OnnxModel::Impl {
  onnx::ModelProto model;
  onnx::GraphProto* graph = nullptr;
};

namespace {

void set_type(onnx::ValueInfoProto* info, OnnxType type, const std::vector<int64_t>& dims) {
  onnx::TypeProto_Tensor* tensor = info->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(static_cast<int>(type));
  onnx::TensorShapeProto* shape = tensor->mutable_shape();
  for (int64_t d : dims) {
    if (d < 0)
      shape->add_dim()->set_dim_param("N");
    else
      shape->add_dim()->set_dim_value(d);
  }
}

}  // namespace

OnnxModel::OnnxModel(const std::string& graph_name) : impl_(std::make_unique<Impl>()) {
  onnx::ModelProto& m = impl_->model;
  m.set_ir_version(kIrVersion);
  m.set_producer_name("tower");
  m.set_producer_version(TOWER_VERSION);
  onnx::OperatorSetIdProto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  impl_->graph = m.mutable_graph();
  impl_->graph->set_name(graph_name);
}

OnnxModel::~OnnxModel() = default;
OnnxModel::OnnxModel(OnnxModel&&) noexcept = default;
OnnxModel& OnnxModel::operator=(OnnxModel&&) noexcept = default;

void OnnxModel::add_input(const std::string& name, OnnxType type,
                          const std::vector<int64_t>& dims) {
  onnx::ValueInfoProto* info = impl_->graph->add_input();
  info->set_name(name);
  set_type(info, type, dims);
}

void OnnxModel::add_output(const std::string& name, OnnxType type,
                           const std::vector<int64_t>& dims) {
  onnx::ValueInfoProto* info = impl_->graph->add_output();
  info->set_name(name);
  set_type(info, type, dims);
}

void OnnxModel::add_initializer(const std::string& name, const std::vector<int64_t>& dims,
                                std::span<const float> values) {
  onnx::TensorProto* t = impl_->graph->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  // Little-endian raw bytes, as every reader expects (x86 and ARM hosts are little-endian).
  t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size_bytes()));
}

void OnnxModel::add_initializer(const std::string& name, const std::vector<int64_t>& dims,
                                std::span<const int64_t> values) {
  onnx::TensorProto* t = impl_->graph->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t->add_dims(d);
  for (int64_t v : values) t->add_int64_data(v);
}

void OnnxModel::add_node(const std::string& op_type, const std::vector<std::string>& inputs,
                         const std::vector<std::string>& outputs,
                         const std::vector<OnnxAttr>& attrs, const std::string& name) {
  onnx::NodeProto* node = impl_->graph->add_node();
  node->set_op_type(op_type);
  if (!name.empty()) node->set_name(name);
  for (const std::string& i : inputs) node->add_input(i);
  for (const std::string& o : outputs) node->add_output(o);
  for (const OnnxAttr& a : attrs) {
    onnx::AttributeProto* attr = node->add_attribute();
    attr->set_name(a.name);
    if (auto* i = std::get_if<int64_t>(&a.value)) {
      attr->set_type(onnx::AttributeProto::INT);
      attr->set_i(*i);
    } else if (auto* f = std::get_if<float>(&a.value)) {
      attr->set_type(onnx::AttributeProto::FLOAT);
      attr->set_f(*f);
    } else if (auto* s = std::get_if<std::string>(&a.value)) {
      attr->set_type(onnx::AttributeProto::STRING);
      attr->set_s(*s);
    } else if (auto* is = std::get_if<std::vector<int64_t>>(&a.value)) {
      attr->set_type(onnx::AttributeProto::INTS);
      for (int64_t v : *is) attr->add_ints(v);
    } else if (auto* fs = std::get_if<std::vector<float>>(&a.value)) {
      attr->set_type(onnx::AttributeProto::FLOATS);
      for (float v : *fs) attr->add_floats(v);
    }
  }
}

void OnnxModel::add_metadata(const std::string& key, const std::string& value) {
  onnx::StringStringEntryProto* entry = impl_->model.add_metadata_props();
  entry->set_key(key);
  entry->set_value(value);
}

void OnnxModel::set_doc(const std::string& doc) { impl_->model.set_doc_string(doc); }

int64_t OnnxModel::num_nodes() const { return impl_->graph->node_size(); }

std::string OnnxModel::serialize() const {
  // Shape inference fills value_info on a copy; the file keeps only what was declared.
  onnx::ModelProto checked = impl_->model;
  try {
    onnx::checker::check_model(checked);
    onnx::shape_inference::InferShapes(checked, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(true, 1, false));
  } catch (const std::exception& e) {
    fail("ONNX's checker rejects the model: {}", e.what());
  }
  std::string bytes;
  if (!impl_->model.SerializeToString(&bytes))
    fail("cannot serialize the ONNX model (over protobuf's 2 GiB limit?)");
  return bytes;
}

void OnnxModel::write(const std::string& path) const { atomic_write_file(path, serialize()); }

}  // namespace tower
