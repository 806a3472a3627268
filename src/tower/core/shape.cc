#include "tower/core/shape.h"

#include <fmt/format.h>

#include "tower/core/error.h"

namespace tower {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {
  for (int64_t d : dims_)
    if (d < 0) fail("invalid shape {}: dimensions must be >= 0", fmt::join(dims_, "x"));
}

int64_t Shape::dim(int axis) const {
  int a = axis < 0 ? axis + rank() : axis;
  if (a < 0 || a >= rank()) fail("axis {} is out of range for shape {}", axis, to_string());
  return dims_[static_cast<size_t>(a)];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

Shape Shape::with_dim(int axis, int64_t size) const {
  Shape s = *this;
  int a = axis < 0 ? axis + rank() : axis;
  if (a < 0 || a >= rank()) fail("axis {} is out of range for shape {}", axis, to_string());
  s.dims_[static_cast<size_t>(a)] = size;
  return s;
}

std::string Shape::to_string() const {
  if (dims_.size() == 1) return fmt::format("({},)", dims_[0]);
  return fmt::format("({})", fmt::join(dims_, ", "));
}

}  // namespace tower
