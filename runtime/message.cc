#include "runtime/message.h"

#include <concepts>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "hvd/error.h"

namespace hvd {
namespace {

// The wire format: fixed-size fields as their bytes (host order; every rank of a job runs the same
// build), strings and dimension lists as a uint64_t count followed by the bytes or the int64_t
// values, lists of strings, of shapes, of requests and of responses as a uint64_t count followed by
// the items. Each message's fields are listed once (fields() below) and walked by the Writer to
// serialise and by the Reader to parse, so the two cannot drift apart.

class Writer {
 public:
  template <class T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  // v travels as a Wire (an enum or int that is not of the wire type in memory).
  template <class Wire, class T>
  void as(const T& v) {
    pod(static_cast<Wire>(v));
  }
  void device_kind(const Device::Kind& kind) { as<int32_t>(kind); }
  void flag(const bool& b) { pod<uint8_t>(b ? 1 : 0); }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    out_.append(s);
  }
  void dims(const std::vector<int64_t>& v) {
    pod<uint64_t>(v.size());
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  }
  // A count, then each item through item(Writer&, const T&).
  template <class T, class Item>
  void list(const std::vector<T>& v, const char* /*what*/, Item item) {
    pod<uint64_t>(v.size());
    for (const T& x : v) item(*this, x);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const char* data, size_t size) : p_(data), end_(data + size) {}
  template <class T>
  void pod(T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
  }
  template <class Wire, class T>
  void as(T& v) {
    Wire w;
    pod(w);
    v = static_cast<T>(w);
  }
  void device_kind(Device::Kind& kind) {
    int32_t v;
    pod(v);
    if (v != Device::kCPU && v != Device::kCUDA)
      throw InternalError("corrupt negotiation message (device kind " + std::to_string(v) +
                          "); please report this");
    kind = static_cast<Device::Kind>(v);
  }
  // A bool travels as one byte, 0 or 1; anything else is corruption (and would not serialise back
  // to the same byte).
  void flag(bool& b) {
    uint8_t v;
    pod(v);
    if (v > 1)
      throw InternalError("corrupt negotiation message (flag " + std::to_string(v) +
                          "); please report this");
    b = v == 1;
  }
  void str(std::string& s) {
    uint64_t n;
    pod(n);
    need(n);
    s.assign(p_, n);
    p_ += n;
  }
  void dims(std::vector<int64_t>& v) {
    uint64_t n;
    pod(n);
    if (n > static_cast<uint64_t>(end_ - p_) / sizeof(int64_t)) fail();
    v.resize(n);
    if (n) std::memcpy(v.data(), p_, n * sizeof(int64_t));
    p_ += n * sizeof(int64_t);
  }
  // A count, then each item through item(Reader&, T&). `what` names the count in the error. Every
  // item takes at least 8 bytes of what follows (a name's or a shape's length; a message's several
  // fields), so a larger count is corrupt and is refused before anything is allocated for it (the
  // bound used to be the whole message's size: a corrupt count could allocate ~200 bytes of
  // Requests per byte of message before the truncation was found).
  template <class T, class Item>
  void list(std::vector<T>& v, const char* what, Item item) {
    uint64_t n;
    pod(n);
    if (n > static_cast<uint64_t>(end_ - p_) / 8)
      throw InternalError(std::string("corrupt negotiation message (") + what +
                          "); please report this");
    v.resize(n);
    for (T& x : v) item(*this, x);
  }

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

template <class R, class M>
concept MessageRef = std::same_as<std::remove_const_t<R>, M>;

// A Request's fields in wire order (R: Request, or const Request when writing).
template <class Archive, class R>
requires MessageRef<R, Request>
void fields(Archive& ar, R& r) {
  ar.pod(r.rank);
  ar.pod(r.type);
  ar.pod(r.dtype);
  ar.pod(r.reduce_op);
  ar.device_kind(r.device.kind);
  ar.template as<int32_t>(r.device.index);
  ar.pod(r.root);
  ar.pod(r.peer);
  ar.pod(r.prescale);
  ar.pod(r.postscale);
  ar.flag(r.deterministic);
  ar.str(r.name);
  ar.dims(r.shape);
  ar.str(r.group);
  ar.pod(r.group_size);
  ar.str(r.error);
  ar.pod(r.waited_seconds);
}

// A Response's fields in wire order (R: Response, or const Response when writing).
template <class Archive, class R>
requires MessageRef<R, Response>
void fields(Archive& ar, R& r) {
  ar.pod(r.type);
  ar.list(r.names, "name count", [](Archive& a, auto& name) { a.str(name); });
  ar.list(r.shapes, "shape count", [](Archive& a, auto& shape) { a.dims(shape); });
  ar.dims(r.first_dims);
  ar.pod(r.dtype);
  ar.pod(r.reduce_op);
  ar.device_kind(r.device_kind);
  ar.pod(r.root);
  ar.pod(r.peer);
  ar.pod(r.prescale);
  ar.pod(r.postscale);
  ar.flag(r.deterministic);
  ar.pod(r.contributors);
  ar.pod(r.last_joined_rank);
  ar.str(r.group);
  ar.str(r.error);
}

constexpr auto kMessage = [](auto& ar, auto& message) { fields(ar, message); };

}  // namespace

const char* request_type_name(RequestType t) {
  const OpKindInfo* k = op_kind(t);
  return k ? k->name : "unknown";
}

const char* response_type_name(ResponseType t) {
  if (t == ResponseType::kError) return "error";
  return request_type_name(static_cast<RequestType>(t));
}

std::string serialize_requests(const std::vector<Request>& requests) {
  Writer w;
  w.list(requests, "request count", kMessage);
  return w.take();
}

std::vector<Request> parse_requests(const char* data, size_t size) {
  Reader rd(data, size);
  std::vector<Request> out;
  rd.list(out, "request count", kMessage);
  return out;
}

void Response::append_members(Response& r) {
  lane_bytes += r.lane_bytes;
  if (!lanes.empty() || !r.lanes.empty()) {
    lanes.resize(names.size(), kNoLane);
    if (r.lanes.empty())
      lanes.insert(lanes.end(), r.names.size(), kNoLane);
    else
      lanes.insert(lanes.end(), r.lanes.begin(), r.lanes.end());
  }
  names.insert(names.end(), std::make_move_iterator(r.names.begin()),
               std::make_move_iterator(r.names.end()));
  shapes.insert(shapes.end(), std::make_move_iterator(r.shapes.begin()),
                std::make_move_iterator(r.shapes.end()));
}

void Response::reset() {
  type = ResponseType::kAllreduce;
  names.clear();
  shapes.clear();
  first_dims.clear();
  dtype = DataType::kFloat32;
  reduce_op = ReduceOp::kSum;
  device_kind = Device::kCPU;
  root = -1;
  peer = -1;
  prescale = 1.0;
  postscale = 1.0;
  deterministic = false;
  contributors = 0;
  last_joined_rank = -1;
  group.clear();
  error.clear();
  lanes.clear();
  lane_bytes = 0;
}

std::string serialize_responses(const std::vector<Response>& responses) {
  Writer w;
  w.list(responses, "response count", kMessage);
  return w.take();
}

std::vector<Response> parse_responses(const char* data, size_t size) {
  Reader rd(data, size);
  std::vector<Response> out;
  rd.list(out, "response count", kMessage);
  return out;
}

}  // namespace hvd
