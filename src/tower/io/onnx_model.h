// An ONNX model under construction, written through the ONNX library's own protobuf types (ONNX
// 1.12: IR version 8, opset 17). serialize() runs ONNX's checker and its strict shape inference
// with type checks, so a file that leaves here is one ONNX Runtime accepts.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace tower {

enum class OnnxType : int { f32 = 1, u8 = 2, i64 = 7 };  // onnx::TensorProto::DataType values

struct OnnxAttr {
  std::string name;
  std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>> value;
};

class OnnxModel {
 public:
  static constexpr int kOpset = 17;
  static constexpr int kIrVersion = 8;

  explicit OnnxModel(const std::string& graph_name);
  ~OnnxModel();
  OnnxModel(OnnxModel&&) noexcept;
  OnnxModel& operator=(OnnxModel&&) noexcept;

  // dims: -1 is the dynamic batch dimension, named "N".
  void add_input(const std::string& name, OnnxType type, const std::vector<int64_t>& dims);
  void add_output(const std::string& name, OnnxType type, const std::vector<int64_t>& dims);
  void add_initializer(const std::string& name, const std::vector<int64_t>& dims,
                       std::span<const float> values);
  void add_initializer(const std::string& name, const std::vector<int64_t>& dims,
                       std::span<const int64_t> values);
  void add_node(const std::string& op_type, const std::vector<std::string>& inputs,
                const std::vector<std::string>& outputs, const std::vector<OnnxAttr>& attrs = {},
                const std::string& name = "");
  void add_metadata(const std::string& key, const std::string& value);
  void set_doc(const std::string& doc);
  int64_t num_nodes() const;

  // The checked model's bytes; a tower::Error says what ONNX's checker or shape inference found.
  std::string serialize() const;
  // serialize() written atomically: `path` is the complete new model, or untouched.
  void write(const std::string& path) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tower
