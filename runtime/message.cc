#include "runtime/message.h"

#include <cstring>
#include <type_traits>

#include "hvd/error.h"

namespace hvd {
namespace {

class Writer {
 public:
  template <class T>
  void pod(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    out_.append(s);
  }
  void dims(const std::vector<int64_t>& v) {
    pod<uint64_t>(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const char* data, size_t size) : p_(data), end_(data + size) {}
  template <class T>
  T pod() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string str() {
    uint64_t n = pod<uint64_t>();
    need(n);
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  std::vector<int64_t> dims() {
    uint64_t n = pod<uint64_t>();
    if (n > static_cast<uint64_t>(end_ - p_) / sizeof(int64_t)) fail();
    std::vector<int64_t> v(n);
    if (n) std::memcpy(v.data(), p_, n * sizeof(int64_t));
    p_ += n * sizeof(int64_t);
    return v;
  }
  bool done() const { return p_ == end_; }

 private:
  void need(uint64_t n) {
    if (n > static_cast<uint64_t>(end_ - p_)) fail();
  }
  [[noreturn]] void fail() {
    throw InternalError("corrupt negotiation message (truncated); please report this");
  }
  const char* p_;
  const char* end_;
};

Device::Kind device_kind(int32_t v) {
  if (v != Device::kCPU && v != Device::kCUDA)
    throw InternalError("corrupt negotiation message (device kind " + std::to_string(v) +
                        "); please report this");
  return static_cast<Device::Kind>(v);
}

}  // namespace

const char* request_type_name(RequestType t) {
  switch (t) {
    case RequestType::kAllreduce:
      return "allreduce";
    case RequestType::kAllgather:
      return "allgather";
    case RequestType::kBroadcast:
      return "broadcast";
    case RequestType::kAlltoall:
      return "alltoall";
    case RequestType::kReducescatter:
      return "reducescatter";
    case RequestType::kBarrier:
      return "barrier";
    case RequestType::kJoin:
      return "join";
  }
  return "unknown";
}

const char* response_type_name(ResponseType t) {
  if (t == ResponseType::kError) return "error";
  return request_type_name(static_cast<RequestType>(t));
}

std::string serialize_requests(const std::vector<Request>& requests) {
  Writer w;
  w.pod<uint64_t>(requests.size());
  for (const auto& r : requests) {
    w.pod(r.rank);
    w.pod(r.type);
    w.pod(r.dtype);
    w.pod(r.reduce_op);
    w.pod(static_cast<int32_t>(r.device.kind));
    w.pod<int32_t>(r.device.index);
    w.pod(r.root);
    w.pod(r.prescale);
    w.pod(r.postscale);
    w.str(r.name);
    w.dims(r.shape);
    w.str(r.group);
    w.pod(r.group_size);
    w.str(r.error);
    w.pod(r.waited_seconds);
  }
  return w.take();
}

std::vector<Request> parse_requests(const char* data, size_t size) {
  Reader rd(data, size);
  uint64_t n = rd.pod<uint64_t>();
  if (n > size)
    throw InternalError("corrupt negotiation message (request count); please report this");
  std::vector<Request> out(n);
  for (auto& r : out) {
    r.rank = rd.pod<int32_t>();
    r.type = rd.pod<RequestType>();
    r.dtype = rd.pod<DataType>();
    r.reduce_op = rd.pod<ReduceOp>();
    r.device.kind = device_kind(rd.pod<int32_t>());
    r.device.index = rd.pod<int32_t>();
    r.root = rd.pod<int32_t>();
    r.prescale = rd.pod<double>();
    r.postscale = rd.pod<double>();
    r.name = rd.str();
    r.shape = rd.dims();
    r.group = rd.str();
    r.group_size = rd.pod<int32_t>();
    r.error = rd.str();
    r.waited_seconds = rd.pod<double>();
  }
  return out;
}

std::string serialize_responses(const std::vector<Response>& responses) {
  Writer w;
  w.pod<uint64_t>(responses.size());
  for (const auto& r : responses) {
    w.pod(r.type);
    w.pod<uint64_t>(r.names.size());
    for (const auto& n : r.names) w.str(n);
    w.pod<uint64_t>(r.shapes.size());
    for (const auto& s : r.shapes) w.dims(s);
    w.dims(r.first_dims);
    w.pod(r.dtype);
    w.pod(r.reduce_op);
    w.pod(static_cast<int32_t>(r.device_kind));
    w.pod(r.root);
    w.pod(r.prescale);
    w.pod(r.postscale);
    w.pod(r.contributors);
    w.pod(r.last_joined_rank);
    w.str(r.group);
    w.str(r.error);
  }
  return w.take();
}

std::vector<Response> parse_responses(const char* data, size_t size) {
  Reader rd(data, size);
  uint64_t n = rd.pod<uint64_t>();
  if (n > size)
    throw InternalError("corrupt negotiation message (response count); please report this");
  std::vector<Response> out(n);
  for (auto& r : out) {
    r.type = rd.pod<ResponseType>();
    uint64_t names = rd.pod<uint64_t>();
    if (names > size)
      throw InternalError("corrupt negotiation message (name count); please report this");
    r.names.resize(names);
    for (auto& s : r.names) s = rd.str();
    uint64_t shapes = rd.pod<uint64_t>();
    if (shapes > size)
      throw InternalError("corrupt negotiation message (shape count); please report this");
    r.shapes.resize(shapes);
    for (auto& s : r.shapes) s = rd.dims();
    r.first_dims = rd.dims();
    r.dtype = rd.pod<DataType>();
    r.reduce_op = rd.pod<ReduceOp>();
    r.device_kind = device_kind(rd.pod<int32_t>());
    r.root = rd.pod<int32_t>();
    r.prescale = rd.pod<double>();
    r.postscale = rd.pod<double>();
    r.contributors = rd.pod<int32_t>();
    r.last_joined_rank = rd.pod<int32_t>();
    r.group = rd.str();
    r.error = rd.str();
  }
  return out;
}

}  // namespace hvd
