#include "tower/train/class_weights.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>

#include "testing/tmp_dir.h"
#include "tower/core/error.h"

namespace tower {
namespace {

// 3 classes with 6, 2 and 0... examples: labels given in order.
Dataset labelled(const std::vector<int32_t>& labels, int classes) {
  Dataset data;
  data.name = "toy";
  const int64_t n = static_cast<int64_t>(labels.size());
  data.images = Tensor(Shape{n, 1, 1, 1}, DType::u8);
  data.labels = Tensor::from_vector<int32_t>(Shape{n}, labels);
  data.num_classes = classes;
  for (int c = 0; c < classes; ++c) data.class_names.push_back(fmt::format("c{}", c));
  return data;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ClassWeightsTest, BalancedIsNOverKTimesTheClassCount) {
  const Dataset data = labelled({0, 0, 0, 0, 0, 0, 1, 1, 2}, 4);
  EXPECT_EQ(examples_per_class(data), (std::vector<int64_t>{6, 2, 1, 0}));
  // N = 9, K = 4: 9 / 24, 9 / 8, 9 / 4; a class without examples gets 0.
  const std::vector<float> w = class_weights("balanced", data);
  ASSERT_EQ(w.size(), 4u);
  EXPECT_FLOAT_EQ(w[0], 9.0f / 24);
  EXPECT_FLOAT_EQ(w[1], 9.0f / 8);
  EXPECT_FLOAT_EQ(w[2], 9.0f / 4);
  EXPECT_FLOAT_EQ(w[3], 0.0f);
  EXPECT_TRUE(class_weights("", data).empty());
}

TEST(ClassWeightsTest, CountsLineNamesTheClassesAndTheImbalance) {
  const Dataset data = labelled({0, 0, 0, 0, 0, 1, 1, 2, 2}, 3);
  EXPECT_EQ(class_counts_line(data, false),
            "3 classes: c0 5, c1 2, c2 2; imbalanced: --class_weights balanced weighs each "
            "class's loss by N / (K n_c)");
  EXPECT_EQ(class_counts_line(data, true), "3 classes: c0 5, c1 2, c2 2");
  std::vector<int32_t> many;
  for (int c = 0; c < 12; ++c)
    for (int i = 0; i <= c; ++i) many.push_back(c);
  EXPECT_EQ(class_counts_line(labelled(many, 12), true),
            "12 classes: 1 to 12 examples each (fewest: c0, most: c11)");
}

TEST(ClassWeightsTest, AFileNamesClassesByNameOrIndexAndBadKeysAreNamed) {
  testing::TmpDir tmp;
  const Dataset data = labelled({0, 1, 2}, 3);
  auto write = [&](const std::string& text) {
    std::ofstream(tmp / "w.json") << text;
    return tmp / "w.json";
  };
  EXPECT_EQ(class_weights(write(R"({"c2": 3.5, "0": 0.25})"), data),
            (std::vector<float>{0.25f, 1.0f, 3.5f}));
  std::string e = error_of([&] { class_weights(write(R"({"dog": 2})"), data); });
  EXPECT_NE(e.find("key 'dog' is not a class of toy (its classes: c0, c1, c2)"), std::string::npos)
      << e;
  e = error_of([&] { class_weights(write(R"({"c1": -1})"), data); });
  EXPECT_NE(e.find("key 'c1' is -1, expected a weight from 0 to 1e6"), std::string::npos) << e;
  e = error_of([&] { class_weights(write(R"({"c1": 1e400})"), data); });
  EXPECT_NE(e.find("not valid JSON"), std::string::npos) << e;
  e = error_of([&] { class_weights(write("[1, 2]"), data); });
  EXPECT_NE(e.find("expected a JSON object"), std::string::npos) << e;
  e = error_of([&] { class_weights(tmp / "missing.json", data); });
  EXPECT_NE(e.find("expected balanced or a readable JSON file"), std::string::npos) << e;
}

}  // namespace
}  // namespace tower
