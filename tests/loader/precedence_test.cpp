// SPEC §4.1 "Which error is reported": when an input breaks several rules the
// call reports one, and which one follows a single order. The table below
// lists entry points by the kinds of their arguments; every combination of
// faults is tried, and the result must be the one the order predicts:
//   not initialised > handles left to right (NULL, foreign or wrong type:
//   INVALID_HANDLE; destroyed: DESTROYED_HANDLE) > NULL required pointers >
//   argument values.
#include "test_support.hpp"

#include <functional>

using namespace loader_test;

namespace {

enum class Kind { kDevice, kStream, kEvent };
enum class Fault { kNone, kNull, kForeign, kWrongKind, kDestroyed, kNullOut, kBadValue };

struct Parameter {
  enum { kHandle, kOut, kValue } role;
  Kind kind = Kind::kDevice;             // for handles
  hal_result_t bad_value = HAL_SUCCESS;  // for values: the code a bad one gives
};

Parameter handle(Kind kind) {
  return {Parameter::kHandle, kind, HAL_SUCCESS};
}
Parameter out() {
  return {Parameter::kOut, Kind::kDevice, HAL_SUCCESS};
}
Parameter value(hal_result_t code) {
  return {Parameter::kValue, Kind::kDevice, code};
}

// What a call receives for one parameter.
struct Argument {
  void* handle = nullptr;  // handles
  bool null_out = false;   // out-pointers
  bool bad = false;        // values
};

struct Entry {
  const char* name;
  std::vector<Parameter> parameters;
  std::function<hal_result_t(const std::vector<Argument>&)> call;
};

template <class T>
T as(const Argument& argument) {
  return static_cast<T>(argument.handle);
}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = {
      {"hal_stream_create",
       {handle(Kind::kDevice), value(HAL_ERROR_INVALID_ARGUMENT), out()},
       [](const std::vector<Argument>& a) {
         hal_stream_t stream = nullptr;
         return hal_stream_create(as<hal_device_t>(a[0]),
                                  static_cast<hal_stream_flags_t>(a[1].bad ? 0x40u : 0u),
                                  a[2].null_out ? nullptr : &stream);
       }},
      {"hal_event_create",
       {handle(Kind::kDevice), value(HAL_ERROR_INVALID_ARGUMENT), out()},
       [](const std::vector<Argument>& a) {
         hal_event_t event = nullptr;
         return hal_event_create(as<hal_device_t>(a[0]),
                                 static_cast<hal_event_flags_t>(a[1].bad ? 0x40u : 0u),
                                 a[2].null_out ? nullptr : &event);
       }},
      {"hal_mem_alloc",
       {handle(Kind::kDevice), value(HAL_ERROR_INVALID_SIZE), out()},
       [](const std::vector<Argument>& a) {
         void* pointer = nullptr;
         return hal_mem_alloc(as<hal_device_t>(a[0]), HAL_MEMORY_DEVICE, a[1].bad ? 0 : 64, 0,
                              a[2].null_out ? nullptr : &pointer);
       }},
      {"hal_device_get_properties",
       {handle(Kind::kDevice), out(), value(HAL_ERROR_INVALID_ARGUMENT)},
       [](const std::vector<Argument>& a) {
         hal_device_properties_t properties{};
         properties.struct_size = a[2].bad ? 8 : sizeof(properties);
         return hal_device_get_properties(as<hal_device_t>(a[0]),
                                          a[1].null_out ? nullptr : &properties);
       }},
      {"hal_stream_get_device",
       {handle(Kind::kStream), out()},
       [](const std::vector<Argument>& a) {
         hal_device_t device = nullptr;
         return hal_stream_get_device(as<hal_stream_t>(a[0]), a[1].null_out ? nullptr : &device);
       }},
      {"hal_event_record",
       {handle(Kind::kEvent), handle(Kind::kStream)},
       [](const std::vector<Argument>& a) {
         return hal_event_record(as<hal_event_t>(a[0]), as<hal_stream_t>(a[1]));
       }},
      {"hal_stream_wait_event",
       {handle(Kind::kStream), handle(Kind::kEvent)},
       [](const std::vector<Argument>& a) {
         return hal_stream_wait_event(as<hal_stream_t>(a[0]), as<hal_event_t>(a[1]));
       }},
      {"hal_event_elapsed_ms",
       {handle(Kind::kEvent), handle(Kind::kEvent), out()},
       [](const std::vector<Argument>& a) {
         float ms = 0;
         return hal_event_elapsed_ms(as<hal_event_t>(a[0]), as<hal_event_t>(a[1]),
                                     a[2].null_out ? nullptr : &ms);
       }},
      {"hal_memcpy_async",
       {out(), out(), handle(Kind::kStream)},
       [](const std::vector<Argument>& a) {
         static unsigned char source[16];
         static unsigned char target[16];
         return hal_memcpy_async(a[0].null_out ? nullptr : target, a[1].null_out ? nullptr : source,
                                 sizeof(source), as<hal_stream_t>(a[2]));
       }},
      {"hal_plugin_report_get",
       {value(HAL_ERROR_NOT_FOUND), out()},
       [](const std::vector<Argument>& a) {
         hal_plugin_report_t report{};
         report.struct_size = sizeof(report);
         return hal_plugin_report_get(a[0].bad ? 1000 : 0, a[1].null_out ? nullptr : &report);
       }},
      {"hal_device_get",
       {value(HAL_ERROR_NOT_FOUND), out()},
       [](const std::vector<Argument>& a) {
         hal_device_t device = nullptr;
         return hal_device_get(a[0].bad ? 1000 : 0, a[1].null_out ? nullptr : &device);
       }},
  };
  return table;
}

std::vector<Fault> faults_of(const Parameter& parameter) {
  switch (parameter.role) {
    case Parameter::kHandle:
      // Devices are never destroyed.
      if (parameter.kind == Kind::kDevice)
        return {Fault::kNone, Fault::kNull, Fault::kForeign, Fault::kWrongKind};
      return {Fault::kNone, Fault::kNull, Fault::kForeign, Fault::kWrongKind, Fault::kDestroyed};
    case Parameter::kOut:
      return {Fault::kNone, Fault::kNullOut};
    case Parameter::kValue:
      return {Fault::kNone, Fault::kBadValue};
  }
  return {};
}

// The precedence, written independently of the loader.
hal_result_t predicted(bool initialised, const std::vector<Parameter>& parameters,
                       const std::vector<Fault>& faults) {
  if (!initialised) return HAL_ERROR_NOT_INITIALIZED;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (parameters[i].role != Parameter::kHandle || faults[i] == Fault::kNone) continue;
    return faults[i] == Fault::kDestroyed ? HAL_ERROR_DESTROYED_HANDLE : HAL_ERROR_INVALID_HANDLE;
  }
  for (size_t i = 0; i < parameters.size(); ++i)
    if (faults[i] == Fault::kNullOut) return HAL_ERROR_NULL_POINTER;
  for (size_t i = 0; i < parameters.size(); ++i)
    if (faults[i] == Fault::kBadValue) return parameters[i].bad_value;
  return HAL_SUCCESS;
}

const char* fault_name(Fault fault) {
  switch (fault) {
    case Fault::kNone:
      return "ok";
    case Fault::kNull:
      return "NULL";
    case Fault::kForeign:
      return "foreign";
    case Fault::kWrongKind:
      return "wrong-type";
    case Fault::kDestroyed:
      return "destroyed";
    case Fault::kNullOut:
      return "NULL-out";
    case Fault::kBadValue:
      return "bad-value";
  }
  return "?";
}

// Live and destroyed handles of each kind on one device.
struct Handles {
  hal_device_t device = nullptr;
  hal_stream_t stream = nullptr;
  hal_event_t event = nullptr;
  hal_stream_t destroyed_stream = nullptr;
  hal_event_t destroyed_event = nullptr;

  void* live(Kind kind) const {
    return kind == Kind::kDevice   ? static_cast<void*>(device)
           : kind == Kind::kStream ? static_cast<void*>(stream)
                                   : static_cast<void*>(event);
  }
  // A live handle of another type.
  void* wrong(Kind kind) const {
    return kind == Kind::kEvent ? static_cast<void*>(stream) : static_cast<void*>(event);
  }
  void* destroyed(Kind kind) const {
    return kind == Kind::kStream ? static_cast<void*>(destroyed_stream)
                                 : static_cast<void*>(destroyed_event);
  }
};

// Calls every entry with every combination of faults; returns how many calls.
size_t check_all(bool initialised, const Handles& handles) {
  alignas(64) static unsigned char foreign[128] = {};  // zeros: no HAL handle
  size_t calls = 0;
  for (const Entry& entry : entries()) {
    const size_t n = entry.parameters.size();
    std::vector<std::vector<Fault>> choices;
    for (const Parameter& parameter : entry.parameters) choices.push_back(faults_of(parameter));
    std::vector<size_t> pick(n, 0);
    while (true) {
      std::vector<Fault> faults(n);
      bool any = false;
      for (size_t i = 0; i < n; ++i) {
        faults[i] = choices[i][pick[i]];
        any = any || faults[i] != Fault::kNone;
      }
      // Fault-free calls do real work and are tested elsewhere.
      if (any || !initialised) {
        std::vector<Argument> arguments(n);
        std::string described;
        for (size_t i = 0; i < n; ++i) {
          const Parameter& parameter = entry.parameters[i];
          described += std::string(i ? ", " : "") + fault_name(faults[i]);
          if (parameter.role == Parameter::kHandle) {
            switch (faults[i]) {
              case Fault::kNone:
                arguments[i].handle = handles.live(parameter.kind);
                break;
              case Fault::kForeign:
                arguments[i].handle = foreign;
                break;
              case Fault::kWrongKind:
                arguments[i].handle = handles.wrong(parameter.kind);
                break;
              case Fault::kDestroyed:
                arguments[i].handle = handles.destroyed(parameter.kind);
                break;
              default:
                arguments[i].handle = nullptr;
            }
          }
          arguments[i].null_out = faults[i] == Fault::kNullOut;
          arguments[i].bad = faults[i] == Fault::kBadValue;
        }
        const hal_result_t expected = predicted(initialised, entry.parameters, faults);
        INFO(entry.name << "(" << described << ")" << (initialised ? "" : " before hal_init"));
        const hal_result_t result = entry.call(arguments);
        CHECK(hal_result_string(result) == std::string(hal_result_string(expected)));
        if (result != HAL_SUCCESS) {
          const Detail detail = last_detail();
          CHECK(detail.result == result);
          CHECK(detail.function == entry.name);
        }
        ++calls;
      }
      size_t i = 0;
      while (i < n && ++pick[i] == choices[i].size()) pick[i++] = 0;
      if (i == n) break;
    }
  }
  return calls;
}

}  // namespace

TEST_CASE("every entry reports the first fault in the documented precedence", "[errors]") {
  Handles handles;
  {
    Session session(kPluginDir, "mock");
    REQUIRE(session.result == HAL_SUCCESS);
    REQUIRE(hal_device_get(0, &handles.device) == HAL_SUCCESS);
    REQUIRE(hal_stream_create(handles.device, HAL_STREAM_FLAG_NONE, &handles.stream) ==
            HAL_SUCCESS);
    REQUIRE(hal_event_create(handles.device, HAL_EVENT_FLAG_NONE, &handles.event) == HAL_SUCCESS);
    REQUIRE(hal_stream_create(handles.device, HAL_STREAM_FLAG_NONE, &handles.destroyed_stream) ==
            HAL_SUCCESS);
    REQUIRE(hal_event_create(handles.device, HAL_EVENT_FLAG_NONE, &handles.destroyed_event) ==
            HAL_SUCCESS);
    REQUIRE(hal_stream_destroy(handles.destroyed_stream) == HAL_SUCCESS);
    REQUIRE(hal_event_destroy(handles.destroyed_event) == HAL_SUCCESS);

    CHECK(check_all(true, handles) > 100);

    REQUIRE(hal_event_destroy(handles.event) == HAL_SUCCESS);
    REQUIRE(hal_stream_destroy(handles.stream) == HAL_SUCCESS);
  }
  // Not initialised comes first: no handle is even read (these are dangling now).
  CHECK(check_all(false, handles) > 100);
}
