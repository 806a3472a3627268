// Tensor: an n-dimensional array (shape, dtype, device): the inputs, outputs and variables of
// every model.
#pragma once

#include <cstring>
#include <memory>
#include <vector>

#include "tower/core/allocator.h"
#include "tower/core/device.h"
#include "tower/core/dtype.h"
#include "tower/core/error.h"
#include "tower/core/shape.h"

namespace tower {

// A dense, row-major array on a device. Storage is 64-byte aligned and shared between a tensor
// and its views; moving is cheap, copying is explicit (clone()).
class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-filled storage from the device's allocator.
  Tensor(Shape shape, DType dtype, Device device = {});
  // Wraps memory owned elsewhere (e.g. a buffer of the runtime's memory plan); no ownership.
  static Tensor wrap(void* data, Shape shape, DType dtype, Device device = {});
  template <typename T>
  static Tensor from_vector(Shape shape, const std::vector<T>& values, Device device = {});

  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  Tensor clone() const;                            // deep copy into new storage
  Tensor view() const;                             // shares storage
  Tensor slice(int64_t begin, int64_t end) const;  // rows [begin, end) of axis 0, shares storage
  Tensor reshape(Shape shape) const;               // same storage, same numel
  void copy_from(const Tensor& src);  // same shape and dtype; copies the bytes (any devices)
  void fill_zero();

  bool defined() const { return data_ != nullptr || shape_.numel() == 0; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  void* raw_data() { return data_; }
  const void* raw_data() const { return data_; }
  template <typename T>
  T* data() {
    check_type(dtype_of<T>());
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    check_type(dtype_of<T>());
    return static_cast<const T*>(data_);
  }
  template <typename T>
  std::vector<T> to_vector() const {
    const T* p = data<T>();
    return std::vector<T>(p, p + numel());
  }

 private:
  struct Storage;
  void check_type(DType requested) const;

  std::shared_ptr<Storage> storage_;  // null for wrapped memory
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_;
};

template <typename T>
Tensor Tensor::from_vector(Shape shape, const std::vector<T>& values, Device device) {
  if (static_cast<int64_t>(values.size()) != shape.numel())
    fail("cannot build a tensor of shape {} from {} values", shape.to_string(), values.size());
  Tensor t(std::move(shape), dtype_of<T>(), device);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

}  // namespace tower
