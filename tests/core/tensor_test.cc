#include "tower/core/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace tower {

TEST(TensorTest, AlignedZeroFilledStorage) {
  Tensor t(Shape{3, 5}, DType::f32);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  EXPECT_EQ(t.nbytes(), 60u);
  for (float v : t.to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

TEST(TensorTest, SliceIsAViewAlongTheBatchAxis) {
  Tensor t = Tensor::from_vector<float>(Shape{4, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  Tensor s = t.slice(1, 3);
  EXPECT_EQ(s.shape(), (Shape{2, 2}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
  s.data<float>()[0] = 42;
  EXPECT_EQ(t.data<float>()[2], 42);  // shares storage
  EXPECT_THROW(t.slice(3, 5), Error);
}

TEST(TensorTest, MoveIsCheapCloneIsDeep) {
  Tensor t = Tensor::from_vector<int32_t>(Shape{3}, {1, 2, 3});
  const void* before = t.raw_data();
  Tensor moved = std::move(t);
  EXPECT_EQ(moved.raw_data(), before);
  Tensor copy = moved.clone();
  EXPECT_NE(copy.raw_data(), moved.raw_data());
  EXPECT_EQ(copy.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
  static_assert(!std::is_copy_constructible_v<Tensor>);
}

TEST(TensorTest, TypeAndShapeMistakesAreErrors) {
  Tensor t(Shape{2, 3}, DType::f32);
  EXPECT_THROW(t.data<int32_t>(), Error);
  EXPECT_THROW(t.reshape(Shape{4}), Error);
  EXPECT_EQ(t.reshape(Shape{3, 2}).shape(), (Shape{3, 2}));
  Tensor other(Shape{3, 2}, DType::f32);
  EXPECT_THROW(t.copy_from(other), Error);
  EXPECT_THROW(Tensor::from_vector<float>(Shape{2}, {1, 2, 3}), Error);
}

TEST(TensorTest, DTypes) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(parse_dtype("u8"), DType::u8);
  EXPECT_THROW(parse_dtype("f16"), Error);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.5f)), 1.5f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.00390625f)), 1.0f);  // ties round to even
}

TEST(AllocatorTest, CountersTrackAllocations) {
  Device dev{DeviceKind::cpu, 5};  // a device no other test uses
  Allocator& a = allocator_for(dev);
  auto before = a.counters();
  {
    Tensor t(Shape{256}, DType::f32, dev);
    auto during = a.counters();
    EXPECT_EQ(during.num_allocations, before.num_allocations + 1);
    EXPECT_EQ(during.bytes_in_use, before.bytes_in_use + 1024);
    EXPECT_GE(during.peak_bytes_in_use, during.bytes_in_use);
    Tensor v = t.slice(0, 10);  // views allocate nothing
    Tensor m = std::move(t);
    EXPECT_EQ(a.counters().num_allocations, during.num_allocations);
  }
  EXPECT_EQ(a.counters().bytes_in_use, before.bytes_in_use);
  EXPECT_THROW(allocator_for({DeviceKind::cuda, 0}).allocate(16), Error);
}

}  // namespace tower
