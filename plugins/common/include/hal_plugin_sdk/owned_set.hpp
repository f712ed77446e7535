// The objects a plugin device owns on the application's behalf (streams,
// events, modules), keyed by the raw pointer the table hands out, so that
// device_close can finish and free whatever the application left behind
// (objects.hpp keeps a device's three kinds).
#ifndef HAL_PLUGIN_SDK_OWNED_SET_HPP_
#define HAL_PLUGIN_SDK_OWNED_SET_HPP_

#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hal::plugin {

// |Owner| is std::unique_ptr<T> or std::shared_ptr<T>. Thread-safe.
template <class T, class Owner>
class OwnedSet {
 public:
  // Takes ownership and returns the raw pointer the table gives out.
  T* add(Owner owner) {
    T* raw = owner.get();
    std::lock_guard lock(mutex_);
    items_.emplace(raw, std::move(owner));
    return raw;
  }

  // Gives ownership back (empty when |raw| is not here). The caller finishes
  // and frees the object outside the set's lock.
  Owner take(T* raw) {
    std::lock_guard lock(mutex_);
    const auto it = items_.find(raw);
    if (it == items_.end()) return Owner{};
    Owner owner = std::move(it->second);
    items_.erase(it);
    return owner;
  }

  std::vector<Owner> take_all() {
    std::vector<Owner> all;
    std::lock_guard lock(mutex_);
    all.reserve(items_.size());
    for (auto& [raw, owner] : items_) all.push_back(std::move(owner));
    items_.clear();
    return all;
  }

  // Calls |visit(const Owner&)| on every object while holding the lock, so
  // none is taken meanwhile; keep |visit| short.
  template <class Visit>
  void for_each(Visit&& visit) const {
    std::lock_guard lock(mutex_);
    for (const auto& [raw, owner] : items_) visit(owner);
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<T*, Owner> items_;
};

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_OWNED_SET_HPP_
