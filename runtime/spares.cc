#include "runtime/spares.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "common/thread_cache.h"

namespace hvd::detail {
namespace {

struct Pool {
  std::mutex mu;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
};

// Never destroyed: a user thread may submit (and a background thread give) during static
// destruction.
Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

// The calling thread's spares, taken from the pool kRefill at a time, freed with the thread
// (common/thread_cache.h): null once the thread is exiting, since a program may submit from a
// destructor that runs after the stash is gone (a static object's at exit, another
// thread_local's); then it goes to the pool directly.
struct Stash {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
};
Stash* my_stash() { return ThreadStash<Stash>::get(); }

// Moves up to n spares from the pool to *mine, under the pool's lock; returns whether any came.
template <class T>
bool refill(std::vector<T>* mine, std::vector<T> Pool::*shared, std::size_t n) {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  std::vector<T>& from = p.*shared;
  n = std::min(from.size(), n);
  for (std::size_t i = 0; i < n; ++i) {
    mine->push_back(std::move(from.back()));
    from.pop_back();
  }
  return n > 0;
}

// One spare into *out: from this thread's stash (refilled kRefill at a time), or straight from
// the pool once the stash is gone.
template <class T>
bool take(std::vector<T> Stash::*kind, std::vector<T> Pool::*shared, T* out) {
  Stash* s = my_stash();
  if (!s) {
    std::vector<T> one;
    if (!refill(&one, shared, 1)) return false;
    *out = std::move(one.back());
    return true;
  }
  std::vector<T>* mine = &(s->*kind);
  if (mine->empty() && !refill(mine, shared, Spares::kRefill)) return false;
  *out = std::move(mine->back());
  mine->pop_back();
  return true;
}

}  // namespace

void Spares::take_name(std::string_view name, std::string* out) {
  if (out->capacity() < name.size()) take(&Stash::names, &Pool::names, out);
  out->assign(name);
}

void Spares::take_shape(const Shape& shape, std::vector<int64_t>* out) {
  if (out->capacity() < shape.size()) take(&Stash::shapes, &Pool::shapes, out);
  out->assign(shape.begin(), shape.end());
}

namespace {

bool keep(const std::string& s) {
  // Inline (short) strings have no buffer to keep.
  return s.capacity() > std::string().capacity() && s.capacity() <= Spares::kMaxNameBytes;
}
bool keep(const std::vector<int64_t>& v) {
  return v.capacity() > 0 && v.capacity() <= Spares::kMaxDims;
}

// Moves the items from *i on that are worth keeping into *to while it holds fewer than `limit`;
// *i ends at the first item not looked at.
template <class T>
void move_kept(std::vector<T>* items, std::size_t* i, std::vector<T>* to, std::size_t limit) {
  for (; *i < items->size() && to->size() < limit; ++*i) {
    T& x = (*items)[*i];
    if (keep(x)) {
      x.clear();
      to->push_back(std::move(x));
    }
  }
}

// Into the calling thread's stash (if it still has one) up to 2 * kRefill, the rest into the pool
// (under its lock, taken once).
template <class T>
void give_all(std::vector<T>* items, std::vector<T> Stash::*kind, std::vector<T> Pool::*shared) {
  std::size_t i = 0;
  if (Stash* s = my_stash()) move_kept(items, &i, &(s->*kind), 2 * Spares::kRefill);
  if (i == items->size()) return;
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  move_kept(items, &i, &(p.*shared), Spares::kMax);
}

}  // namespace

void Spares::give(std::vector<std::string>* names, std::vector<std::vector<int64_t>>* shapes) {
  if (names) give_all(names, &Stash::names, &Pool::names);
  if (shapes) give_all(shapes, &Stash::shapes, &Pool::shapes);
}

std::size_t Spares::pooled_names() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.names.size();
}

std::size_t Spares::pooled_shapes() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.shapes.size();
}

}  // namespace hvd::detail
