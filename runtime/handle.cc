#include "runtime/handle.h"

#include <algorithm>
#include <new>

#include "common/backoff.h"
#include "common/sanitizers.h"
#include "common/thread_cache.h"
#include "hvd/collectives.h"
#include "hvd/error.h"
#include "runtime/stop_state.h"

namespace hvd::detail {
namespace {

constexpr bool kPoolHandles = !kAddressSanitizer;  // ASan must see each handle freed

// Blocks of one cache line, recycled: each thread keeps up to kLocal of its own (no lock: a user
// thread that submits a step's tensors and drops their handles in the next takes and gives its
// blocks there; common/thread_cache.h), and trades them with a shared free list under a mutex
// kBatch at a time. Never destroyed: a Handle may outlive every other static. A thread's own
// blocks go back to the shared list when it ends.
// The first kRegionBlocks blocks are carved, in address order, from one region reserved at first
// use (512 KiB; its pages come as they are touched): the states of a step's tensors then sit side
// by side, 64 bytes apart, where the blocks of operator new were 528 bytes apart (a 512-byte block
// and malloc's header), and a walk over them (making, completing, waiting on, dropping a step's
// handles) reads one line per state and lets the hardware's prefetchers run ahead. Past the
// region, blocks come from operator new (64-byte aligned); the shared list keeps every block of the
// region, and others while it is shorter than kMaxBlocks.
class BlockPool {
 public:
  static constexpr std::size_t kBlock = 64;  // bytes; larger requests go to operator new
  static constexpr std::size_t kRegionBlocks = 8192;
  static constexpr std::size_t kMaxBlocks = 8192;
  static constexpr std::size_t kLocal = 128;
  static constexpr std::size_t kBatch = 64;

  BlockPool() { free_.reserve(kMaxBlocks + kRegionBlocks); }
  void* get(std::size_t bytes) {
    if (bytes > kBlock) return ::operator new(bytes);
    Local* mine = ThreadStash<Local>::get();
    if (!mine) return fresh_block();  // the thread is exiting: no blocks of its own
    Local& local = *mine;
    if (local.blocks.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      const std::size_t n = std::min(kBatch, free_.size());
      local.blocks.insert(local.blocks.end(), free_.end() - static_cast<std::ptrdiff_t>(n),
                          free_.end());
      free_.resize(free_.size() - n);
      carve_locked(local.blocks, kBatch - n);
    }
    if (local.blocks.empty()) return fresh_block();
    void* p = local.blocks.back();
    local.blocks.pop_back();
    return p;
  }
  void put(void* p, std::size_t bytes) {
    if (bytes > kBlock) {
      ::operator delete(p);
      return;
    }
    Local* mine = ThreadStash<Local>::get();
    if (!mine) {  // the thread is exiting: straight to the shared list
      std::unique_lock<std::mutex> lock(mu_);
      if (keeps_locked(p)) return free_.push_back(p);
      lock.unlock();
      ::operator delete (p, std::align_val_t{kBlock});
      return;
    }
    Local& local = *mine;
    if (local.blocks.size() >= kLocal) give_back(local.blocks, kBatch);
    local.blocks.push_back(p);
  }
  std::size_t size() {
    Local* mine = ThreadStash<Local>::get();
    std::lock_guard<std::mutex> lock(mu_);
    return free_.size() + (mine ? mine->blocks.size() : 0);
  }

 private:
  // The last n of `blocks` go to the shared list (those it keeps; the rest are freed).
  void give_back(std::vector<void*>& blocks, std::size_t n) {
    n = std::min(n, blocks.size());
    std::vector<void*> freed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (; n > 0; --n) {
        void* p = blocks.back();
        blocks.pop_back();
        if (keeps_locked(p))
          free_.push_back(p);
        else
          freed.push_back(p);
      }
    }
    for (void* p : freed) ::operator delete (p, std::align_val_t{kBlock});
  }
  bool in_region(const void* p) const {
    return region_ && reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(region_) <
                          kRegionBlocks * kBlock;
  }
  bool keeps_locked(const void* p) const { return in_region(p) || free_.size() < kMaxBlocks; }
  // Up to n blocks of the region not handed out yet, onto `blocks` so that they pop in address
  // order.
  void carve_locked(std::vector<void*>& blocks, std::size_t n) {
    if (!region_ && carved_ == 0) {
      region_ = static_cast<std::byte*>(
          ::operator new (kRegionBlocks* kBlock, std::align_val_t{kBlock}, std::nothrow));
      if (!region_) carved_ = kRegionBlocks;  // none (and no retry): operator new's blocks only
    }
    n = std::min(n, kRegionBlocks - carved_);
    for (std::size_t j = n; j-- > 0;) blocks.push_back(region_ + kBlock * (carved_ + j));
    carved_ += n;
  }
  static void* fresh_block() { return ::operator new (kBlock, std::align_val_t{kBlock}); }
  // A thread's own blocks (ThreadStash: null once the thread is exiting, e.g. for a Handle
  // dropped by another thread_local's destructor); they go back to the shared list at its exit.
  struct Local {
    std::vector<void*> blocks;
    ~Local();
  };

  std::mutex mu_;
  std::vector<void*> free_;
  std::byte* region_ = nullptr;  // kRegionBlocks blocks; the first carved_ of them handed out
  std::size_t carved_ = 0;
};

BlockPool& block_pool() {
  static BlockPool* pool = new BlockPool;
  return *pool;
}

BlockPool::Local::~Local() { block_pool().give_back(blocks, blocks.size()); }

template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(block_pool().get(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) { block_pool().put(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
};
static_assert(BlockPool::kBlock >= alignof(HandleState), "pool blocks are 64-byte aligned");
// The state and the shared_ptr's control block (a vtable pointer and two counts) in one block.
static_assert(sizeof(HandleState) + 16 <= BlockPool::kBlock, "a handle state outgrew its block");

}  // namespace

std::shared_ptr<HandleState> make_handle_state(int pending_tensors) {
  if constexpr (kPoolHandles)
    return std::allocate_shared<HandleState>(PoolAllocator<HandleState>(), pending_tensors);
  return std::make_shared<HandleState>(pending_tensors);
}

bool handle_pool_enabled() { return kPoolHandles; }
std::size_t handle_pool_size() { return block_pool().size(); }

void WakeSignal::notify() {
  notified.fetch_add(1, std::memory_order_release);
  { std::lock_guard<std::mutex> lock(mu); }
  cv.notify_one();
}

namespace {
// Raises `a` to `v`; returns whether this call did.
bool raise_to(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t seen = a.load(std::memory_order_relaxed);
  while (seen < v)
    if (a.compare_exchange_weak(seen, v, std::memory_order_release)) return true;
  return false;
}
}  // namespace

void WakeSignal::waiting_for(uint64_t popped_by) {
  if (popped_by == 0) return;
  if (pops.load(std::memory_order_acquire) < popped_by) {
    raise_to(waited_for, popped_by);
    notify();
    return;
  }
  // Taken (pending for the other ranks, or being performed): a waiter that already asked for the
  // same cycle woke the background thread for it (a thread that waits on one handle after another
  // while a batch runs would otherwise lock its mutex once per handle).
  if (raise_to(wanted_cycle, cycles.load(std::memory_order_acquire) + 1)) notify();
}

void WakeSignal::want_report_cycle() {
  if (raise_to(report_cycle, cycles.load(std::memory_order_acquire) + 1)) notify();
}

bool HandleState::claim() {
  int seen = phase.load(std::memory_order_relaxed);
  do {
    if ((seen & kPhase) != kRunning) return false;
  } while (!phase.compare_exchange_weak(seen, kFinishing | (seen & kWaiter),
                                        std::memory_order_acq_rel, std::memory_order_relaxed));
  return true;
}

void HandleState::publish() {
  if (phase.exchange(kDone, std::memory_order_acq_rel) & kWaiter) phase.notify_all();
}

void HandleState::wait_done() const {
  int p = phase.load(std::memory_order_acquire);
  while ((p & kPhase) != kDone) {
    // Marks this handle as waited on first, so that publish() (whose exchange the mark either
    // precedes, or finds the phase kDone) wakes this thread; then sleeps while the phase is the
    // marked value.
    if (!(p & kWaiter) && !phase.compare_exchange_weak(p, p | kWaiter, std::memory_order_acq_rel,
                                                       std::memory_order_acquire))
      continue;
    phase.wait(p | kWaiter, std::memory_order_acquire);
    p = phase.load(std::memory_order_acquire);
  }
}

void HandleState::complete_one() {
  if (pending.fetch_sub(1, std::memory_order_acq_rel) > 1) return;
  if (claim()) publish();  // (a failure may have come first)
}

void HandleState::expect_more(int n) { pending.fetch_add(n, std::memory_order_relaxed); }

void HandleState::fail(ErrorKind kind, const std::string& message) {
  if (!claim()) return;  // completed or failed already: the first outcome wins
  error_kind = kind;
  results().error = message;
  publish();
}

HandleState::Results& HandleState::results() const {
  Results* r = results_.load(std::memory_order_acquire);
  if (r) return *r;
  auto* made = new Results;
  if (results_.compare_exchange_strong(r, made, std::memory_order_acq_rel,
                                       std::memory_order_acquire))
    return *made;
  delete made;  // another thread's came first: r holds it
  return *r;
}

std::pair<ErrorKind, std::string> classify(const std::exception& e) {
  if (dynamic_cast<const InvalidArgumentError*>(&e)) return {ErrorKind::kInvalidArgument, e.what()};
  if (dynamic_cast<const CommunicationError*>(&e)) return {ErrorKind::kCommunication, e.what()};
  if (dynamic_cast<const InternalError*>(&e)) return {ErrorKind::kInternal, e.what()};
  return {ErrorKind::kGeneric, e.what()};
}

void throw_error(ErrorKind kind, const std::string& message) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      throw InvalidArgumentError(message);
    case ErrorKind::kCommunication:
      throw CommunicationError(message);
    case ErrorKind::kInternal:
      throw InternalError(message);
    default:
      throw Error(message);
  }
}

}  // namespace hvd::detail

namespace hvd {

namespace {
detail::HandleState& state_of(const std::shared_ptr<detail::HandleState>& s) {
  if (!s)
    throw InvalidArgumentError(
        "this hvd::Handle is empty: it was default-constructed, not returned by a collective.");
  return *s;
}
}  // namespace

bool Handle::ready() const { return state_of(state_).done(); }

void Handle::wait() {
  auto& s = state_of(state_);
  if (!s.done()) {
    if (detail::WakeSignal* signal = s.wake.get()) {
      // This thread blocks: if its requests still wait in the queue, the fusion window need not
      // (popped_by is set before the handle is returned).
      signal->waiting_for(s.popped_by);
      // Polls before it blocks (HVD_WAIT_POLL_US, where cores are spare): an operation that
      // completes meanwhile costs no futex wake-up of this thread (10-30 us on this project's VMs).
      if (const int64_t poll = signal->poll_us.load(std::memory_order_relaxed); poll > 0)
        poll_for(poll, [&] { return s.done(); });
    }
    s.wait_done();
  }
  if (s.stop_agreed) detail::note_stop_seen();  // hvd::stop_agreed() (runtime/stop_state.h)
  if (s.error_kind != detail::ErrorKind::kNone)
    detail::throw_error(s.error_kind, s.results().error);
}

Tensor& Handle::output() { return state_of(state_).results().output; }

const std::vector<int64_t>& Handle::received_splits() const {
  return state_of(state_).results().received_splits;
}

}  // namespace hvd
