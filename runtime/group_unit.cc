#include "runtime/group_unit.h"

#include <charconv>
#include <map>

#include "hvd/error.h"
#include "runtime/spares.h"

namespace hvd::group_unit {
namespace {

// Per member: dtype, device kind, dimension count, dimensions. (Not the device index: a GPU's
// index differs from rank to rank, and the cached unit response is the same on every rank.)
constexpr size_t kHead = 3;

void append_member(DataType dtype, Device::Kind kind, const Shape& shape,
                   std::vector<int64_t>* out) {
  out->push_back(static_cast<int64_t>(dtype));
  out->push_back(static_cast<int64_t>(kind));
  out->push_back(static_cast<int64_t>(shape.size()));
  out->insert(out->end(), shape.begin(), shape.end());
}

// "<group>.<i>" -> i; -1 when `name` is not a member name of `group`.
int64_t member_index(const std::string& name, const std::string& group) {
  if (name.size() <= group.size() + 1 || name.compare(0, group.size(), group) != 0 ||
      name[group.size()] != '.')
    return -1;
  const char* first = name.data() + group.size() + 1;
  const char* last = name.data() + name.size();
  if (*first == '0' && last - first > 1) return -1;  // one spelling per index
  int64_t i = -1;
  auto [end, ec] = std::from_chars(first, last, i);
  return ec == std::errc() && end == last ? i : -1;
}

}  // namespace

void signature(const std::vector<TensorRef>& members, std::vector<int64_t>* out) {
  out->clear();
  size_t n = 0;
  for (const auto& t : members) n += kHead + t.shape().size();
  out->reserve(n);
  for (const auto& t : members) append_member(t.dtype(), t.device().kind, t.shape(), out);
}

void make(int32_t rank, const std::string& group, ReduceOp op, bool deterministic,
          std::vector<TensorRef> in, std::vector<TensorRef> out,
          std::shared_ptr<detail::HandleState> handle, Request* request, TensorTableEntry* entry) {
  Request& q = *request;
  q.rank = rank;
  q.type = RequestType::kAllreduce;
  detail::Spares::take_name(group, &q.name);
  q.dtype = in.at(0).dtype();
  q.device = in[0].device();
  signature(in, &q.shape);
  q.reduce_op = op;
  q.deterministic = deterministic;
  q.group = group;
  q.group_size = static_cast<int32_t>(in.size());
  TensorTableEntry& e = *entry;
  detail::Spares::take_name(group, &e.name);
  e.type = RequestType::kAllreduce;
  e.members = std::make_unique<TensorTableEntry::Members>();
  e.members->in = std::move(in);
  e.members->out = std::move(out);
  e.handle = std::move(handle);
}

void member_name(const std::string& group, size_t i, std::string* out) {
  char digits[20];
  const auto end = std::to_chars(digits, digits + sizeof digits, i).ptr;
  out->assign(group);
  out->push_back('.');
  out->append(digits, end);
}

void expand(const Request& unit, std::vector<Request>* out) {
  const std::vector<int64_t>& sig = unit.shape;
  size_t at = 0;
  for (int32_t i = 0; i < unit.group_size; ++i) {
    if (at + kHead > sig.size() || sig[at + 2] < 0 ||
        static_cast<size_t>(sig[at + 2]) > sig.size() - at - kHead)
      throw InternalError("grouped_allreduce of '" + unit.name +
                          "': a malformed member signature; please report this bug.");
    Request m;
    m.rank = unit.rank;
    m.type = RequestType::kAllreduce;
    m.dtype = static_cast<DataType>(sig[at]);
    m.device.kind = static_cast<Device::Kind>(sig[at + 1]);
    // The index is not in the signature (it differs between ranks); the unit's is its first
    // member's. A request's index only shows in messages (rank 0 compares device kinds), and every
    // GPU tensor of a rank is on that rank's one device (api.cc's checks).
    m.device.index = unit.device.index;
    m.reduce_op = unit.reduce_op;
    m.prescale = unit.prescale;
    m.postscale = unit.postscale;
    m.deterministic = unit.deterministic;
    member_name(unit.group, static_cast<size_t>(i), &m.name);
    const size_t dims = static_cast<size_t>(sig[at + 2]);
    m.shape.assign(sig.begin() + static_cast<std::ptrdiff_t>(at + kHead),
                   sig.begin() + static_cast<std::ptrdiff_t>(at + kHead + dims));
    at += kHead + dims;
    m.group = unit.group;
    m.group_size = unit.group_size;
    m.submitted = unit.submitted;
    out->push_back(std::move(m));
  }
  if (at != sig.size())
    throw InternalError("grouped_allreduce of '" + unit.name +
                        "': a member signature longer than its members; please report this bug.");
}

std::vector<Response> units_of(const std::vector<Response>& responses, int size) {
  // Each group's members by index, in order of the group's first member.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const Response*>> members;
  std::map<std::string, bool> usable;
  for (const auto& r : responses) {
    if (r.group.empty()) continue;
    auto [it, fresh] = members.try_emplace(r.group);
    if (fresh) {
      order.push_back(r.group);
      usable[r.group] = true;
    }
    const int64_t i = member_index(r.names.size() == 1 ? r.names[0] : std::string(), r.group);
    const bool ok = i >= 0 && r.type == ResponseType::kAllreduce && r.error.empty() &&
                    r.contributors == size && r.shapes.size() == 1;
    if (!ok) {
      usable[r.group] = false;
      continue;
    }
    auto& v = it->second;
    if (static_cast<size_t>(i) >= v.size()) v.resize(static_cast<size_t>(i) + 1, nullptr);
    if (v[static_cast<size_t>(i)]) usable[r.group] = false;  // an index twice
    v[static_cast<size_t>(i)] = &r;
  }
  std::vector<Response> units;
  for (const auto& g : order) {
    const auto& v = members[g];
    bool ok = usable[g] && !v.empty();
    for (const Response* m : v)
      ok = ok && m && m->reduce_op == v[0]->reduce_op && m->prescale == v[0]->prescale &&
           m->postscale == v[0]->postscale && m->deterministic == v[0]->deterministic;
    if (!ok) continue;
    Response u;
    u.type = ResponseType::kAllreduce;
    u.names = {g};
    u.shapes.emplace_back();
    for (const Response* m : v) append_member(m->dtype, m->device_kind, m->shapes[0], &u.shapes[0]);
    u.dtype = v[0]->dtype;
    u.reduce_op = v[0]->reduce_op;
    u.device_kind = v[0]->device_kind;
    u.prescale = v[0]->prescale;
    u.postscale = v[0]->postscale;
    u.deterministic = v[0]->deterministic;
    u.contributors = size;
    u.group = g;
    units.push_back(std::move(u));
  }
  return units;
}

bool in_unit(const Response& r, const std::vector<Response>& units) {
  if (r.group.empty()) return false;
  for (const auto& u : units)
    if (u.group == r.group) return true;
  return false;
}

}  // namespace hvd::group_unit
