#include "tower/io/onnx_model.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>

#include "testing/errors.h"
#include "testing/tmp_dir.h"
#include "tower/core/error.h"

namespace tower {
namespace {

using testing::TmpDir;

// y = relu(x W + b) for x (N, 3): an input with a dynamic batch, two initializers, metadata.
OnnxModel small_model() {
  OnnxModel m("small");
  m.add_input("x", OnnxType::f32, {-1, 3});
  const std::vector<float> w{1, 2, 3, 4, 5, 6}, b{0.5f, -0.5f};
  m.add_initializer("w", {3, 2}, std::span<const float>(w));
  m.add_initializer("b", {2}, std::span<const float>(b));
  m.add_node("MatMul", {"x", "w"}, {"xw"}, {}, "dense/MatMul");
  m.add_node("Add", {"xw", "b"}, {"z"}, {}, "dense/Add");
  m.add_node("Relu", {"z"}, {"y"}, {}, "dense/Relu");
  m.add_output("y", OnnxType::f32, {-1, 2});
  m.add_metadata("classes", R"(["a","b"])");
  return m;
}

using testing::error_of;

// What is written reads back through ONNX's protobuf types field for field.
TEST(OnnxModelTest, RoundTrip) {
  onnx::ModelProto back;
  ASSERT_TRUE(back.ParseFromString(small_model().serialize()));
  EXPECT_EQ(back.ir_version(), 8);
  ASSERT_EQ(back.opset_import_size(), 1);
  EXPECT_EQ(back.opset_import(0).version(), 17);
  EXPECT_EQ(back.producer_name(), "tower");
  const onnx::GraphProto& g = back.graph();
  ASSERT_EQ(g.node_size(), 3);
  EXPECT_EQ(g.node(0).op_type(), "MatMul");
  EXPECT_EQ(g.node(2).name(), "dense/Relu");
  ASSERT_EQ(g.input_size(), 1);
  const auto& shape = g.input(0).type().tensor_type().shape();
  EXPECT_EQ(shape.dim(0).dim_param(), "N");
  EXPECT_EQ(shape.dim(1).dim_value(), 3);
  ASSERT_EQ(g.initializer_size(), 2);
  std::vector<float> w(6);
  ASSERT_EQ(g.initializer(0).raw_data().size(), w.size() * sizeof(float));
  std::memcpy(w.data(), g.initializer(0).raw_data().data(), sizeof(float) * w.size());
  EXPECT_EQ(w, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  ASSERT_EQ(back.metadata_props_size(), 1);
  EXPECT_EQ(back.metadata_props(0).value(), R"(["a","b"])");
}

TEST(OnnxModelTest, AttributesKeepTheirTypes) {
  OnnxModel m("attrs");
  m.add_input("x", OnnxType::u8, {-1, 4, 4, 1});
  m.add_node("Cast", {"x"}, {"f"}, {{"to", int64_t{1}}});
  m.add_node("Transpose", {"f"}, {"t"}, {{"perm", std::vector<int64_t>{0, 3, 1, 2}}});
  m.add_node("LRN", {"t"}, {"y"},
             {{"size", int64_t{3}}, {"alpha", 0.5f}, {"beta", 0.75f}, {"bias", 2.0f}});
  m.add_output("y", OnnxType::f32, {-1, 1, 4, 4});
  onnx::ModelProto back;
  ASSERT_TRUE(back.ParseFromString(m.serialize()));
  const onnx::NodeProto& lrn = back.graph().node(2);
  ASSERT_EQ(lrn.attribute_size(), 4);
  EXPECT_EQ(lrn.attribute(0).i(), 3);
  EXPECT_FLOAT_EQ(lrn.attribute(1).f(), 0.5f);
  EXPECT_EQ(back.graph().node(1).attribute(0).ints_size(), 4);
}

// The checker and strict shape inference run before anything is written: a node reading a value
// that nothing produces, or an output declared with the wrong shape, is refused by name.
TEST(OnnxModelTest, InvalidModelsAreRefusedWithTheReason) {
  OnnxModel dangling = small_model();
  dangling.add_node("Relu", {"nowhere"}, {"r"}, {}, "stray");
  EXPECT_NE(error_of([&] { dangling.serialize(); }).find("nowhere"), std::string::npos);

  OnnxModel wrong("wrong");
  wrong.add_input("x", OnnxType::f32, {-1, 3});
  wrong.add_node("Relu", {"x"}, {"y"});
  wrong.add_output("y", OnnxType::f32, {-1, 4});
  const std::string why = error_of([&] { wrong.serialize(); });
  EXPECT_NE(why.find("ONNX's checker rejects"), std::string::npos) << why;
}

// Written atomically: a failed write names the path and leaves no file, not even a temp file; a
// refused model leaves the previous file as it was.
TEST(OnnxModelTest, WritesAtomically) {
  TmpDir dir;
  const std::string missing = dir / "no/such/dir/model.onnx";
  const std::string why = error_of([&] { small_model().write(missing); });
  EXPECT_NE(why.find(missing), std::string::npos) << why;
  EXPECT_FALSE(std::filesystem::exists(dir / "no"));

  const std::string path = dir / "model.onnx";
  small_model().write(path);
  const auto size = std::filesystem::file_size(path);
  OnnxModel bad = small_model();
  bad.add_node("NoSuchOp", {"y"}, {"q"});
  EXPECT_FALSE(error_of([&] { bad.write(path); }).empty());
  EXPECT_EQ(std::filesystem::file_size(path), size);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
  onnx::ModelProto back;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(back.ParseFromIstream(&in));
}

}  // namespace
}  // namespace tower
