#pragma once

// The per-thread half of a thread-caching allocator: each thread's stash of recycled objects in
// front of a shared list, which the allocator keeps under a lock of its own. The pool of handle
// states (runtime/handle.cc) and the spare names and shapes (runtime/spares.cc) take and give in
// their thread's stash without a lock, and trade with their shared list in batches.
//
// ThreadStash<Stash>::get() returns the calling thread's Stash, made on first use and destroyed
// (its destructor gives back what it holds) when the thread exits; null from then on, so that an
// allocation or a release made while the thread, or the process, exits (another thread_local's
// destructor, a static object's at exit) goes to the shared list directly. Each Stash type has
// a stash of its own per thread.
//
// The thread-local variables are a pointer and a flag: trivially destructible, so still readable
// while the thread exits, and in the initial-exec model: a load relative to the thread pointer,
// where a shared library's default model calls __tls_get_addr on every access (~40 instructions;
// it doubled the cost of a spare's take), and a thread_local object with a destructor adds a guard.
// 9 bytes per Stash type, well within the static TLS space glibc keeps for libraries opened with
// dlopen.

namespace hvd {

template <class Stash>
class ThreadStash {
 public:
  static Stash* get() {
    if (tls_stash) return tls_stash;
    if (tls_gone) return nullptr;
    static thread_local Owner owner;  // its destructor frees the stash at the thread's exit
    tls_stash = new Stash;
    return tls_stash;
  }

 private:
  struct Owner {
    ~Owner() {
      Stash* s = tls_stash;
      tls_stash = nullptr;  // first: what the stash's destructor gives back goes to the shared list
      tls_gone = true;
      delete s;
    }
  };
  static thread_local Stash* tls_stash __attribute__((tls_model("initial-exec")));
  static thread_local bool tls_gone __attribute__((tls_model("initial-exec")));
};

template <class Stash>
thread_local Stash* ThreadStash<Stash>::tls_stash = nullptr;
template <class Stash>
thread_local bool ThreadStash<Stash>::tls_gone = false;

}  // namespace hvd
