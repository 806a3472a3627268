#include "tower/core/tensor.h"

namespace tower {
namespace {

// Host memory with the C library; device memory (either side) through its backend.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device.kind == DeviceKind::cpu && src_device.kind == DeviceKind::cpu)
    std::memmove(dst, src, bytes);
  else
    device_ops(DeviceKind::cuda).copy(dst, src, bytes);
}

void zero_bytes(void* ptr, Device device, size_t bytes) {
  if (bytes == 0) return;
  if (device.kind == DeviceKind::cpu)
    std::memset(ptr, 0, bytes);
  else
    device_ops(device.kind).zero(ptr, bytes);
}

}  // namespace

struct Tensor::Storage {
  Allocator* allocator;
  void* ptr;
  size_t bytes;
  ~Storage() { allocator->deallocate(ptr, bytes); }
};

Tensor::Tensor(Shape shape, DType dtype, Device device)
    : shape_(std::move(shape)), dtype_(dtype), device_(device) {
  Allocator& allocator = allocator_for(device);
  size_t bytes = nbytes();
  void* ptr = allocator.allocate(bytes);
  storage_ = std::shared_ptr<Storage>(new Storage{&allocator, ptr, bytes});
  data_ = ptr;
  zero_bytes(data_, device_, bytes);
}

Tensor Tensor::wrap(void* data, Shape shape, DType dtype, Device device) {
  Tensor t;
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(shape_, dtype_, device_);
  copy_bytes(t.data_, device_, data_, device_, nbytes());
  return t;
}

Tensor Tensor::view() const {
  Tensor t;
  t.storage_ = storage_;
  t.data_ = data_;
  t.shape_ = shape_;
  t.dtype_ = dtype_;
  t.device_ = device_;
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  if (shape_.rank() == 0) fail("cannot slice a scalar tensor");
  if (begin < 0 || end < begin || end > shape_[0])
    fail("slice [{}, {}) is out of range for a tensor of shape {}", begin, end, shape_.to_string());
  Tensor t = view();
  int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
  t.data_ = static_cast<char*>(data_) + static_cast<size_t>(begin * row) * dtype_size(dtype_);
  t.shape_ = shape_.with_dim(0, end - begin);
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  if (shape.numel() != numel())
    fail("cannot reshape a tensor of shape {} ({} elements) to {} ({} elements)",
         shape_.to_string(), numel(), shape.to_string(), shape.numel());
  Tensor t = view();
  t.shape_ = std::move(shape);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.shape_ != shape_ || src.dtype_ != dtype_)
    fail("cannot copy a {} tensor of shape {} into a {} tensor of shape {}", dtype_name(src.dtype_),
         src.shape_.to_string(), dtype_name(dtype_), shape_.to_string());
  copy_bytes(data_, device_, src.data_, src.device_, nbytes());
}

void Tensor::fill_zero() { zero_bytes(data_, device_, nbytes()); }

void Tensor::check_type(DType requested) const {
  if (requested != dtype_)
    fail("tensor holds {} elements but was read as {}", dtype_name(dtype_), dtype_name(requested));
}

}  // namespace tower
