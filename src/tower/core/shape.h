#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tower {

// The dimensions of a tensor, outermost first (e.g. (N, C, H, W) for NCHW images).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::vector<int64_t> dims);

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int axis) const { return dims_.at(static_cast<size_t>(axis)); }
  int64_t dim(int axis) const;  // negative axis counts from the end; throws on out-of-range
  int64_t numel() const;        // product of dims (1 for a scalar)
  const std::vector<int64_t>& dims() const { return dims_; }
  Shape with_dim(int axis, int64_t size) const;

  std::string to_string() const;  // "(2, 3, 4)"; "()" for a scalar
  bool operator==(const Shape& other) const = default;

 private:
  std::vector<int64_t> dims_;
};

}  // namespace tower
