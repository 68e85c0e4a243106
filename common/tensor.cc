// The public value types of hvd/tensor.h and hvd/version.h.
#include <sstream>

#include "common/dtype.h"
#include "hvd/error.h"
#include "hvd/tensor.h"
#include "hvd/version.h"

namespace hvd {

const char* version_string() { return HVD_VERSION_STRING; }

std::size_t dtype_size(DataType dtype) { return dtypes::size(dtype); }

const char* dtype_name(DataType dtype) { return dtypes::name(dtype); }

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:
      return "average";
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "unknown";
}

std::string device_name(const Device& device) {
  return device.kind == Device::kCPU ? "cpu" : "cuda:" + std::to_string(device.index);
}

static std::string dims_string(const int64_t* dims, size_t n) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < n; ++i) s << (i ? "," : "") << dims[i];
  s << "]";
  return s.str();
}

std::string shape_string(const std::vector<int64_t>& shape) {
  return dims_string(shape.data(), shape.size());
}
std::string shape_string(const Shape& shape) { return dims_string(shape.data(), shape.size()); }

template <class Dims>
static int64_t product(const Dims& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorRef::num_elements() const { return product(shape_); }

Tensor::Tensor(DataType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t d : shape_)
    if (d < 0)
      throw InvalidArgumentError("Tensor shape " + shape_string(shape_) +
                                 " has a negative dimension.");
  bytes_.resize(static_cast<size_t>(product(shape_)) * dtype_size(dtype_));
}

int64_t Tensor::num_elements() const { return product(shape_); }

}  // namespace hvd
