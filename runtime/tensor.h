// Tensor: shared storage on a device, plus an element offset, a shape and a dtype.
// Invariant: a tensor is always contiguous (row-major) inside its storage, and a view
// shares its parent's storage, so a gradient can be a slice of a reducer's flat bucket
// buffer without a copy (docs/architecture.md, "Tensor").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/core/dtype.h"

namespace tandem {

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[256, 784]"

// Raw bytes on one device. Allocation goes through the device's allocator
// (runtime/allocator.h), so a CUDA build can cache blocks without touching callers.
class Storage {
 public:
  Storage(size_t bytes, Device device);
  // Memory someone else allocated (e.g. a process group's shared buffer): not freed
  // here; `owner` is released when the storage dies, and frees it.
  Storage(void* data, size_t bytes, Device device, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  std::shared_ptr<void> owner_;  // external memory only
};

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  // A tensor over `data` (at least shape's bytes, on `device`), kept alive by `owner`.
  static Tensor from_external(void* data, const Shape& shape, DType dtype, Device device, std::shared_ptr<void> owner);
  // A CPU f32 tensor holding `values` (size must equal the shape's element count).
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  int64_t offset() const { return offset_; }  // in elements of dtype()

  void* raw() const;  // first element of this tensor (storage + offset)
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw());
  }
  float* f32() const;  // checks dtype == f32

  // A tensor of `shape` starting `element_offset` elements into this one's data,
  // sharing storage. Throws if it would reach outside this tensor.
  Tensor view(int64_t element_offset, const Shape& shape) const;
  // The same elements with another shape (element counts must match).
  Tensor reshape(const Shape& shape) const;
  bool shares_storage_with(const Tensor& other) const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // Copies to another device (or a fresh copy on the same one).
  Tensor to(Device device) const;
  Tensor clone() const { return to(device()); }
  // This tensor when it already lives on `device`, else a copy there.
  Tensor on(Device device) const { return this->device() == device ? *this : to(device); }
  // Copies every element of `src` (same dtype and numel) into this tensor, across devices too.
  void copy_from(const Tensor& src);
  // Host copy of the values as float (f32, f16 and bf16 are converted).
  std::vector<float> to_vector() const;

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  int64_t numel_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace tandem
