#pragma once

// A non-owning reference to a callable, for a callback that is called many times while the call
// that receives it runs (e.g. once per tensor of a batch, under a lock). Unlike std::function it
// never allocates and calls through one plain function pointer. The callable must outlive the
// FunctionRef: pass a lambda straight to the function that takes it.
#include <memory>
#include <type_traits>
#include <utility>

namespace hvd {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                                    std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f) noexcept  // NOLINT: implicit, like std::function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace hvd
