#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tower {

// Element types a Tensor can hold.
enum class DType : uint8_t { f32, bf16, i32, i64, u8 };

// How a program computes: fp32 everywhere, or bf16 multiplications (convolutions and matrix
// products read bf16 copies of their inputs and weights, accumulate and write f32) with every
// value between kernels, the variables, the optimizer and the loss in f32.
enum class Precision : uint8_t { fp32, bf16 };
std::string_view precision_name(Precision precision);  // "fp32", "bf16"
Precision parse_precision(std::string_view name);      // throws naming --precision

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", ...
DType parse_dtype(std::string_view name);  // throws tower::Error on an unknown name

// The DType of a C++ element type, for typed access (Tensor::data<T>()).
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}

// bf16 <-> f32 (round to nearest even), for tests and checkpoint conversion.
uint16_t f32_to_bf16(float value);
float bf16_to_f32(uint16_t value);

}  // namespace tower
