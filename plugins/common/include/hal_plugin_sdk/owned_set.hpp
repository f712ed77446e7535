// The objects a plugin device owns on the application's behalf (streams,
// events, modules), keyed by the raw pointer the table hands out, so that
// device_close can finish and free whatever the application left behind:
// OwnedSet, one kind of object, and DeviceObjects, a device's three.
#ifndef HAL_PLUGIN_SDK_OWNED_SET_HPP_
#define HAL_PLUGIN_SDK_OWNED_SET_HPP_

#include <memory>
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

// The streams, events and modules of one device, each owned by a
// std::unique_ptr whose destructor finishes the object (a stream's waits for
// its work). A Device derives from it and gets the add_* of its create
// methods and the remove_* the table's destroy entries call (entries.hpp).
template <class Stream, class Event, class Module>
class DeviceObjects {
 public:
  Stream* add_stream(std::unique_ptr<Stream> stream) { return streams_.add(std::move(stream)); }
  void remove_stream(Stream* stream) { streams_.take(stream); }
  Event* add_event(std::unique_ptr<Event> event) { return events_.add(std::move(event)); }
  void remove_event(Event* event) { events_.take(event); }
  Module* add_module(std::unique_ptr<Module> module) { return modules_.add(std::move(module)); }
  void remove_module(Module* module) { modules_.take(module); }

  // Finishes and frees every stream (first: their work may use the modules),
  // then the events and the modules.
  void release_all() {
    streams_.take_all();
    events_.take_all();
    modules_.take_all();
  }
  // Calls |visit(const std::unique_ptr<Stream>&)| on every stream, under the
  // set's lock (OwnedSet::for_each).
  template <class Visit>
  void for_each_stream(Visit&& visit) const {
    streams_.for_each(std::forward<Visit>(visit));
  }

 protected:
  ~DeviceObjects() = default;

 private:
  OwnedSet<Stream, std::unique_ptr<Stream>> streams_;
  OwnedSet<Event, std::unique_ptr<Event>> events_;
  OwnedSet<Module, std::unique_ptr<Module>> modules_;
};

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_OWNED_SET_HPP_
