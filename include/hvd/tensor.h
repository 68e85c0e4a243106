#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace hvd {

enum class DataType { kUInt8, kInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64 };
enum class ReduceOp { kAverage, kSum, kMin, kMax, kProduct };

struct Device {
  enum Kind { kCPU, kCUDA } kind = kCPU;
  int index = 0;

  static Device cpu() { return Device{}; }
  static Device cuda(int index) { return Device{kCUDA, index}; }
  bool operator==(const Device&) const = default;
};

// Bytes per element: 1, 1, 4, 8, 2, 2, 4, 8.
std::size_t dtype_size(DataType dtype);
// "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64".
const char* dtype_name(DataType dtype);
// "average", "sum", "min", "max", "product".
const char* reduce_op_name(ReduceOp op);
// "cpu" or "cuda:N".
std::string device_name(const Device& device);
// A tensor's dimensions. Up to kInline of them live inside the object, so a TensorRef is copied,
// passed by value and stored without a heap allocation (a trainer hands hvd one per gradient per
// step); a shape with more dimensions keeps them on the heap. Reads like a const std::vector:
// size(), empty(), data(), operator[], begin()/end(), front()/back(), == with a Shape or a vector,
// and it converts to std::vector<int64_t>.
class Shape {
 public:
  static constexpr std::size_t kInline = 6;
  using value_type = int64_t;
  using size_type = std::size_t;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.size()); }
  Shape(const std::vector<int64_t>& dims) { assign(dims.data(), dims.size()); }  // NOLINT: implicit
  Shape(const int64_t* dims, std::size_t n) { assign(dims, n); }
  Shape(const Shape& o) { copy(o); }
  Shape(Shape&& o) noexcept { take(o); }
  Shape& operator=(const Shape& o) {
    if (this != &o) {
      release();
      copy(o);
    }
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  ~Shape() { release(); }

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const int64_t* data() const { return size_ <= kInline ? inline_ : heap_; }
  int64_t* data() { return size_ <= kInline ? inline_ : heap_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  const int64_t& operator[](std::size_t i) const { return data()[i]; }
  int64_t& operator[](std::size_t i) { return data()[i]; }
  const int64_t& front() const { return data()[0]; }
  const int64_t& back() const { return data()[size_ - 1]; }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }
  operator std::vector<int64_t>() const { return vec(); }  // NOLINT: implicit

  friend bool operator==(const Shape& a, const Shape& b) { return equal(a, b.data(), b.size()); }
  friend bool operator==(const Shape& a, const std::vector<int64_t>& b) {
    return equal(a, b.data(), b.size());
  }

 private:
  // Into an empty (or released) shape.
  void assign(const int64_t* dims, std::size_t n) {
    if (n <= kInline) {
      if (n > 0) std::memcpy(inline_, dims, n * sizeof(int64_t));
    } else {
      heap_ = new int64_t[n];
      std::memcpy(heap_, dims, n * sizeof(int64_t));
    }
    size_ = n;
  }
  // Into an empty (or released) shape: inline dimensions as one fixed-size copy.
  void copy(const Shape& o) {
    if (o.size_ > kInline) return assign(o.heap_, o.size_);
    std::memcpy(inline_, o.inline_, sizeof inline_);
    size_ = o.size_;
  }
  // Moves o's dimensions (a fixed-size copy of the inline array, or its heap pointer) and leaves o
  // empty.
  void take(Shape& o) noexcept {
    std::memcpy(inline_, o.inline_, sizeof inline_);
    size_ = o.size_;
    o.size_ = 0;
  }
  void release() noexcept {
    if (size_ > kInline) delete[] heap_;
    size_ = 0;
  }
  static bool equal(const Shape& a, const int64_t* b, std::size_t n) {
    return a.size_ == n && (n == 0 || std::memcmp(a.data(), b, n * sizeof(int64_t)) == 0);
  }

  union {
    int64_t inline_[kInline] = {};  // up to kInline dimensions
    int64_t* heap_;                 // more: new[]'d, size_ of them
  };
  std::size_t size_ = 0;
};

// "[128,64]".
std::string shape_string(const std::vector<int64_t>& shape);
std::string shape_string(const Shape& shape);

// The DataType of an arithmetic C++ type (uint8_t, int8_t, int32_t, int64_t, float, double).
// 16-bit floats have no standard C++ type here: use TensorRef with kFloat16/kBFloat16 and
// uint16_t storage.
template <class T>
constexpr DataType dtype_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, uint8_t>)
    return DataType::kUInt8;
  else if constexpr (std::is_same_v<U, int8_t>)
    return DataType::kInt8;
  else if constexpr (std::is_same_v<U, int32_t>)
    return DataType::kInt32;
  else if constexpr (std::is_same_v<U, int64_t>)
    return DataType::kInt64;
  else if constexpr (std::is_same_v<U, float>)
    return DataType::kFloat32;
  else if constexpr (std::is_same_v<U, double>)
    return DataType::kFloat64;
  else
    static_assert(sizeof(U) == 0, "hvd: no DataType for this C++ type");
}

// A non-owning view of a tensor: a data pointer, a dtype, a shape, the device the data lives on
// and, for CUDA tensors, the stream the data is produced on (cudaStream_t as void*; null means the
// legacy default stream). The caller keeps the memory alive and unchanged until the operation's
// Handle is complete. A scalar has shape {}; a tensor with a zero dimension has no elements.
class TensorRef {
 public:
  TensorRef() = default;
  TensorRef(void* data, DataType dtype, Shape shape, Device device = {}, void* stream = nullptr)
      : data_(data), dtype_(dtype), shape_(std::move(shape)), device_(device), stream_(stream) {}
  TensorRef(const void* data, DataType dtype, Shape shape, Device device = {},
            void* stream = nullptr)
      : TensorRef(const_cast<void*>(data), dtype, std::move(shape), device, stream) {}
  // No data: TensorRef(nullptr, dtype, {0}) (a null pointer is valid only without elements).
  TensorRef(std::nullptr_t, DataType dtype, Shape shape, Device device = {}, void* stream = nullptr)
      : TensorRef(static_cast<void*>(nullptr), dtype, std::move(shape), device, stream) {}

  void* data() const { return data_; }
  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  Device device() const { return device_; }
  void* stream() const { return stream_; }
  int64_t num_elements() const;
  std::size_t size_bytes() const {
    return static_cast<std::size_t>(num_elements()) * dtype_size(dtype_);
  }

 private:
  void* data_ = nullptr;
  DataType dtype_ = DataType::kFloat32;
  Shape shape_;
  Device device_;
  void* stream_ = nullptr;
};

// An owning, contiguous CPU tensor: the result of allgather, alltoall and reducescatter.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DataType dtype, std::vector<int64_t> shape);

  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  DataType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  Device device() const { return Device{}; }
  int64_t num_elements() const;
  std::size_t size_bytes() const { return bytes_.size(); }
  TensorRef ref() { return TensorRef(data(), dtype_, shape_); }

  // A copy of the elements; T must match dtype() in size.
  template <class T>
  std::vector<T> to_vector() const {
    std::vector<T> out(bytes_.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), bytes_.data(), out.size() * sizeof(T));
    return out;
  }

 private:
  DataType dtype_ = DataType::kFloat32;
  std::vector<int64_t> shape_;
  std::vector<std::byte> bytes_;
};

}  // namespace hvd
