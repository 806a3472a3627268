#include "tower/core/dtype.h"

#include <bit>

#include "tower/core/error.h"

namespace tower {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  TOWER_CHECK(false);
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  TOWER_CHECK(false);
}

DType parse_dtype(std::string_view name) {
  for (DType d : {DType::f32, DType::bf16, DType::i32, DType::i64, DType::u8})
    if (dtype_name(d) == name) return d;
  fail("unknown dtype '{}': expected one of f32, bf16, i32, i64, u8", name);
}

uint16_t f32_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float bf16_to_f32(uint16_t value) {
  return std::bit_cast<float>(static_cast<uint32_t>(value) << 16);
}

std::string_view precision_name(Precision precision) {
  return precision == Precision::bf16 ? "bf16" : "fp32";
}

Precision parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  fail("--precision '{}': expected fp32 or bf16", name);
}

}  // namespace tower
