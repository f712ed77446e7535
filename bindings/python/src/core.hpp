// The core of hal._hal shared by its source files: errors, the runtime and its
// resources, element types, devices, streams, events and buffers. One
// definition of each rule the bindings keep (SPEC.md, "Python bindings"); the
// files binding the rest of the API (hal_ext.cpp, ops.cpp) build on it.
#ifndef HAL_PYTHON_CORE_HPP_
#define HAL_PYTHON_CORE_HPP_

#include <hal.h>
#include <hal_util/names.hpp>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <cstring>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <functional>
#include <vector>
#include <span>

namespace halpy {

namespace nb = nanobind;
using namespace nb::literals;

// ---- errors ------------------------------------------------------------------

// A failed HAL call (or a rule of the bindings stated with a HAL result code),
// turned into the matching hal.Error subclass by the translator below.
struct HalError {
  hal_result_t code;
  std::string message;
  std::string function;
  std::string plugin;
  int64_t native_code;
};

[[noreturn]] inline void raise_hal(hal_result_t code, std::string message,
                                   std::string function = "", std::string plugin = "bindings") {
  throw HalError{code, std::move(message), std::move(function), std::move(plugin), 0};
}

// Raises the detail of the last failure on this thread (the GIL may have been
// released around the call; the detail is per OS thread, which has not changed).
inline void check(hal_result_t result) {
  if (result == HAL_SUCCESS) return;
  hal_error_detail_t detail{};
  detail.struct_size = sizeof detail;
  if (hal_error_get_detail(&detail) == HAL_SUCCESS && detail.result == result) {
    throw HalError{result, detail.message ? detail.message : "",
                   detail.function ? detail.function : "", detail.plugin ? detail.plugin : "",
                   detail.native_code};
  }
  throw HalError{result, hal_result_string(result), "", "", 0};
}

// ---- Python numbers into C scalars ----------------------------------------------

// The value of a Python int (or anything with __index__) as T, or nullopt
// when it does not fit: the one range rule of kernel arguments and op fields.
// Raises the Python error of a failing __index__. Callers check the kind of
// object first and word their own errors.
template <typename T>
std::optional<T> python_integer(nb::handle value) {
  static_assert(std::is_integral_v<T> && sizeof(T) <= sizeof(long long));
  nb::object index = nb::steal(PyNumber_Index(value.ptr()));
  if (!index.is_valid()) throw nb::python_error();
  if constexpr (std::is_same_v<T, uint64_t>) {
    const unsigned long long u = PyLong_AsUnsignedLongLong(index.ptr());
    if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
      PyErr_Clear();
      return std::nullopt;
    }
    return static_cast<T>(u);
  } else {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    const bool fits = !overflow && v >= static_cast<long long>(std::numeric_limits<T>::min()) &&
                      (v < 0 || static_cast<unsigned long long>(v) <=
                                    static_cast<unsigned long long>(std::numeric_limits<T>::max()));
    if (!fits) return std::nullopt;
    return static_cast<T>(v);
  }
}

// The value of a Python float, int or object with __float__.
inline double python_float(nb::handle value) {
  const double v = PyFloat_AsDouble(value.ptr());
  if (v == -1.0 && PyErr_Occurred()) throw nb::python_error();
  return v;
}

// ---- the runtime and its resources -------------------------------------------

struct Resource;
struct Stream;
struct Device;

// The one HAL initialisation the bindings hold, and every live resource made
// under it, in creation order.
struct Runtime {
  bool initialized = false;
  uint64_t generation = 0;  // bumped by each shutdown: older Devices are stale
  uint64_t shutdown_passes = 0;
  std::list<Resource*> live;
};
inline Runtime g_runtime;

// The stream used when a call names none: one per device, made on first use
// (Stream objects; cleared by shutdown, before the interpreter goes).
inline std::map<std::pair<uint64_t, hal_device_t>, nb::object> g_default_streams;

struct Resource {
  Resource() { position = g_runtime.live.insert(g_runtime.live.end(), this); }
  Resource(const Resource&) = delete;
  Resource& operator=(const Resource&) = delete;
  virtual ~Resource() {
    if (registered) g_runtime.live.erase(position);
  }
  // Gives the HAL handle back (idempotent, never throws).
  virtual void release() noexcept = 0;
  // True while the handle is usable.
  virtual bool alive() const noexcept = 0;
  // Blocks an explicit hal.shutdown while outside references (DLPack) exist.
  virtual size_t exports() const noexcept { return 0; }
  // Calls of other threads running on this object with the GIL released, plus
  // exports: while non-zero the handle must not be given back.
  size_t pinned() const noexcept { return in_use + exports(); }
  size_t in_use = 0;
  void unregister() noexcept {
    if (registered) g_runtime.live.erase(position);
    registered = false;
  }
  std::list<Resource*>::iterator position;
  bool registered = true;
  uint64_t shutdown_pass = 0;  // the shutdown that released it last
};

// Marks resources in use for the lifetime of a call that releases the GIL:
// constructed and destroyed with the GIL held, around the gil_scoped_release.
class InUse {
 public:
  explicit InUse(std::vector<Resource*> resources) : resources_(std::move(resources)) {
    for (Resource* r : resources_)
      if (r) ++r->in_use;
  }
  InUse(const InUse&) = delete;
  InUse& operator=(const InUse&) = delete;
  ~InUse() {
    for (Resource* r : resources_)
      if (r) --r->in_use;
  }

 private:
  std::vector<Resource*> resources_;
};

// An explicit close: refused while another thread is inside a call on the
// object or DLPack views of it are alive, so a handle is never destroyed
// under a call that uses it.
inline void close_resource(Resource& resource, const char* what) {
  if (resource.in_use)
    raise_hal(HAL_ERROR_INVALID_STATE, std::string(what) +
                                           ".close: another thread is inside a call on it; "
                                           "close it when that call has returned");
  if (resource.exports())
    raise_hal(HAL_ERROR_INVALID_STATE, std::string(what) +
                                           ".close: " + std::to_string(resource.exports()) +
                                           " DLPack view(s) of it are alive");
  resource.release();
}

// ---- host functions and what they may not do ----------------------------------

// Depth of host functions (Stream.enqueue_host_fn) running on this thread.
// Such a thread must not wait for streams: its own stream is one of them, and
// it waits for the function to return. Python cannot promise that, since any
// allocation in a callback may run the garbage collector, which may free
// unrelated HAL objects; so releases asked for there are deferred, and
// explicit waits refused.
inline thread_local int t_host_function_depth = 0;

inline bool in_host_function() noexcept {
  return t_host_function_depth > 0;
}

// Raises InvalidStateError for a call that waits for streams, made from a host function.
inline void refuse_wait_in_host_function(const char* what) {
  if (in_host_function()) {
    raise_hal(HAL_ERROR_INVALID_STATE,
              std::string(what) +
                  ": called from a host function, which must not wait for streams (its own "
                  "stream waits for it to return)");
  }
}

// A handle to give back later: the HAL calls (run without the GIL), and the
// Python objects the device may still read until they have run.
struct DeferredRelease {
  std::function<void()> give_back;
  std::vector<nb::object> keep;
};
// Guarded by the GIL.
inline std::vector<DeferredRelease> g_deferred_releases;

// Runs |give_back| now with the GIL released, then drops |keep|; on a host
// function's thread, queues both for the next call from another thread.
inline void give_back_handle(std::function<void()> give_back,
                             std::vector<nb::object> keep = {}) noexcept {
  if (in_host_function()) {
    try {
      g_deferred_releases.push_back({std::move(give_back), std::move(keep)});
    } catch (...) {
      // No memory to queue it: the handle leaks, which is better than a hang.
    }
    return;
  }
  {
    nb::gil_scoped_release unlocked;
    give_back();
  }
  keep.clear();
}

// Gives back the handles host functions dropped; a no-op on such a thread.
// Called with the GIL held by the calls that wait or allocate, and by shutdown.
inline void run_deferred_releases() noexcept {
  if (in_host_function() || g_deferred_releases.empty()) return;
  std::vector<DeferredRelease> batch = std::move(g_deferred_releases);
  g_deferred_releases.clear();
  {
    nb::gil_scoped_release unlocked;
    for (DeferredRelease& release : batch) release.give_back();
  }
  // |batch| goes here, with the GIL: the kept objects are dropped.
}

inline void init_runtime(const std::optional<std::string>& plugins,
                         const std::optional<std::string>& plugin_path) {
  if (g_runtime.initialized) return;
  hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
  if (plugins) options.plugins = plugins->c_str();
  if (plugin_path) options.plugin_path = plugin_path->c_str();
  hal_result_t result;
  {
    nb::gil_scoped_release unlocked;
    result = hal_init(&options);
  }
  check(result);
  g_runtime.initialized = true;
}

inline void ensure_runtime() {
  init_runtime(std::nullopt, std::nullopt);
  run_deferred_releases();
}

// Releases every live resource, newest first, then shuts HAL down. |at_exit|:
// resources still pinned (DLPack views alive, a daemon thread blocked in a
// call) are left alone and HAL stays loaded: the process is ending, and their
// memory must not be unmapped under a reader.
inline bool shutdown_runtime(bool at_exit) {
  if (!g_runtime.initialized) return false;
  refuse_wait_in_host_function("hal.shutdown");
  run_deferred_releases();
  size_t exported = 0, in_use = 0;
  for (Resource* resource : g_runtime.live) {
    exported += resource->exports();
    in_use += resource->in_use;
  }
  if ((exported || in_use) && !at_exit) {
    raise_hal(HAL_ERROR_INVALID_STATE,
              "hal.shutdown: " + std::to_string(exported) +
                  " DLPack export(s) (numpy/JAX/torch views of HAL buffers) are alive and " +
                  std::to_string(in_use) +
                  " call(s) of other threads are running; delete the views and let the calls "
                  "return first");
  }
  // Newest first. A release may let go of the GIL (a stream's destroy waits
  // for host functions, which run Python; freeing memory waits for the
  // streams), and other threads may then drop or make resources: the list is
  // searched afresh after each release instead of walked with an iterator a
  // deletion would invalidate, and each resource's Python object is held
  // while it is released, so no thread can free it under the release.
  const uint64_t pass = ++g_runtime.shutdown_passes;
  for (;;) {
    Resource* next = nullptr;
    for (auto it = g_runtime.live.rbegin(); it != g_runtime.live.rend(); ++it) {
      if ((*it)->shutdown_pass != pass && !(*it)->pinned()) {
        next = *it;
        break;
      }
    }
    if (next == nullptr) break;
    next->shutdown_pass = pass;
    const nb::object owner = nb::find(next);
    next->release();
  }
  if (exported || in_use) {
    // At exit, with HAL left loaded: the default streams' Python objects (and
    // those of releases still queued) are leaked, not decref'd from static
    // destructors after the interpreter is gone.
    for (auto& entry : g_default_streams) entry.second.release();
    g_default_streams.clear();
    for (DeferredRelease& release : g_deferred_releases) {
      for (nb::object& object : release.keep) object.release();
    }
    g_deferred_releases.clear();
    nb::set_leak_warnings(false);  // the leaks here are deliberate
    return false;
  }
  g_default_streams.clear();
  run_deferred_releases();  // what host functions dropped during the walk
  for (Resource* resource : g_runtime.live) resource->registered = false;
  g_runtime.live.clear();
  {
    nb::gil_scoped_release unlocked;
    hal_shutdown();
  }
  g_runtime.initialized = false;
  ++g_runtime.generation;
  return true;
}

// ---- names -------------------------------------------------------------------

inline std::vector<std::string> bit_names(std::span<const hal::util::EnumName> table, uint32_t bits,
                                          bool bits_are_shifts) {
  std::vector<std::string> names;
  for (const auto& entry : table) {
    const uint32_t bit = bits_are_shifts ? (1u << entry.value) : entry.value;
    if (bits & bit) names.emplace_back(entry.short_name);
  }
  return names;
}

// The value of the table entry called |name| (short name or enumerator).
inline uint32_t value_of(std::span<const hal::util::EnumName> table, const std::string& name,
                         const char* what) {
  for (const auto& entry : table) {
    if (name == entry.short_name || name == entry.enumerator) return entry.value;
  }
  std::string known;
  for (const auto& entry : table)
    known += std::string(known.empty() ? "" : ", ") + entry.short_name;
  throw nb::value_error(
      (std::string("unknown ") + what + " '" + name + "' (known: " + known + ")").c_str());
}

// ---- element types -----------------------------------------------------------

struct DType {
  std::string name;  // numpy's spelling ("float32"), "bfloat16"
  hal_dtype_t hal;
  nb::dlpack::dtype dl;
  size_t size;
};

inline const std::vector<DType>& dtypes() {
  using nb::dlpack::dtype_code;
  static const std::vector<DType> table = {
      {"float32", HAL_DTYPE_F32, {uint8_t(dtype_code::Float), 32, 1}, 4},
      {"float16", HAL_DTYPE_F16, {uint8_t(dtype_code::Float), 16, 1}, 2},
      {"bfloat16", HAL_DTYPE_BF16, {uint8_t(dtype_code::Bfloat), 16, 1}, 2},
      {"float64", HAL_DTYPE_F64, {uint8_t(dtype_code::Float), 64, 1}, 8},
      {"int32", HAL_DTYPE_I32, {uint8_t(dtype_code::Int), 32, 1}, 4},
      {"int64", HAL_DTYPE_I64, {uint8_t(dtype_code::Int), 64, 1}, 8},
      {"int8", HAL_DTYPE_I8, {uint8_t(dtype_code::Int), 8, 1}, 1},
      {"uint8", HAL_DTYPE_U8, {uint8_t(dtype_code::UInt), 8, 1}, 1},
      {"bool", HAL_DTYPE_BOOL, {uint8_t(dtype_code::Bool), 8, 1}, 1},  // DLPack kDLBool
      // The OCP 8-bit floats under PyTorch's and ml_dtypes' names, with DLPack's
      // codes kDLFloat8_e4m3fn (10) and kDLFloat8_e5m2 (12).
      {"float8_e4m3fn", HAL_DTYPE_F8_E4M3, {10, 8, 1}, 1},
      {"float8_e5m2", HAL_DTYPE_F8_E5M2, {12, 8, 1}, 1},
  };
  return table;
}

// numpy has no bfloat16 and no 8-bit floats: the name of the type it lacks,
// or nullptr.
inline const char* numpy_lacks(hal_dtype_t dtype) {
  if (dtype == HAL_DTYPE_BF16) return "bfloat16";
  if (dtype == HAL_DTYPE_F8_E4M3) return "float8_e4m3fn";
  if (dtype == HAL_DTYPE_F8_E5M2) return "float8_e5m2";
  return nullptr;
}

inline const DType& dtype_named(const std::string& name) {
  for (const DType& d : dtypes())
    if (d.name == name) return d;
  throw nb::type_error(("dtype '" + name +
                        "' is not a HAL element type (float32, float16, bfloat16, float64, int32, "
                        "int64, int8, uint8, bool, float8_e4m3fn, float8_e5m2)")
                           .c_str());
}

// The kernel language's short names (hal.f32, "bf16", ...) for the same types.
inline const DType* dtype_of_short_name(const std::string& name) {
  static const std::pair<const char*, const char*> aliases[] = {
      {"f32", "float32"}, {"f16", "float16"}, {"bf16", "bfloat16"}, {"f64", "float64"},
      {"i32", "int32"},   {"i64", "int64"},   {"i8", "int8"},       {"u8", "uint8"}};
  for (const auto& [short_name, full] : aliases)
    if (name == short_name) return &dtype_named(full);
  return nullptr;
}

// Accepts "float32", "f32", numpy.float32, numpy.dtype("float32"), and the kernel
// language's scalar types (hal.f32, hal.bf16: objects with a short .name).
inline const DType& dtype_of(nb::handle spec) {
  if (nb::isinstance<nb::str>(spec)) {
    const std::string name = nb::cast<std::string>(spec);
    // HAL's own names first: numpy knows neither bfloat16 nor the 8-bit floats.
    for (const DType& d : dtypes())
      if (d.name == name) return d;
    if (const DType* alias = dtype_of_short_name(name)) return *alias;
  } else if (nb::hasattr(spec, "name") && nb::hasattr(spec, "c_name")) {
    // hal.f32, hal.bf16, ... (hal._kernel.ScalarType)
    nb::object name = spec.attr("name");
    if (nb::isinstance<nb::str>(name)) {
      if (const DType* alias = dtype_of_short_name(nb::cast<std::string>(name))) return *alias;
    }
    throw nb::type_error(("dtype " + nb::cast<std::string>(nb::repr(spec)) +
                          " has no HAL buffer element type (u32 and u64 arrays use int32 and "
                          "int64 buffers)")
                             .c_str());
  }
  nb::object np = nb::module_::import_("numpy");
  nb::object canonical;
  try {
    canonical = np.attr("dtype")(spec);
  } catch (nb::python_error&) {
    throw nb::type_error("dtype must be a numpy dtype, a numpy scalar type or a dtype name");
  }
  return dtype_named(nb::cast<std::string>(canonical.attr("name")));
}

inline const DType& dtype_of_dl(nb::dlpack::dtype dl) {
  for (const DType& d : dtypes())
    if (d.dl == dl) return d;
  throw nb::type_error(("DLPack dtype (code " + std::to_string(dl.code) + ", " +
                        std::to_string(dl.bits) + " bits, " + std::to_string(dl.lanes) +
                        " lanes) is not a HAL element type")
                           .c_str());
}

// ---- devices -----------------------------------------------------------------

struct DeviceProperties {
  std::string name, vendor, plugin, driver_version, type;
  nb::bytes uuid;
  uint32_t index, plugin_device_index, compute_units, max_threads_per_block,
      max_shared_memory_bytes, subgroup_size;
  uint64_t total_memory_bytes, max_allocation_bytes, min_alignment_bytes;
  std::vector<uint32_t> max_block_dims, max_grid_dims;
  std::vector<std::string> capabilities, module_formats;
  double peak_fp32_flops, peak_memory_bandwidth;
};

// A device of the current HAL initialisation. Borrowed from the loader: it
// stays valid until hal.shutdown, after which every use raises.
struct Device {
  hal_device_t handle = nullptr;
  uint32_t index = 0;
  uint64_t generation = 0;

  hal_device_t get() const {
    if (!g_runtime.initialized || generation != g_runtime.generation) {
      raise_hal(HAL_ERROR_DESTROYED_HANDLE,
                "device " + std::to_string(index) +
                    " belongs to a HAL session that hal.shutdown ended; call hal.devices() again");
    }
    return handle;
  }
  hal_device_properties_t raw() const {
    hal_device_properties_t props{};
    props.struct_size = sizeof props;
    check(hal_device_get_properties(get(), &props));
    return props;
  }
  bool has(hal_device_caps_t cap) const { return (raw().capabilities & cap) != 0; }
  void synchronize() const {
    refuse_wait_in_host_function("Device.synchronize");
    hal_device_t device = get();
    hal_result_t result;
    {
      nb::gil_scoped_release unlocked;
      result = hal_device_synchronize(device);
    }
    check(result);
    run_deferred_releases();
  }
  bool operator==(const Device& other) const {
    return handle == other.handle && generation == other.generation;
  }
};

inline Device device_at(uint32_t index) {
  ensure_runtime();
  Device device;
  check(hal_device_get(index, &device.handle));
  device.index = index;
  device.generation = g_runtime.generation;
  return device;
}

inline Device device_of(hal_device_t handle) {
  hal_device_properties_t props{};
  props.struct_size = sizeof props;
  check(hal_device_get_properties(handle, &props));
  return Device{handle, props.index, g_runtime.generation};
}

inline DeviceProperties properties_of(const Device& device) {
  const hal_device_properties_t p = device.raw();
  DeviceProperties out;
  out.name = p.name;
  out.vendor = p.vendor;
  out.plugin = p.plugin;
  out.driver_version = p.driver_version;
  out.type = hal::util::device_type_name(p.type);
  out.uuid = nb::bytes(reinterpret_cast<const char*>(p.uuid), sizeof p.uuid);
  out.index = p.index;
  out.plugin_device_index = p.plugin_device_index;
  out.compute_units = p.compute_units;
  out.max_threads_per_block = p.max_threads_per_block;
  out.max_shared_memory_bytes = p.max_shared_memory_bytes;
  out.subgroup_size = p.subgroup_size;
  out.total_memory_bytes = p.total_memory_bytes;
  out.max_allocation_bytes = p.max_allocation_bytes;
  out.min_alignment_bytes = p.min_alignment_bytes;
  out.max_block_dims.assign(p.max_block_dims, p.max_block_dims + 3);
  out.max_grid_dims.assign(p.max_grid_dims, p.max_grid_dims + 3);
  out.capabilities = bit_names(hal::util::capability_table(), p.capabilities, false);
  out.module_formats = bit_names(hal::util::module_format_table(), p.module_formats, true);
  out.peak_fp32_flops = p.peak_fp32_flops;
  out.peak_memory_bandwidth = p.peak_memory_bandwidth;
  return out;
}

// ---- streams -----------------------------------------------------------------

// The first exception a host function raised, re-raised by the next synchronize.
struct CallbackErrors {
  nb::object first;  // touched only with the GIL held
};

struct HostCall {
  nb::object fn;
  std::shared_ptr<CallbackErrors> errors;
};

// Runs on the plugin's thread (or on the caller's, for devices without
// HAL_DEVICE_CAP_HOST_CALLBACKS): takes the GIL before touching Python.
inline void host_call_trampoline(void* user_data) noexcept {
  nb::gil_scoped_acquire locked;
  ++t_host_function_depth;
  struct Leave {
    ~Leave() { --t_host_function_depth; }
  } leave;
  std::unique_ptr<HostCall> call(static_cast<HostCall*>(user_data));
  try {
    call->fn();
  } catch (nb::python_error& error) {
    if (!call->errors->first.is_valid()) call->errors->first = nb::borrow(error.value());
  } catch (...) {
    // A C++ exception from the call machinery: nothing Python can see; drop it.
  }
  call.reset();  // the callable's reference goes with the GIL held
}

struct Stream : Resource {
  Device device;
  hal_stream_t handle = nullptr;
  std::shared_ptr<CallbackErrors> errors = std::make_shared<CallbackErrors>();
  // Host arrays of asynchronous copies, kept alive until the next synchronize.
  std::vector<nb::object> pending;

  explicit Stream(const Device& dev) : device(dev) {
    hal_device_t d = device.get();
    check(hal_stream_create(d, 0, &handle));
  }
  ~Stream() override { release(); }
  void release() noexcept override {
    if (!handle) return;
    hal_stream_t stream = handle;
    handle = nullptr;
    // Destroy waits for host functions, which take the GIL; the host arrays
    // of pending copies live until it has.
    give_back_handle([stream] { hal_stream_destroy(stream); }, std::move(pending));
    pending.clear();
  }
  bool alive() const noexcept override { return handle != nullptr; }
  hal_stream_t get() const {
    if (!handle)
      raise_hal(HAL_ERROR_DESTROYED_HANDLE, "the Stream was closed (or hal.shutdown ran)");
    device.get();
    return handle;
  }
  void raise_callback_error() {
    if (errors->first.is_valid()) {
      nb::object error = errors->first;
      errors->first = nb::object();
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
      throw nb::python_error();
    }
  }
  void synchronize() {
    refuse_wait_in_host_function("Stream.synchronize");
    hal_stream_t stream = get();
    hal_result_t result;
    {
      InUse use({this});
      nb::gil_scoped_release unlocked;
      result = hal_stream_synchronize(stream);
    }
    pending.clear();
    run_deferred_releases();
    check(result);
    raise_callback_error();
  }
  bool query() {
    hal_result_t result = hal_stream_query(get());
    if (result == HAL_NOT_READY) return false;
    check(result);
    return true;
  }
  void enqueue_host_fn(nb::callable fn) {
    hal_stream_t stream = get();
    auto call = std::make_unique<HostCall>(HostCall{fn, errors});
    hal_result_t result;
    {
      // Without HAL_DEVICE_CAP_HOST_CALLBACKS the loader runs fn on this
      // thread after synchronising: the trampoline takes the GIL back then.
      InUse use({this});
      nb::gil_scoped_release unlocked;
      result = hal_stream_enqueue_host_fn(stream, host_call_trampoline, call.get());
    }
    if (result == HAL_SUCCESS) call.release();  // the trampoline owns it now
    check(result);
  }
};

inline Stream& default_stream(const Device& device) {
  auto key = std::make_pair(g_runtime.generation, device.get());
  auto it = g_default_streams.find(key);
  if (it == g_default_streams.end() || !nb::cast<Stream&>(it->second).alive()) {
    nb::object stream = nb::cast(new Stream(device), nb::rv_policy::take_ownership);
    it = g_default_streams.insert_or_assign(key, stream).first;
  }
  return nb::cast<Stream&>(it->second);
}

inline Stream& stream_or_default(Stream* stream, const Device& device) {
  return stream ? *stream : default_stream(device);
}

// ---- events ------------------------------------------------------------------

struct Event : Resource {
  Device device;
  hal_event_t handle = nullptr;
  Event(const Device& dev, bool timing) : device(dev) {
    check(hal_event_create(device.get(), timing ? HAL_EVENT_FLAG_TIMING : 0, &handle));
  }
  ~Event() override { release(); }
  void release() noexcept override {
    if (!handle) return;
    hal_event_t event = handle;
    handle = nullptr;
    give_back_handle([event] { hal_event_destroy(event); });
  }
  bool alive() const noexcept override { return handle != nullptr; }
  hal_event_t get() const {
    if (!handle)
      raise_hal(HAL_ERROR_DESTROYED_HANDLE, "the Event was closed (or hal.shutdown ran)");
    device.get();
    return handle;
  }
  void synchronize() {
    refuse_wait_in_host_function("Event.synchronize");
    hal_event_t event = get();
    hal_result_t result;
    {
      InUse use({this});
      nb::gil_scoped_release unlocked;
      result = hal_event_synchronize(event);
    }
    check(result);
    run_deferred_releases();
  }
  bool query() {
    hal_result_t result = hal_event_query(get());
    if (result == HAL_NOT_READY) return false;
    check(result);
    return true;
  }
  float elapsed_ms(const Event& end) {
    float ms = 0;
    check(hal_event_elapsed_ms(get(), end.get(), &ms));
    return ms;
  }
};

// ---- buffers -----------------------------------------------------------------

inline const char* kind_name(int kind) {
  switch (kind) {
    case HAL_MEMORY_DEVICE:
      return "device";
    case HAL_MEMORY_HOST:
      return "host";
    case HAL_MEMORY_SHARED:
      return "shared";
    default:
      return "external";
  }
}
constexpr int kExternal = -1;  // memory HAL did not allocate (wrapped from DLPack)

inline size_t checked_product(const std::vector<size_t>& shape, size_t element) {
  size_t total = element;
  for (size_t extent : shape) {
    if (extent && total > SIZE_MAX / extent) throw nb::value_error("the shape's size overflows");
    total *= extent;
  }
  return total;
}

struct Buffer : Resource {
  Device device;
  void* ptr = nullptr;
  size_t nbytes = 0;
  int kind = HAL_MEMORY_DEVICE;
  std::vector<size_t> shape;
  const DType* dtype = nullptr;
  bool owned = true;        // hal_mem_free on release
  bool read_only = false;   // wrapped from a producer that must not be written
  nb::object keepalive;     // the producer of wrapped memory
  size_t live_exports = 0;  // DLPack views handed out and not yet deleted

  Buffer(const Device& dev, std::vector<size_t> shape_, const DType& type, int kind_)
      : device(dev), kind(kind_), shape(std::move(shape_)), dtype(&type) {
    nbytes = checked_product(shape, type.size);
    hal_device_t d = device.get();
    if (nbytes) {
      hal_result_t result;
      {
        InUse use({this});  // no shutdown while the allocation is in flight
        nb::gil_scoped_release unlocked;
        result = hal_mem_alloc(d, static_cast<hal_memory_kind_t>(kind), nbytes, 0, &ptr);
      }
      check(result);
    }
  }
  Buffer(const Device& dev, void* data, std::vector<size_t> shape_, const DType& type, int kind_,
         nb::object owner)
      : device(dev),
        ptr(data),
        kind(kind_),
        shape(std::move(shape_)),
        dtype(&type),
        owned(false),
        keepalive(std::move(owner)) {
    nbytes = checked_product(shape, type.size);
  }
  ~Buffer() override { release(); }
  void release() noexcept override {
    if (ptr && owned) {
      void* p = ptr;
      give_back_handle([p] { hal_mem_free(p); });  // waits for the device's streams
    } else if (ptr && g_runtime.initialized && device.generation == g_runtime.generation) {
      // Wrapped memory: work enqueued on it must finish before the producer may free it.
      hal_device_t d = device.handle;
      std::vector<nb::object> keep;
      if (keepalive.is_valid()) keep.push_back(std::move(keepalive));
      give_back_handle([d] { hal_device_synchronize(d); }, std::move(keep));
    }
    ptr = nullptr;
    keepalive = nb::object();
  }
  bool alive() const noexcept override { return ptr != nullptr || nbytes == 0; }
  size_t exports() const noexcept override { return live_exports; }
  void* get() const {
    if (!ptr && nbytes) {
      raise_hal(HAL_ERROR_DESTROYED_HANDLE,
                "the Buffer was freed (closed, or hal.shutdown ran); its memory is gone");
    }
    device.get();
    return ptr;
  }
  // Raises InvalidArgumentError when |what| would write a read-only buffer.
  void check_writable(const std::string& what) const {
    if (read_only)
      raise_hal(HAL_ERROR_INVALID_ARGUMENT,
                what +
                    ": the buffer wraps a read-only array (numpy with writeable=False, a JAX "
                    "array, a read-only DLPack export) and cannot be written; make a "
                    "writable copy with hal.to_device(array)");
  }
  bool host_visible() const {
    return kind != HAL_MEMORY_DEVICE || device.has(HAL_DEVICE_CAP_UNIFIED_ADDRESSING);
  }
  size_t size() const { return dtype ? nbytes / dtype->size : 0; }
};

// ---- DLPack export -------------------------------------------------------------

// A guard owned by each DLPack view: counts the view while it lives and keeps
// the Buffer (and so its memory) alive.
struct ExportGuard {
  nb::object buffer;
  explicit ExportGuard(nb::object b) : buffer(std::move(b)) {
    ++nb::cast<Buffer&>(buffer).live_exports;
  }
  ~ExportGuard() { --nb::cast<Buffer&>(buffer).live_exports; }
};

// __dlpack__ of |buffer_handle| (a hal.Buffer) or of a view of it: |data| and
// |shape| (and |strides| in elements, nullptr for dense row-major) must lie
// inside the buffer. Exported as kDLCPU memory, read-only when the buffer is.
inline nb::object export_dlpack(nb::handle buffer_handle, void* data,
                                const std::vector<size_t>& shape, const int64_t* strides,
                                nb::object stream, nb::object max_version, nb::object dl_device,
                                nb::object copy) {
  Buffer& self = nb::cast<Buffer&>(buffer_handle);
  if (!self.host_visible()) {
    raise_hal(HAL_ERROR_UNSUPPORTED,
              std::string("__dlpack__: this ") + kind_name(self.kind) +
                  " buffer is not host-visible (the device lacks unified addressing); copy it "
                  "with to_numpy() or allocate kind='host'");
  }
  if (!stream.is_none() && !nb::isinstance<Stream>(stream) && !nb::isinstance<nb::int_>(stream))
    throw nb::type_error("__dlpack__: stream must be None, an int or a hal.Stream");
  if (!copy.is_none() && nb::cast<bool>(copy))
    throw nb::value_error("__dlpack__: copy=True is not supported (use to_numpy())");
  // HAL buffers are exported as kDLCPU memory: the consumer reads them on the
  // host at once, so all work on the buffer's device must be complete.
  self.device.synchronize();
  nb::object guard =
      nb::cast(new ExportGuard(nb::borrow(buffer_handle)), nb::rv_policy::take_ownership);
  // nanobind's array_api object speaks both DLPack versions (numpy >= 2 asks for a
  // versioned capsule: a legacy one would come back read-only). A read-only buffer
  // sets the versioned read-only flag (a legacy capsule cannot carry it: nanobind
  // then refuses the legacy export with BufferError, as numpy does).
  nb::object exported;
  if (self.read_only) {
    nb::ndarray<nb::array_api, nb::ro> view(data, shape.size(), shape.data(), guard, strides,
                                            self.dtype->dl, nb::device::cpu::value, 0);
    exported = nb::cast(view, nb::rv_policy::reference);
  } else {
    nb::ndarray<nb::array_api> view(data, shape.size(), shape.data(), guard, strides,
                                    self.dtype->dl, nb::device::cpu::value, 0);
    exported = nb::cast(view, nb::rv_policy::reference);
  }
  if (PyCapsule_CheckExact(exported.ptr())) return exported;
  nb::kwargs kwargs;
  if (!max_version.is_none()) kwargs["max_version"] = max_version;
  if (!dl_device.is_none()) kwargs["dl_device"] = dl_device;
  if (!copy.is_none()) kwargs["copy"] = copy;
  return exported.attr("__dlpack__")(**kwargs);
}

// numpy's __array__ protocol (np.asarray(x), np.array(x)) for a Buffer or a view
// of one: a zero-copy view when the memory is host-visible and no copy is asked
// for, else a copy; |exporter| is the object whose __dlpack__ makes the view.
inline nb::object numpy_array_of(nb::handle exporter, const Buffer& buffer, nb::object dtype,
                                 nb::object copy, const std::function<nb::object()>& to_numpy) {
  if (const char* lacks = numpy_lacks(buffer.dtype->hal))
    throw nb::type_error(
        (std::string("numpy has no ") + lacks + ": use __dlpack__ with a framework that has it")
            .c_str());
  buffer.get();
  nb::object np = nb::module_::import_("numpy");
  const bool must_copy = !copy.is_none() && nb::cast<bool>(copy);
  const bool no_copy = !copy.is_none() && !nb::cast<bool>(copy);
  nb::object out;
  if (!must_copy && buffer.host_visible()) {
    out = np.attr("from_dlpack")(exporter);
  } else if (no_copy) {
    throw nb::value_error(
        "__array__(copy=False): the buffer is not host-visible; numpy needs a copy");
  } else {
    out = to_numpy();
  }
  if (!dtype.is_none()) {
    nb::object wanted = np.attr("dtype")(dtype);
    if (!wanted.equal(out.attr("dtype"))) {
      if (no_copy) throw nb::value_error("__array__(copy=False): another dtype needs a copy");
      out = out.attr("astype")(wanted);
    }
  }
  return out;
}

// hal.ops' extension half (ops.cpp): op plans and their executions.
void bind_ops(nb::module_& m);

}  // namespace halpy

#endif  // HAL_PYTHON_CORE_HPP_
