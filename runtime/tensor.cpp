// Tensor and Storage: allocation through the device allocator, views, host copies.
#include "runtime/tensor.h"

#include <cstring>
#include <sstream>
#include <stdexcept>

#include "runtime/allocator.h"
#include "runtime/kernels.h"

namespace tandem {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + shape_str(shape));
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  data_ = device_alloc(bytes, device);
}

Storage::Storage(void* data, size_t bytes, Device device, std::shared_ptr<void> owner)
    : data_(data), bytes_(bytes), device_(device), owner_(std::move(owner)) {
  if (!owner_) throw std::invalid_argument("Storage: external memory needs an owner that frees it");
}

Storage::~Storage() {
  if (!owner_) device_free(data_, bytes_, device_);
}

Tensor Tensor::from_external(void* data, const Shape& shape, DType dtype, Device device, std::shared_ptr<void> owner) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(data, t.nbytes(), device, std::move(owner));
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.numel_ = shape_numel(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (t.numel() == 0) return t;  // no memset of a null buffer
  if (device.is_cpu()) {
    std::memset(t.raw(), 0, t.nbytes());
  } else {
    std::vector<unsigned char> host(t.nbytes(), 0);
    device_copy(t.raw(), device, host.data(), Device::cpu(), t.nbytes());
  }
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& values, const Shape& shape) {
  Tensor t = empty(shape);
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw std::invalid_argument("from_vector: " + std::to_string(values.size()) +
                                " values for shape " + shape_str(shape));
  if (t.numel() > 0) std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  if (i < 0) i += n;
  if (i < 0 || i >= n)
    throw std::out_of_range("dim " + std::to_string(i) + " of a tensor of shape " + shape_str(shape_));
  return shape_[i];
}

void* Tensor::raw() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->data()) + static_cast<size_t>(offset_) * dtype_size(dtype_);
}

float* Tensor::f32() const {
  if (dtype_ != DType::f32)
    throw std::logic_error(std::string("f32() on a tensor of dtype ") + dtype_name(dtype_));
  return static_cast<float*>(raw());
}

Tensor Tensor::view(int64_t element_offset, const Shape& shape) const {
  int64_t n = shape_numel(shape);
  if (element_offset < 0 || element_offset + n > numel_)
    throw std::out_of_range("view of " + std::to_string(n) + " elements at offset " +
                            std::to_string(element_offset) + " reaches outside a tensor of " +
                            std::to_string(numel_) + " elements");
  Tensor t = *this;
  t.offset_ = offset_ + element_offset;
  t.shape_ = shape;
  t.numel_ = n;
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (shape_numel(shape) != numel_)
    throw std::invalid_argument("reshape " + shape_str(shape_) + " to " + shape_str(shape) +
                                ": element counts differ");
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

bool Tensor::shares_storage_with(const Tensor& other) const {
  return storage_ && storage_ == other.storage_;
}

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  if (src.dtype_ != dtype_ || src.numel_ != numel_)
    throw std::invalid_argument("copy_from: " + shape_str(src.shape_) + " " + dtype_name(src.dtype_) +
                                " into " + shape_str(shape_) + " " + dtype_name(dtype_));
  device_copy(raw(), device(), src.raw(), src.device(), nbytes());
}

std::vector<float> Tensor::to_vector() const {
  if (numel_ == 0) return {};  // no memcpy from a null buffer
  Tensor host = device().is_cpu() ? *this : to(Device::cpu());
  std::vector<float> out(static_cast<size_t>(numel_));
  Kernels& k = kernels_for(Device::cpu());
  switch (dtype_) {
    case DType::f32: std::memcpy(out.data(), host.raw(), nbytes()); break;
    case DType::f16: k.f16_to_f32(out.data(), host.data<uint16_t>(), numel_); break;
    case DType::bf16: k.bf16_to_f32(out.data(), host.data<uint16_t>(), numel_); break;
    case DType::i32:
      for (int64_t i = 0; i < numel_; ++i) out[i] = static_cast<float>(host.data<int32_t>()[i]);
      break;
    case DType::i64:
      for (int64_t i = 0; i < numel_; ++i) out[i] = static_cast<float>(host.data<int64_t>()[i]);
      break;
    case DType::u8:
      for (int64_t i = 0; i < numel_; ++i) out[i] = static_cast<float>(host.data<uint8_t>()[i]);
      break;
  }
  return out;
}

}  // namespace tandem
