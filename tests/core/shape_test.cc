#include "tower/core/shape.h"

#include <gtest/gtest.h>

#include "tower/core/error.h"

namespace tower {

TEST(ShapeTest, NumelRankAndPrint) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.dim(-1), 4);
  EXPECT_EQ(s.to_string(), "(2, 3, 4)");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ(Shape{}.to_string(), "()");
  EXPECT_EQ(Shape{5}.to_string(), "(5,)");
  EXPECT_EQ(s.with_dim(0, 7), (Shape{7, 3, 4}));
}

TEST(ShapeTest, BadAxisAndNegativeDimAreUserErrors) {
  Shape s{2, 3};
  EXPECT_THROW(s.dim(2), Error);
  EXPECT_THROW(s.dim(-3), Error);
  try {
    Shape bad(std::vector<int64_t>{2, -1});
    FAIL() << "expected tower::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be >= 0"), std::string::npos);
  }
}

}  // namespace tower
