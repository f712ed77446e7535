// hal._hal: the Python extension over HAL's public C ABI (hal.h).
//
// The rules it implements (SPEC.md, "Python bindings"):
// - every failing HAL call raises hal.Error (a subclass per result code) with
//   the detail of hal_error_get_detail;
// - every object holds its HAL handle in a Resource registered with the one
//   Runtime; hal.shutdown releases the live resources newest first, then calls
//   hal_shutdown, and a Python object whose handle is gone raises
//   hal.DestroyedHandleError instead of touching freed state;
// - every call that may block (synchronize, free, destroy, unload, collective
//   set-up) runs with the GIL released, and a host function enqueued on a
//   stream takes the GIL on the plugin's thread before it touches Python.
#include "core.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace halpy {
namespace {

// A host array (numpy, anything with __dlpack__ or the buffer protocol) seen
// as C-contiguous bytes on the host.
struct HostArray {
  nb::ndarray<nb::ro> array;
  const void* data;
  size_t nbytes;
  const DType* dtype;
  std::vector<size_t> shape;
  bool read_only;       // the producer forbids writes
  nb::object producer;  // what keeps the memory alive (the capsule's array)
};

bool c_contiguous(const nb::ndarray<nb::ro>& a) {
  for (size_t i = 0; i < a.ndim(); ++i)
    if (a.shape(i) == 0) return true;  // no element: any strides describe it
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

// The leading fields of DLPack's DLManagedTensorVersioned (dlpack.h >= 1.0):
// version, manager context, deleter, then the flags word.
struct DLPackVersionedHead {
  uint32_t major, minor;
  void* manager_ctx;
  void (*deleter)(void*);
  uint64_t flags;
};
constexpr uint64_t kDLPackFlagReadOnly = 1;

// True for producers whose arrays are immutable by contract although their
// legacy DLPack capsules cannot say so (JAX exports unversioned capsules).
bool immutable_producer(nb::handle obj) {
  nb::object module = nb::getattr(obj.type(), "__module__", nb::none());
  if (!nb::isinstance<nb::str>(module)) return false;
  const std::string name = nb::cast<std::string>(module);
  return name == "jax" || name.rfind("jax.", 0) == 0 || name == "jaxlib" ||
         name.rfind("jaxlib.", 0) == 0;
}

// Asks |obj| for its DLPack capsule, versioned if it can: the producer's own
// errors (BufferError for a dtype DLPack lacks, a meta tensor) reach the caller.
nb::object dlpack_capsule_of(nb::handle obj) {
  nb::object method = nb::getattr(obj, "__dlpack__");
  try {
    return method(nb::arg("max_version") = nb::make_tuple(1, 0));
  } catch (nb::python_error& error) {
    if (!error.matches(PyExc_TypeError)) throw;  // only "no max_version keyword" retries
  }
  return method();
}

HostArray import_array(nb::handle obj, const char* what) {
  nb::object source = nb::borrow(obj);
  bool read_only = immutable_producer(obj);
  if (!PyCapsule_CheckExact(obj.ptr()) && nb::hasattr(obj, "__dlpack__"))
    source = dlpack_capsule_of(obj);
  if (PyCapsule_CheckExact(source.ptr())) {
    const char* name = PyCapsule_GetName(source.ptr());
    if (!name ||
        (std::strcmp(name, "dltensor") != 0 && std::strcmp(name, "dltensor_versioned") != 0))
      throw nb::value_error((std::string(what) +
                             ": the DLPack capsule was already consumed (its name is '" +
                             (name ? name : "") + "'); a capsule can be imported once")
                                .c_str());
    if (std::strcmp(name, "dltensor_versioned") == 0) {
      const auto* head =
          static_cast<const DLPackVersionedHead*>(PyCapsule_GetPointer(source.ptr(), name));
      if (head && head->major >= 1 && (head->flags & kDLPackFlagReadOnly)) read_only = true;
    }
  } else if (PyObject_CheckBuffer(source.ptr())) {
    // The buffer protocol (bytes, memoryview, array.array): read-only unless a
    // writable view is granted.
    Py_buffer view;
    if (PyObject_GetBuffer(source.ptr(), &view, PyBUF_WRITABLE) == 0) {
      PyBuffer_Release(&view);
    } else {
      PyErr_Clear();
      read_only = true;
    }
  }
  nb::ndarray<nb::ro> array;
  if (!nb::try_cast(source, array, /*convert=*/false)) {
    if (PyCapsule_CheckExact(source.ptr()) && !PyCapsule_CheckExact(obj.ptr())) {
      throw nb::type_error((std::string(what) + ": the DLPack export of " +
                            nb::cast<std::string>(nb::str(obj.type())) +
                            " has a layout or dtype HAL cannot take")
                               .c_str());
    }
    throw nb::type_error((std::string(what) +
                          ": expected a hal.Buffer, a numpy array or an object with __dlpack__, "
                          "got " +
                          nb::cast<std::string>(nb::str(obj.type())))
                             .c_str());
  }
  if (array.device_type() != nb::device::cpu::value) {
    raise_hal(HAL_ERROR_UNSUPPORTED, std::string(what) + ": DLPack device type " +
                                         std::to_string(array.device_type()) +
                                         " is not host memory; only kDLCPU arrays are accepted");
  }
  if (!c_contiguous(array)) {
    throw nb::value_error(
        (std::string(what) + ": the array is not C-contiguous; pass numpy.ascontiguousarray(x)")
            .c_str());
  }
  HostArray out{array, array.data(), 0, &dtype_of_dl(array.dtype()), {}, read_only, {}};
  for (size_t i = 0; i < array.ndim(); ++i) out.shape.push_back(array.shape(i));
  out.nbytes = checked_product(out.shape, out.dtype->size);
  // The imported tensor owns the memory's lease (a consumed capsule's deleter
  // runs when it goes): a wrapping Buffer keeps it, in a capsule of its own.
  auto* held = new nb::ndarray<nb::ro>(array);
  out.producer = nb::steal(PyCapsule_New(held, "hal.imported_array", [](PyObject* capsule) {
    delete static_cast<nb::ndarray<nb::ro>*>(PyCapsule_GetPointer(capsule, "hal.imported_array"));
  }));
  if (!out.producer.is_valid()) {
    delete held;
    throw nb::python_error();
  }
  return out;
}

// Enqueues a copy and, for a synchronous call (no stream given), waits: the
// device first (work on other streams that wrote the source), then the copy.
void copy_bytes(void* dst, const void* src, size_t n, Stream* stream, const Device& device,
                nb::object keepalive, std::vector<Resource*> buffers) {
  if (!stream) device.synchronize();
  Stream& s = stream_or_default(stream, device);
  hal_stream_t h = s.get();
  hal_result_t result;
  {
    buffers.push_back(&s);
    InUse use(std::move(buffers));
    nb::gil_scoped_release unlocked;
    result = hal_memcpy_async(dst, src, n, h);
  }
  check(result);
  if (stream) {
    s.pending.push_back(std::move(keepalive));
  } else {
    s.synchronize();
  }
}

nb::object buffer_to_numpy(Buffer& self, Stream* stream) {
  if (const char* lacks = numpy_lacks(self.dtype->hal))
    throw nb::type_error(
        (std::string("numpy has no ") + lacks + ": use hal.Buffer.__dlpack__ with a framework")
            .c_str());
  nb::object np = nb::module_::import_("numpy");
  nb::object shape = nb::tuple(nb::cast(self.shape));
  nb::object out = np.attr("empty")(shape, self.dtype->name.c_str());
  if (self.nbytes) {
    void* dst = reinterpret_cast<void*>(nb::cast<uintptr_t>(out.attr("ctypes").attr("data")));
    copy_bytes(dst, self.get(), self.nbytes, stream, self.device, out, {&self});
  }
  return out;
}

void buffer_copy_from(Buffer& self, nb::handle src, Stream* stream) {
  void* dst = self.get();
  self.check_writable("copy_from");
  if (nb::isinstance<Buffer>(src)) {
    Buffer& other = nb::cast<Buffer&>(src);
    if (other.nbytes != self.nbytes)
      throw nb::value_error(("copy_from: the source has " + std::to_string(other.nbytes) +
                             " bytes, this buffer " + std::to_string(self.nbytes))
                                .c_str());
    if (self.nbytes)
      copy_bytes(dst, other.get(), self.nbytes, stream, self.device, nb::borrow(src),
                 {&self, &other});
    return;
  }
  HostArray host = import_array(src, "copy_from");
  if (host.nbytes != self.nbytes)
    throw nb::value_error(("copy_from: the array has " + std::to_string(host.nbytes) +
                           " bytes, this buffer " + std::to_string(self.nbytes))
                              .c_str());
  if (host.dtype != self.dtype)
    throw nb::type_error(("copy_from: the array's dtype is " + host.dtype->name +
                          ", this buffer's " + self.dtype->name)
                             .c_str());
  if (self.nbytes)
    copy_bytes(dst, host.data, self.nbytes, stream, self.device, host.producer, {&self});
}

nb::object buffer_dlpack(nb::handle self_handle, nb::object stream, nb::object max_version,
                         nb::object dl_device, nb::object copy) {
  Buffer& self = nb::cast<Buffer&>(self_handle);
  void* data = self.get();
  return export_dlpack(self_handle, data, self.shape, nullptr, std::move(stream),
                       std::move(max_version), std::move(dl_device), std::move(copy));
}

// A Buffer wrapping |host|'s memory, which it keeps alive (and read-only when the
// producer is).
nb::object wrap_host_array(const Device& device, HostArray& host, int kind) {
  auto* buffer = new Buffer(device, const_cast<void*>(host.data), host.shape, *host.dtype, kind,
                            host.producer);
  buffer->read_only = host.read_only;
  return nb::cast(buffer, nb::rv_policy::take_ownership);
}

// Wraps |obj| (DLPack producer, numpy array, capsule) as a Buffer without a
// copy when the memory is a HAL allocation, or host memory a CPU device with
// unified addressing reaches; otherwise copies (copy=None) or refuses (copy=False).
nb::object from_dlpack(nb::handle obj, std::optional<Device> device, std::optional<bool> copy) {
  ensure_runtime();
  if (nb::isinstance<Buffer>(obj)) {
    Buffer& buffer = nb::cast<Buffer&>(obj);
    buffer.get();
    if (device && !(*device == buffer.device))
      raise_hal(HAL_ERROR_DEVICE_MISMATCH, "hal.from_dlpack: the Buffer belongs to device " +
                                               std::to_string(buffer.device.index) +
                                               ", not to device " + std::to_string(device->index) +
                                               "; copy it with hal.empty(...).copy_from(buf)");
    if (!(copy && *copy)) return nb::borrow(obj);
    auto* fresh = new Buffer(buffer.device, buffer.shape, *buffer.dtype, HAL_MEMORY_DEVICE);
    nb::object result = nb::cast(fresh, nb::rv_policy::take_ownership);
    if (buffer.nbytes)
      copy_bytes(fresh->ptr, buffer.get(), buffer.nbytes, nullptr, buffer.device, nb::object(),
                 {fresh, &buffer});
    return result;
  }
  HostArray host = import_array(obj, "hal.from_dlpack");
  hal_memory_info_t info{};
  info.struct_size = sizeof info;
  const bool in_hal = host.nbytes && hal_mem_get_info(host.data, &info) == HAL_SUCCESS;
  if (in_hal) {
    Device owner = device_of(info.device);
    if (device && !(*device == owner))
      raise_hal(HAL_ERROR_DEVICE_MISMATCH,
                "hal.from_dlpack: the array lives in an allocation of device " +
                    std::to_string(owner.index) + ", not of device " +
                    std::to_string(device->index));
    if (copy && *copy)
      device = owner;
    else
      return wrap_host_array(owner, host, info.kind);
  }
  Device target = device ? *device : device_at(0);
  const hal_device_properties_t props = target.raw();
  const bool reaches_host =
      props.type == HAL_DEVICE_TYPE_CPU && (props.capabilities & HAL_DEVICE_CAP_UNIFIED_ADDRESSING);
  if (!(copy && *copy) && reaches_host && !in_hal) return wrap_host_array(target, host, kExternal);
  if (copy && !*copy)
    raise_hal(HAL_ERROR_UNSUPPORTED,
              "hal.from_dlpack(copy=False): device " + std::to_string(target.index) +
                  " cannot use this host memory in place (only a CPU device with unified "
                  "addressing can); pass copy=None to copy it");
  auto* buffer = new Buffer(target, host.shape, *host.dtype, HAL_MEMORY_DEVICE);
  nb::object result = nb::cast(buffer, nb::rv_policy::take_ownership);
  if (host.nbytes)
    copy_bytes(buffer->ptr, host.data, host.nbytes, nullptr, target, nb::object(), {buffer});
  return result;
}

// ---- modules and kernels -----------------------------------------------------

struct Module : Resource {
  Device device;
  hal_module_t handle = nullptr;
  Module(const Device& dev, hal_module_format_t format, const std::string* source,
         const std::string* path)
      : device(dev) {
    hal_module_desc_t desc{};
    desc.struct_size = sizeof desc;
    desc.format = format;
    if (source) {
      desc.data = source->data();
      desc.size = source->size();
    }
    if (path) desc.path = path->c_str();
    hal_device_t d = device.get();
    hal_result_t result;
    {
      InUse use({this});
      nb::gil_scoped_release unlocked;  // a dialect module compiles here
      result = hal_module_load(d, &desc, &handle);
    }
    check(result);
  }
  ~Module() override { release(); }
  void release() noexcept override {
    if (!handle) return;
    hal_module_t module = handle;
    handle = nullptr;
    give_back_handle([module] { hal_module_unload(module); });  // waits for its launches
  }
  bool alive() const noexcept override { return handle != nullptr; }
  hal_module_t get() const {
    if (!handle)
      raise_hal(HAL_ERROR_DESTROYED_HANDLE, "the Module was unloaded (or hal.shutdown ran)");
    device.get();
    return handle;
  }
};

struct Kernel {
  nb::object module;  // keeps the Module (and so this handle) alive
  hal_kernel_t handle = nullptr;
  std::string name;
  std::vector<hal_arg_type_t> arg_types;
  uint32_t max_threads_per_block = 0;

  Module& owner() const { return nb::cast<Module&>(module); }
  hal_kernel_t get() const {
    owner().get();
    return handle;
  }
};

Kernel get_kernel(nb::handle module_handle, const std::string& name) {
  Module& module = nb::cast<Module&>(module_handle);
  hal_kernel_desc_t desc{};
  desc.struct_size = sizeof desc;
  desc.name = name.c_str();
  Kernel kernel;
  check(hal_kernel_get(module.get(), &desc, &kernel.handle));
  hal_kernel_info_t info{};
  info.struct_size = sizeof info;
  check(hal_kernel_get_info(kernel.handle, &info));
  kernel.module = nb::borrow(module_handle);
  kernel.name = name;
  kernel.arg_types.assign(info.arg_types, info.arg_types + info.arg_count);
  kernel.max_threads_per_block = info.max_threads_per_block;
  return kernel;
}

std::string signature(const Kernel& kernel) {
  std::string out = kernel.name + "(";
  for (size_t i = 0; i < kernel.arg_types.size(); ++i)
    out += std::string(i ? ", " : "") + hal::util::arg_type_name(kernel.arg_types[i]);
  return out + ")";
}

std::array<uint32_t, 3> dims(nb::handle value, const char* what) {
  std::array<uint32_t, 3> out{1, 1, 1};
  auto one = [&](nb::handle v) -> uint32_t {
    if (PyBool_Check(v.ptr()) || !PyIndex_Check(v.ptr()))
      throw nb::type_error(
          (std::string(what) + " must be an int or a tuple of 1 to 3 ints").c_str());
    nb::object index = nb::steal(PyNumber_Index(v.ptr()));
    if (!index.is_valid()) throw nb::python_error();
    long long x = nb::cast<long long>(index);
    if (x < 0 || x > UINT32_MAX)
      throw nb::value_error((std::string(what) + " entries must be in [0, 2**32)").c_str());
    return static_cast<uint32_t>(x);
  };
  if (nb::isinstance<nb::tuple>(value) || nb::isinstance<nb::list>(value)) {
    nb::sequence seq = nb::borrow<nb::sequence>(value);
    size_t n = nb::len(seq);
    if (n < 1 || n > 3)
      throw nb::value_error((std::string(what) + " must have 1 to 3 entries").c_str());
    for (size_t i = 0; i < n; ++i) out[i] = one(seq[i]);
  } else {
    out[0] = one(value);
  }
  return out;
}

// One kernel argument's bytes, converted by the signature's type.
union ArgValue {
  void* pointer;
  int32_t i32;
  uint32_t u32;
  int64_t i64;
  uint64_t u64;
  float f32;
  double f64;
};

size_t convert_arg(const Kernel& kernel, size_t i, nb::handle value, ArgValue& out,
                   std::vector<Resource*>& used, bool read_only_allowed) {
  const hal_arg_type_t type = kernel.arg_types[i];
  auto where = [&] {
    return "argument " + std::to_string(i) + " of " + signature(kernel) + " (" +
           hal::util::arg_type_name(type) + ")";
  };
  if (type == HAL_ARG_POINTER) {
    if (!nb::isinstance<Buffer>(value))
      throw nb::type_error(
          (where() + " must be a hal.Buffer, got " + nb::cast<std::string>(nb::str(value.type())))
              .c_str());
    Buffer& buffer = nb::cast<Buffer&>(value);
    void* p = buffer.get();
    if (buffer.read_only && !read_only_allowed)
      raise_hal(HAL_ERROR_INVALID_ARGUMENT,
                where() +
                    " is a read-only buffer (it wraps a read-only array), and a kernel's "
                    "signature does not say what it writes: pass a writable copy "
                    "(hal.to_device(array)); @hal.kernel functions take read-only buffers for "
                    "the arrays they only read");
    if (!(buffer.device == kernel.owner().device))
      raise_hal(HAL_ERROR_DEVICE_MISMATCH, where() + " is a buffer of device " +
                                               std::to_string(buffer.device.index) +
                                               ", the kernel is loaded on device " +
                                               std::to_string(kernel.owner().device.index));
    out.pointer = p;
    used.push_back(&buffer);
    return sizeof(void*);
  }
  const bool is_float = type == HAL_ARG_F32 || type == HAL_ARG_F64;
  if (nb::isinstance<Buffer>(value) || PyBool_Check(value.ptr()) ||
      (!is_float && !PyIndex_Check(value.ptr())) ||
      (is_float && !PyIndex_Check(value.ptr()) && !PyFloat_Check(value.ptr()) &&
       !nb::hasattr(value, "__float__")))
    throw nb::type_error((where() + " must be " + (is_float ? "a float" : "an int") + ", got " +
                          nb::cast<std::string>(nb::str(value.type())))
                             .c_str());
  if (is_float) {
    const double v = python_float(value);
    if (type == HAL_ARG_F32) {
      out.f32 = static_cast<float>(v);
      return 4;
    }
    out.f64 = v;
    return 8;
  }
  // Stores the integer as T into |field|; false when it does not fit.
  const auto store = [&]<typename T>(T& field) {
    const std::optional<T> v = python_integer<T>(value);
    if (v) field = *v;
    return v.has_value();
  };
  bool fits = false;
  switch (type) {
    case HAL_ARG_I32:
      fits = store(out.i32);
      break;
    case HAL_ARG_U32:
      fits = store(out.u32);
      break;
    case HAL_ARG_I64:
      fits = store(out.i64);
      break;
    case HAL_ARG_U64:
      fits = store(out.u64);
      break;
    default:
      raise_hal(HAL_ERROR_INTERNAL, where() + ": unknown argument type");
  }
  if (!fits)
    throw nb::value_error(
        (where() + ": " + nb::cast<std::string>(nb::repr(value)) + " is out of range").c_str());
  return (type == HAL_ARG_I32 || type == HAL_ARG_U32) ? 4 : 8;
}

void launch(const Kernel& kernel, nb::handle grid, nb::handle block, nb::args args, Stream* stream,
            uint32_t shared_memory_bytes, std::vector<size_t> read_only_args) {
  hal_kernel_t handle = kernel.get();
  if (args.size() != kernel.arg_types.size())
    throw nb::type_error((signature(kernel) + " takes " + std::to_string(kernel.arg_types.size()) +
                          " arguments, got " + std::to_string(args.size()))
                             .c_str());
  std::vector<ArgValue> values(args.size());
  std::vector<hal_kernel_arg_t> raw(args.size());
  std::vector<Resource*> used{&kernel.owner()};
  for (size_t i = 0; i < args.size(); ++i) {
    const bool read_only_allowed =
        std::find(read_only_args.begin(), read_only_args.end(), i) != read_only_args.end();
    raw[i].size = convert_arg(kernel, i, args[i], values[i], used, read_only_allowed);
    raw[i].value = &values[i];
  }
  hal_launch_config_t config{};
  config.struct_size = sizeof config;
  auto g = dims(grid, "grid"), b = dims(block, "block");
  std::copy(g.begin(), g.end(), config.grid);
  std::copy(b.begin(), b.end(), config.block);
  config.shared_memory_bytes = shared_memory_bytes;
  Stream& s = stream_or_default(stream, kernel.owner().device);
  hal_stream_t h = s.get();
  hal_result_t result;
  {
    used.push_back(&s);
    InUse use(std::move(used));
    nb::gil_scoped_release unlocked;
    result = hal_launch_kernel(handle, &config, static_cast<uint32_t>(raw.size()), raw.data(), h);
  }
  check(result);
}

// ---- collectives -------------------------------------------------------------

struct Communicator : Resource {
  Device device;
  hal_comm_t handle = nullptr;
  Communicator(const Device& dev, hal_comm_t h) : device(dev), handle(h) {}
  ~Communicator() override { release(); }
  void release() noexcept override {
    if (!handle) return;
    hal_comm_t comm = handle;
    handle = nullptr;
    give_back_handle([comm] { hal_comm_destroy(comm); });
  }
  bool alive() const noexcept override { return handle != nullptr; }
  hal_comm_t get() const {
    if (!handle)
      raise_hal(HAL_ERROR_DESTROYED_HANDLE, "the Communicator was closed (or hal.shutdown ran)");
    device.get();
    return handle;
  }
  uint32_t size() const {
    uint32_t n = 0;
    check(hal_comm_count(get(), &n));
    return n;
  }
  uint32_t rank() const {
    uint32_t r = 0;
    check(hal_comm_rank(get(), &r));
    return r;
  }
};

hal_comm_config_t comm_config(uint32_t timeout_ms) {
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.timeout_ms = timeout_ms;
  return config;
}

nb::bytes comm_unique_id() {
  ensure_runtime();
  hal_comm_unique_id_t id{};
  hal_result_t result;
  {
    nb::gil_scoped_release unlocked;
    result = hal_comm_get_unique_id(&id);
  }
  check(result);
  return nb::bytes(reinterpret_cast<const char*>(id.bytes), sizeof id.bytes);
}

Communicator* comm_init_rank(const Device& device, uint32_t nranks, nb::bytes unique_id,
                             uint32_t rank, uint32_t timeout_ms) {
  if (unique_id.size() != HAL_COMM_UNIQUE_ID_BYTES)
    throw nb::value_error(("unique_id must be the " + std::to_string(HAL_COMM_UNIQUE_ID_BYTES) +
                           " bytes of hal.comm_unique_id(), got " +
                           std::to_string(unique_id.size()))
                              .c_str());
  hal_comm_unique_id_t id{};
  std::memcpy(id.bytes, unique_id.c_str(), sizeof id.bytes);
  hal_comm_config_t config = comm_config(timeout_ms);
  hal_device_t d = device.get();
  hal_comm_t comm = nullptr;
  hal_result_t result;
  {
    nb::gil_scoped_release unlocked;  // waits for every rank to join
    result = hal_comm_init_rank(d, nranks, &id, rank, &config, &comm);
  }
  check(result);
  return new Communicator(device, comm);
}

std::vector<nb::object> comm_init_all(const std::vector<Device>& devices, uint32_t timeout_ms) {
  std::vector<hal_device_t> handles;
  for (const Device& d : devices) handles.push_back(d.get());
  std::vector<hal_comm_t> comms(devices.size());
  hal_comm_config_t config = comm_config(timeout_ms);
  hal_result_t result;
  {
    nb::gil_scoped_release unlocked;
    result = hal_comm_init_all(static_cast<uint32_t>(handles.size()), handles.data(), &config,
                               comms.data());
  }
  check(result);
  std::vector<nb::object> out;
  for (size_t i = 0; i < comms.size(); ++i)
    out.push_back(nb::cast(new Communicator(devices[i], comms[i]), nb::rv_policy::take_ownership));
  return out;
}

hal_reduce_op_t reduce_op(const std::string& op) {
  return static_cast<hal_reduce_op_t>(value_of(hal::util::reduce_op_table(), op, "reduce op"));
}

void same_dtype(const Buffer& a, const Buffer& b, const char* what) {
  if (a.dtype != b.dtype)
    throw nb::type_error(
        (std::string(what) + ": send is " + a.dtype->name + ", recv is " + b.dtype->name).c_str());
}

void need_size(size_t have, size_t want, const char* what, const char* which) {
  if (have != want)
    throw nb::value_error((std::string(what) + ": " + which + " has " + std::to_string(have) +
                           " elements, expected " + std::to_string(want))
                              .c_str());
}

// hal.group() depth on this thread: a call that must wait cannot run inside one.
thread_local int t_open_groups = 0;

template <typename Call>
void collective(Communicator& comm, Stream* stream, std::vector<Resource*> buffers, Call&& call) {
  hal_comm_t c = comm.get();
  Stream& st = stream_or_default(stream, comm.device);
  hal_stream_t s = st.get();
  hal_result_t result;
  {
    buffers.push_back(&comm);
    buffers.push_back(&st);
    InUse use(std::move(buffers));
    nb::gil_scoped_release unlocked;
    result = call(c, s);
  }
  check(result);
}

}  // namespace
}  // namespace halpy

using namespace halpy;

// ---- the module --------------------------------------------------------------

NB_MODULE(_hal, m) {
  m.doc() = "HAL's C ABI for Python (the extension behind the hal package)";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const HalError& e) {
      nb::object errors = nb::module_::import_("hal._errors");
      nb::object error = errors.attr("_make")(static_cast<int>(e.code), e.message, e.function,
                                              e.plugin, e.native_code);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
    }
  });

  m.def("init", &init_runtime, "plugins"_a = nb::none(), "plugin_path"_a = nb::none(),
        "Loads HAL's plugins (once; later calls do nothing until shutdown). Other calls "
        "initialise HAL on first use with the environment's settings.");
  m.def(
      "shutdown", [] { return shutdown_runtime(false); },
      "Releases every live HAL object (newest first) and shuts HAL down. Raises "
      "InvalidStateError while DLPack views of HAL buffers are alive. Returns False when HAL "
      "was not initialised.");
  m.def("_shutdown_at_exit", [] { return shutdown_runtime(true); });
  m.def("is_initialized", [] { return g_runtime.initialized; });
  m.def(
      "version",
      [] {
        uint32_t v = hal_get_version();
        return std::make_tuple(HAL_VERSION_MAJOR(v), HAL_VERSION_MINOR(v), HAL_VERSION_PATCH(v));
      },
      "The (major, minor, patch) of the loaded libhal.");
  m.def(
      "result_names",
      [] {
        std::vector<std::pair<uint32_t, std::string>> names;
        for (const auto& e : hal::util::result_table()) names.emplace_back(e.value, e.enumerator);
        return names;
      },
      "Every result code with its enumerator name, from HAL's name table.");
  m.def("_raise", [](int code, const std::string& message) {
    raise_hal(static_cast<hal_result_t>(code), message);
  });

  nb::class_<DeviceProperties>(m, "DeviceProperties")
      .def_ro("name", &DeviceProperties::name)
      .def_ro("vendor", &DeviceProperties::vendor)
      .def_ro("plugin", &DeviceProperties::plugin)
      .def_ro("driver_version", &DeviceProperties::driver_version)
      .def_ro("type", &DeviceProperties::type)
      .def_ro("uuid", &DeviceProperties::uuid)
      .def_ro("index", &DeviceProperties::index)
      .def_ro("plugin_device_index", &DeviceProperties::plugin_device_index)
      .def_ro("compute_units", &DeviceProperties::compute_units)
      .def_ro("total_memory_bytes", &DeviceProperties::total_memory_bytes)
      .def_ro("max_allocation_bytes", &DeviceProperties::max_allocation_bytes)
      .def_ro("min_alignment_bytes", &DeviceProperties::min_alignment_bytes)
      .def_ro("max_threads_per_block", &DeviceProperties::max_threads_per_block)
      .def_ro("max_block_dims", &DeviceProperties::max_block_dims)
      .def_ro("max_grid_dims", &DeviceProperties::max_grid_dims)
      .def_ro("max_shared_memory_bytes", &DeviceProperties::max_shared_memory_bytes)
      .def_ro("subgroup_size", &DeviceProperties::subgroup_size)
      .def_ro("capabilities", &DeviceProperties::capabilities,
              "Short names of the declared capabilities (HAL_DEVICE_CAP_*), e.g. 'kernels'.")
      .def_ro("module_formats", &DeviceProperties::module_formats,
              "Short names of the loadable module formats, e.g. 'hal_dialect'.")
      .def_ro("peak_fp32_flops", &DeviceProperties::peak_fp32_flops)
      .def_ro("peak_memory_bandwidth", &DeviceProperties::peak_memory_bandwidth);

  nb::class_<Device>(m, "Device")
      .def_ro("index", &Device::index)
      .def_prop_ro("properties", &properties_of)
      .def(
          "has_capability",
          [](const Device& d, const std::string& name) {
            uint32_t bit = value_of(hal::util::capability_table(), name, "capability");
            return d.has(bit);
          },
          "name"_a, "True when the device declares the capability (short name or enumerator).")
      .def("synchronize", &Device::synchronize)
      .def("__eq__", [](const Device& a, const Device& b) { return a == b; })
      .def("__hash__", [](const Device& d) { return std::hash<const void*>()(d.handle); })
      .def("__repr__",
           [](const Device& d) { return "<hal.Device " + std::to_string(d.index) + ">"; });

  m.def("device_count", [] {
    ensure_runtime();
    uint32_t n = 0;
    check(hal_device_count(&n));
    return n;
  });
  m.def("device", &device_at, "index"_a);
  m.def(
      "devices",
      [] {
        ensure_runtime();
        uint32_t n = 0;
        check(hal_device_count(&n));
        std::vector<Device> out;
        for (uint32_t i = 0; i < n; ++i) out.push_back(device_at(i));
        return out;
      },
      "Every device of every loaded plugin, in the loader's order.");

  nb::class_<Stream>(m, "Stream")
      .def(nb::init<const Device&>(), "device"_a)
      .def_ro("device", &Stream::device)
      .def("synchronize", &Stream::synchronize,
           "Waits for the stream's work (GIL released); re-raises the first exception a host "
           "function raised since the last synchronize.")
      .def("query", &Stream::query, "True when all enqueued work has completed.")
      .def(
          "wait_event", [](Stream& s, Event& e) { check(hal_stream_wait_event(s.get(), e.get())); },
          "event"_a)
      .def("enqueue_host_fn", &Stream::enqueue_host_fn, "fn"_a,
           "Runs fn() after the work enqueued so far, on a plugin thread holding the GIL.")
      .def("close", [](Stream& s) { close_resource(s, "Stream"); })
      .def_prop_ro(
          "_in_use", [](const Stream& s) { return s.in_use; },
          "Calls of other threads inside this stream now (for tests).")
      .def_prop_ro("closed", [](const Stream& s) { return !s.alive(); });

  nb::class_<Event>(m, "Event")
      .def(nb::init<const Device&, bool>(), "device"_a, "timing"_a = false)
      .def_ro("device", &Event::device)
      .def(
          "record", [](Event& e, Stream& s) { check(hal_event_record(e.get(), s.get())); },
          "stream"_a)
      .def("synchronize", &Event::synchronize)
      .def("query", &Event::query)
      .def("elapsed_ms", &Event::elapsed_ms, "end"_a,
           "Milliseconds from this event to |end| (both timing events, both complete).")
      .def("close", [](Event& e) { close_resource(e, "Event"); })
      .def_prop_ro("closed", [](const Event& e) { return !e.alive(); });

  nb::class_<Buffer>(m, "Buffer")
      .def(
          "__init__",
          [](Buffer* self, const Device& device, nb::handle shape, nb::handle dtype,
             const std::string& kind) {
            std::vector<size_t> dims_;
            if (PyIndex_Check(shape.ptr())) {
              long long n = nb::cast<long long>(shape);
              if (n < 0) throw nb::value_error("shape entries must be >= 0");
              dims_.push_back(static_cast<size_t>(n));
            } else {
              for (nb::handle extent : nb::iter(shape)) {
                long long n = nb::cast<long long>(extent);
                if (n < 0) throw nb::value_error("shape entries must be >= 0");
                dims_.push_back(static_cast<size_t>(n));
              }
            }
            int k = static_cast<int>(value_of(hal::util::memory_kind_table(), kind, "memory kind"));
            new (self) Buffer(device, std::move(dims_), dtype_of(dtype), k);
          },
          "device"_a, "shape"_a, "dtype"_a = "float32", "kind"_a = "device",
          nb::sig("def __init__(self, device: Device, shape: int | Sequence[int], "
                  "dtype: object = 'float32', kind: str = 'device') -> None"),
          "Allocates shape x dtype of 'device', 'host' or 'shared' memory on the device.")
      .def_ro("device", &Buffer::device)
      .def_ro("nbytes", &Buffer::nbytes)
      .def_prop_ro("shape", [](const Buffer& b) { return nb::tuple(nb::cast(b.shape)); })
      .def_prop_ro("dtype", [](const Buffer& b) { return b.dtype->name; })
      .def_prop_ro(
          "kind", [](const Buffer& b) { return std::string(kind_name(b.kind)); },
          "'device', 'host', 'shared', or 'external' (wrapped memory HAL did not "
          "allocate).")
      .def_prop_ro("size", &Buffer::size)
      .def_prop_ro("ndim", [](const Buffer& b) { return b.shape.size(); })
      .def_prop_ro("ptr", [](const Buffer& b) { return reinterpret_cast<uintptr_t>(b.get()); })
      .def_prop_ro("closed", [](const Buffer& b) { return !b.alive(); })
      .def_ro("read_only", &Buffer::read_only,
              "True when the buffer wraps a read-only array (hal.from_dlpack of numpy with "
              "writeable=False, of a JAX array, of a read-only DLPack export): writes to it "
              "raise InvalidArgumentError.")
      .def(
          "__array__",
          [](nb::handle self, nb::object dtype, nb::object copy) {
            Buffer& b = nb::cast<Buffer&>(self);
            return numpy_array_of(self, b, dtype, copy,
                                  [&] { return buffer_to_numpy(b, nullptr); });
          },
          "dtype"_a = nb::none(), nb::kw_only(), "copy"_a = nb::none(),
          nb::sig("def __array__(self, dtype: object = None, *, copy: bool | None = None) -> "
                  "numpy.typing.NDArray[typing.Any]"),
          "numpy.asarray(buf): a view of host-visible memory (a copy with copy=True, or of "
          "memory the host cannot read).")
      .def("copy_from", &buffer_copy_from, "src"_a, "stream"_a = nb::none(),
           "Copies a Buffer or a C-contiguous host array of the same size and dtype into this "
           "buffer; synchronous without a stream, else asynchronous on it.")
      .def("to_numpy", &buffer_to_numpy, "stream"_a = nb::none(),
           nb::sig("def to_numpy(self, stream: Stream | None = None) -> "
                   "numpy.typing.NDArray[typing.Any]"),
           "A new numpy array with a copy of the contents.")
      .def(
          "fill",
          [](Buffer& b, nb::handle byte, Stream* stream) {
            void* p = b.get();
            b.check_writable("fill");
            if (PyBool_Check(byte.ptr()) || !PyIndex_Check(byte.ptr()))
              throw nb::type_error(("fill(byte): byte must be an int in 0..255, got " +
                                    nb::cast<std::string>(nb::str(byte.type())))
                                       .c_str());
            const std::optional<uint8_t> value = python_integer<uint8_t>(byte);
            if (!value)
              throw nb::value_error(
                  ("fill(byte): " + nb::cast<std::string>(nb::repr(byte)) +
                   " is not a byte: fill sets every byte of the buffer to one value in 0..255" +
                   (b.dtype->size > 1
                        ? " (this " + b.dtype->name + " buffer's elements take the byte repeated)"
                        : std::string()))
                      .c_str());
            if (!stream) b.device.synchronize();
            Stream& s = stream_or_default(stream, b.device);
            hal_stream_t h = s.get();
            hal_result_t result;
            {
              InUse use({&b, &s});
              nb::gil_scoped_release unlocked;
              result = hal_memset_async(p, *value, b.nbytes, h);
            }
            check(result);
            if (!stream) s.synchronize();
          },
          "byte"_a, "stream"_a = nb::none(),
          nb::sig("def fill(self, byte: int, stream: Stream | None = None) -> None"),
          "Sets every byte to |byte| (an int in 0..255).")
      .def(
          "close", [](Buffer& b) { close_resource(b, "Buffer"); },
          "Frees the memory now (waits for the device's work).")
      .def("__dlpack__", &buffer_dlpack, nb::kw_only(), "stream"_a = nb::none(),
           "max_version"_a = nb::none(), "dl_device"_a = nb::none(), "copy"_a = nb::none(),
           nb::sig("def __dlpack__(self, *, stream: Stream | int | None = None, "
                   "max_version: tuple[int, int] | None = None, "
                   "dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> "
                   "typing_extensions.CapsuleType"),
           "A DLPack capsule over this buffer (kDLCPU); the device is synchronised first.")
      .def("__dlpack_device__",
           [](Buffer& b) -> std::tuple<int, int> {
             b.get();
             if (!b.host_visible())
               raise_hal(HAL_ERROR_UNSUPPORTED,
                         "__dlpack_device__: the buffer is not host-visible");
             return std::make_tuple(1, 0);  // kDLCPU, device 0
           })
      .def("__len__", [](const Buffer& b) { return b.shape.empty() ? size_t(1) : b.shape[0]; })
      .def("__repr__", [](const Buffer& b) {
        std::string shape;
        for (size_t d : b.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
        return "<hal.Buffer (" + shape + ") " + b.dtype->name + " " + kind_name(b.kind) +
               " on device " + std::to_string(b.device.index) + (b.alive() ? "" : " (freed)") + ">";
      });

  nb::class_<ExportGuard>(m, "_ExportGuard");

  m.def("from_dlpack", &from_dlpack, "array"_a, "device"_a = nb::none(), "copy"_a = nb::none(),
        nb::sig("def from_dlpack(array: object, device: Device | None = None, "
                "copy: bool | None = None) -> Buffer"),
        "Wraps a DLPack producer (numpy, JAX, torch, a capsule) as a Buffer: without a copy when "
        "the memory is a HAL allocation or host memory a CPU device with unified addressing "
        "uses; otherwise a copy into device memory (copy=None) or UnsupportedError (copy=False).");

  nb::class_<Module>(m, "Module")
      .def(
          "__init__",
          [](Module* self, const Device& device, std::optional<std::string> source,
             std::optional<std::string> path, const std::string& format) {
            if (source.has_value() == path.has_value())
              throw nb::value_error("Module: pass exactly one of source= and path=");
            auto f = static_cast<hal_module_format_t>(
                value_of(hal::util::module_format_table(), format, "module format"));
            new (self) Module(device, f, source ? &*source : nullptr, path ? &*path : nullptr);
          },
          "device"_a, "source"_a = nb::none(), "path"_a = nb::none(), "format"_a = "hal_dialect",
          "Loads a module: dialect source (format='hal_dialect'), or a file such as a CPU shared "
          "object (path=..., format='cpu_shared_object').")
      .def_ro("device", &Module::device)
      .def("kernel", &get_kernel, "name"_a,
           "The kernel |name|, its signature taken from the module.")
      .def("close", [](Module& mod) { close_resource(mod, "Module"); })
      .def_prop_ro("closed", [](const Module& mod) { return !mod.alive(); });

  nb::class_<Kernel>(m, "Kernel")
      .def_ro("name", &Kernel::name)
      .def_ro("max_threads_per_block", &Kernel::max_threads_per_block)
      .def_prop_ro(
          "arg_types",
          [](const Kernel& k) {
            std::vector<std::string> names;
            for (auto t : k.arg_types) names.emplace_back(hal::util::arg_type_name(t));
            return names;
          },
          "The signature: 'pointer', 'i32', 'u32', 'i64', 'u64', 'f32', 'f64'.")
      .def_prop_ro("module", [](const Kernel& k) { return k.module; })
      .def("launch", &launch, "grid"_a, "block"_a, "args"_a, nb::kw_only(), "stream"_a = nb::none(),
           "shared_memory_bytes"_a = 0, "_read_only_args"_a = std::vector<size_t>(),
           nb::sig("def launch(self, grid: int | Sequence[int], block: int | Sequence[int], "
                   "*args: Buffer | int | float, stream: Stream | None = None, "
                   "shared_memory_bytes: int = 0) -> None"),
           "Enqueues the kernel (asynchronously) over grid x block; each argument converts by the "
           "signature: a Buffer of the kernel's device for 'pointer', an int or numpy integer for "
           "integer types, a float for 'f32'/'f64'.")
      .def("__repr__", [](const Kernel& k) { return "<hal.Kernel " + signature(k) + ">"; });

  nb::class_<Communicator>(m, "Communicator")
      .def_static("init_all", &comm_init_all, "devices"_a, "timeout_ms"_a = 0,
                  nb::sig("def init_all(devices: Sequence[Device], timeout_ms: int = 0) -> "
                          "list[Communicator]"),
                  "One communicator per device, all in this process (rank i on devices[i]).")
      .def_static("init_rank", &comm_init_rank, "device"_a, "nranks"_a, "unique_id"_a, "rank"_a,
                  "timeout_ms"_a = 0, nb::rv_policy::take_ownership,
                  "Joins rank |rank| of |nranks| through the unique id (bytes from "
                  "hal.comm_unique_id() in one process, passed to the others by any means).")
      .def_ro("device", &Communicator::device)
      .def_prop_ro("size", &Communicator::size)
      .def_prop_ro("rank", &Communicator::rank)
      .def(
          "check_async_error",
          [](Communicator& c) {
            hal_result_t error = HAL_SUCCESS;
            check(hal_comm_get_async_error(c.get(), &error));
            if (error != HAL_SUCCESS)
              raise_hal(error, "the communicator failed asynchronously",
                        "hal_comm_get_async_error");
          },
          "Raises the error an earlier collective hit asynchronously, if any.")
      .def("abort", [](Communicator& c) { check(hal_comm_abort(c.get())); })
      .def("close", [](Communicator& c) { close_resource(c, "Communicator"); })
      .def(
          "allreduce",
          [](Communicator& c, Buffer& send, Buffer& recv, const std::string& op, Stream* stream) {
            same_dtype(send, recv, "allreduce");
            need_size(recv.size(), send.size(), "allreduce", "recv");
            const void* sp = send.get();
            void* rp = recv.get();
            auto o = reduce_op(op);
            collective(c, stream, {&send, &recv}, [&](hal_comm_t h, hal_stream_t s) {
              return hal_allreduce(sp, rp, send.size(), send.dtype->hal, o, h, s);
            });
          },
          "send"_a, "recv"_a, "op"_a = "sum", "stream"_a = nb::none())
      .def(
          "broadcast",
          [](Communicator& c, Buffer& send, Buffer& recv, uint32_t root, Stream* stream) {
            same_dtype(send, recv, "broadcast");
            need_size(recv.size(), send.size(), "broadcast", "recv");
            const void* sp = send.get();
            void* rp = recv.get();
            collective(c, stream, {&send, &recv}, [&](hal_comm_t h, hal_stream_t s) {
              return hal_broadcast(sp, rp, send.size(), send.dtype->hal, root, h, s);
            });
          },
          "send"_a, "recv"_a, "root"_a = 0, "stream"_a = nb::none())
      .def(
          "reduce",
          [](Communicator& c, Buffer& send, Buffer& recv, const std::string& op, uint32_t root,
             Stream* stream) {
            same_dtype(send, recv, "reduce");
            need_size(recv.size(), send.size(), "reduce", "recv");
            const void* sp = send.get();
            void* rp = recv.get();
            auto o = reduce_op(op);
            collective(c, stream, {&send, &recv}, [&](hal_comm_t h, hal_stream_t s) {
              return hal_reduce(sp, rp, send.size(), send.dtype->hal, o, root, h, s);
            });
          },
          "send"_a, "recv"_a, "op"_a = "sum", "root"_a = 0, "stream"_a = nb::none())
      .def(
          "allgather",
          [](Communicator& c, Buffer& send, Buffer& recv, Stream* stream) {
            same_dtype(send, recv, "allgather");
            need_size(recv.size(), send.size() * c.size(), "allgather", "recv");
            const void* sp = send.get();
            void* rp = recv.get();
            collective(c, stream, {&send, &recv}, [&](hal_comm_t h, hal_stream_t s) {
              return hal_allgather(sp, rp, send.size(), send.dtype->hal, h, s);
            });
          },
          "send"_a, "recv"_a, "stream"_a = nb::none())
      .def(
          "reduce_scatter",
          [](Communicator& c, Buffer& send, Buffer& recv, const std::string& op, Stream* stream) {
            same_dtype(send, recv, "reduce_scatter");
            need_size(send.size(), recv.size() * c.size(), "reduce_scatter", "send");
            const void* sp = send.get();
            void* rp = recv.get();
            auto o = reduce_op(op);
            collective(c, stream, {&send, &recv}, [&](hal_comm_t h, hal_stream_t s) {
              return hal_reduce_scatter(sp, rp, recv.size(), recv.dtype->hal, o, h, s);
            });
          },
          "send"_a, "recv"_a, "op"_a = "sum", "stream"_a = nb::none())
      .def(
          "alltoall",
          [](Communicator& c, Buffer& send, Buffer& recv, Stream* stream) {
            same_dtype(send, recv, "alltoall");
            need_size(recv.size(), send.size(), "alltoall", "recv");
            const uint32_t n = c.size();
            if (send.size() % n)
              throw nb::value_error(
                  "alltoall: send's element count is not a multiple of the ranks");
            const void* sp = send.get();
            void* rp = recv.get();
            collective(c, stream, {&send, &recv}, [&](hal_comm_t h, hal_stream_t s) {
              return hal_alltoall(sp, rp, send.size() / n, send.dtype->hal, h, s);
            });
          },
          "send"_a, "recv"_a, "stream"_a = nb::none())
      .def(
          "alltoallv",
          [](Communicator& c, Buffer& send, std::vector<size_t> send_counts, Buffer& recv,
             std::optional<std::vector<size_t>> recv_counts, Stream* stream) {
            same_dtype(send, recv, "alltoallv");
            const uint32_t n = c.size();
            auto check_counts = [&](const std::vector<size_t>& counts, const Buffer& buffer,
                                    const char* name) {
              if (counts.size() != n) {
                throw nb::value_error(("alltoallv: " + std::string(name) + " has " +
                                       std::to_string(counts.size()) + " entries for " +
                                       std::to_string(n) + " ranks")
                                          .c_str());
              }
              size_t total = 0;
              for (size_t count : counts) {
                if (count > buffer.size() - total) {
                  throw nb::value_error(("alltoallv: " + std::string(name) +
                                         " add up to more "
                                         "than the buffer's " +
                                         std::to_string(buffer.size()) + " elements")
                                            .c_str());
                }
                total += count;
              }
            };
            check_counts(send_counts, send, "send_counts");
            const bool exchange = !recv_counts.has_value();
            if (exchange && t_open_groups > 0) {
              raise_hal(HAL_ERROR_INVALID_STATE,
                        "alltoallv without recv_counts waits for the counts, which cannot "
                        "happen inside hal.group(): pass recv_counts",
                        "alltoallv");
            }
            std::vector<size_t> received = exchange ? std::vector<size_t>(n) : *recv_counts;
            if (!exchange) check_counts(received, recv, "recv_counts");
            const void* sp = send.get();
            void* rp = recv.get();
            collective(c, stream, {&send, &recv}, [&](hal_comm_t h, hal_stream_t s) {
              if (exchange) {
                // One count per peer each way, then wait: the sizes decide the call.
                std::vector<int64_t> outgoing(send_counts.begin(), send_counts.end());
                std::vector<int64_t> incoming(n);
                if (hal_result_t r =
                        hal_alltoall(outgoing.data(), incoming.data(), 1, HAL_DTYPE_I64, h, s);
                    r != HAL_SUCCESS) {
                  return r;
                }
                if (hal_result_t r = hal_stream_synchronize(s); r != HAL_SUCCESS) {
                  // The stream was lost to the count exchange: the communicator's error (a
                  // peer gone, a deadline) is the cause, and the same on every rank.
                  hal_result_t async = HAL_SUCCESS;
                  if (hal_comm_get_async_error(h, &async) == HAL_SUCCESS && async != HAL_SUCCESS)
                    return async;
                  return r;
                }
                size_t total = 0;
                bool fits = true;
                for (uint32_t r = 0; r < n; ++r) {
                  received[r] = static_cast<size_t>(incoming[r]);
                  fits = fits && incoming[r] >= 0 && received[r] <= recv.size() - total;
                  if (fits) total += received[r];
                }
                if (!fits) {
                  // The peers are about to send: a call expecting nothing makes every rank
                  // fail the count check (ARGUMENT_MISMATCH) instead of waiting for us.
                  const std::vector<size_t> nothing(n, 0);
                  hal_alltoallv(sp, send_counts.data(), nullptr, rp, nothing.data(), nullptr,
                                send.dtype->hal, h, s);
                  raise_hal(HAL_ERROR_OUT_OF_BOUNDS,
                            "alltoallv: the peers send more elements than recv's " +
                                std::to_string(recv.size()),
                            "alltoallv");
                }
              }
              return hal_alltoallv(sp, send_counts.data(), nullptr, rp, received.data(), nullptr,
                                   send.dtype->hal, h, s);
            });
          },
          "send"_a, "send_counts"_a, "recv"_a, "recv_counts"_a = nb::none(),
          "stream"_a = nb::none(),
          "Uneven all-to-all: send_counts[r] elements to rank r, packed in rank order; "
          "recv_counts[r] from rank r, packed. Without recv_counts the ranks exchange their "
          "counts first and wait for them (not inside hal.group()).")
      .def(
          "send",
          [](Communicator& c, Buffer& buf, uint32_t peer, Stream* stream) {
            const void* p = buf.get();
            collective(c, stream, {&buf}, [&](hal_comm_t h, hal_stream_t s) {
              return hal_send(p, buf.size(), buf.dtype->hal, peer, h, s);
            });
          },
          "buffer"_a, "peer"_a, "stream"_a = nb::none())
      .def(
          "recv",
          [](Communicator& c, Buffer& buf, uint32_t peer, Stream* stream) {
            void* p = buf.get();
            collective(c, stream, {&buf}, [&](hal_comm_t h, hal_stream_t s) {
              return hal_recv(p, buf.size(), buf.dtype->hal, peer, h, s);
            });
          },
          "buffer"_a, "peer"_a, "stream"_a = nb::none());

  m.def("comm_unique_id", &comm_unique_id,
        "A new unique id (bytes) for Communicator.init_rank; this process serves its store.");
  m.def("group_start", [] {
    check(hal_group_start());
    ++t_open_groups;
  });
  m.def("group_end", [] {
    hal_result_t result;
    {
      nb::gil_scoped_release unlocked;
      result = hal_group_end();
    }
    if (t_open_groups > 0) --t_open_groups;
    check(result);
  });

  bind_ops(m);  // ops.cpp: hal.Tensor, hal.OpPlan
}
