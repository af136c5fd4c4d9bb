// FunctionRef: a non-owning reference to a callable, the callback type of the
// message path (the batch-header codec's LocateBuffer and LookupSegment). Not
// installed.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace ferry::flow::wire {

// A non-owning reference to a callable, for callbacks on the message path: it
// neither allocates nor copies the callable, so it must not outlive it (pass
// a lambda directly as the argument).
template <typename Signature>
class FunctionRef;

template <typename Return, typename... Args>
class FunctionRef<Return(Args...)> {
 public:
  template <typename Callable,
            typename = std::enable_if_t<
                !std::is_same_v<std::decay_t<Callable>, FunctionRef> &&
                std::is_invocable_r_v<Return, std::remove_reference_t<Callable>&, Args...>>>
  FunctionRef(
      Callable&& callable) noexcept  // NOLINT(google-explicit-constructor): lambdas pass as is
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(callable)))),
        invoke_([](void* object, Args... args) -> Return {
          return (*static_cast<std::remove_reference_t<Callable>*>(object))(
              std::forward<Args>(args)...);
        }) {}

  Return operator()(Args... args) const { return invoke_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  Return (*invoke_)(void*, Args...);
};

}  // namespace ferry::flow::wire
