#include "runtime.hpp"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <memory>
#include <sstream>

namespace hal_torch {

// ---- errors ---------------------------------------------------------------------------------

std::string hal_error_message(hal_result_t result, std::string_view context) {
  std::ostringstream out;
  out << context << ": ";
  // (a context that only repeats the function is dropped below by the caller's choice of words)
  hal_error_detail_t detail{};
  detail.struct_size = sizeof detail;
  const bool have_detail = hal_error_get_detail(&detail) == HAL_SUCCESS && detail.result == result;
  if (have_detail && detail.message && *detail.message) {
    // Messages usually start with their function already; say it once.
    const std::string_view message(detail.message);
    const std::string_view function(detail.function ? detail.function : "");
    if (!function.empty() && message.substr(0, function.size()) != function) {
      out << function << ": ";
    }
    out << message;
  } else {
    out << "the HAL call failed";
  }
  out << " [" << hal_result_string(result);
  if (have_detail && detail.plugin && *detail.plugin) out << ", plugin " << detail.plugin;
  if (have_detail && detail.native_code != 0) out << ", native code " << detail.native_code;
  out << "]";
  return out.str();
}

namespace {
std::atomic<CollectiveFailureProbe> collective_failure_probe{nullptr};
}  // namespace

void set_collective_failure_probe(CollectiveFailureProbe probe) {
  collective_failure_probe.store(probe);
}

void raise_hal_error(hal_result_t result, std::string_view context, ErrorDomain domain) {
  std::string message = hal_error_message(result, context);
  const c10::SourceLocation where{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
  if (result == HAL_ERROR_DEVICE_LOST) {
    const CollectiveFailureProbe probe = collective_failure_probe.load();
    const std::string failed = probe != nullptr ? probe() : std::string();
    if (!failed.empty()) {
      throw c10::DistBackendError(where, message + " (after a collective failed: " + failed + ")");
    }
  }
  switch (result) {
    case HAL_ERROR_OUT_OF_MEMORY:
      throw c10::OutOfMemoryError(where, std::move(message));
    case HAL_ERROR_INVALID_ARGUMENT:
    case HAL_ERROR_NULL_POINTER:
    case HAL_ERROR_INVALID_SIZE:
    case HAL_ERROR_OUT_OF_BOUNDS:
    case HAL_ERROR_ARGUMENT_MISMATCH:
      if (domain == ErrorDomain::kCollective)
        throw c10::DistBackendError(where, std::move(message));
      throw c10::ValueError(where, std::move(message));
    case HAL_ERROR_NOT_FOUND:
      throw c10::IndexError(where, std::move(message));
    case HAL_ERROR_UNSUPPORTED:
      throw c10::NotImplementedError(where, std::move(message));
    case HAL_ERROR_TIMEOUT:
    case HAL_ERROR_REMOTE:
      if (domain == ErrorDomain::kCollective)
        throw c10::DistBackendError(where, std::move(message));
      throw c10::Error(where, std::move(message));
    case HAL_ERROR_DEVICE_LOST:
    case HAL_ERROR_INTERNAL:
      throw c10::AcceleratorError(where, static_cast<int32_t>(result), std::move(message));
    default:
      if (domain == ErrorDomain::kCollective)
        throw c10::DistBackendError(where, std::move(message));
      throw c10::Error(where, std::move(message));
  }
}

// ---- devices --------------------------------------------------------------------------------

namespace {

struct Runtime {
  std::once_flag once;
  std::string error;
  // unique_ptr: DeviceState holds a mutex and must not move. Leaked at exit
  // on purpose (see device_count).
  std::vector<std::unique_ptr<DeviceState>> devices;
};

Runtime& runtime() {
  static Runtime* const instance = new Runtime;  // never destroyed: outlives tensors
  return *instance;
}

void start(Runtime& rt) {
  const hal_result_t result = hal_init(nullptr);
  if (result != HAL_SUCCESS) {
    rt.error = hal_error_message(result, "hal_init");
    return;
  }
  uint32_t count = 0;
  if (const hal_result_t r = hal_device_count(&count); r != HAL_SUCCESS) {
    rt.error = hal_error_message(r, "hal_device_count");
    return;
  }
  // c10::DeviceIndex is 8 bits: devices past 127 are not reachable from torch.
  count = std::min<uint32_t>(count, 127);
  for (uint32_t i = 0; i < count; ++i) {
    auto state = std::make_unique<DeviceState>();
    state->properties.struct_size = sizeof state->properties;
    if (hal_device_get(i, &state->handle) != HAL_SUCCESS ||
        hal_device_get_properties(state->handle, &state->properties) != HAL_SUCCESS) {
      rt.error = hal_error_message(HAL_ERROR_INTERNAL, "hal_device_get_properties");
      break;
    }
    const hal_device_caps_t caps = state->properties.capabilities;
    state->host_accessible = (caps & HAL_DEVICE_CAP_UNIFIED_ADDRESSING) != 0;
    state->has_host_memory = (caps & HAL_DEVICE_CAP_HOST_MEMORY) != 0;
    state->has_event_timing = (caps & HAL_DEVICE_CAP_EVENT_TIMING) != 0;
    rt.devices.push_back(std::move(state));
  }
}

Runtime& started() {
  Runtime& rt = runtime();
  std::call_once(rt.once, [&] { start(rt); });
  return rt;
}

thread_local c10::DeviceIndex t_current_device = 0;

// This thread's current stream id per device; absent entries are 0 (default).
thread_local std::array<c10::StreamId, 128> t_current_stream{};

}  // namespace

int device_count() noexcept {
  return static_cast<int>(started().devices.size());
}

const std::string& init_error() {
  return started().error;
}

void check_device_index(c10::DeviceIndex index) {
  const int count = device_count();
  if (index < 0 || index >= count) {
    std::ostringstream message;
    message << "hal:" << static_cast<int>(index) << " does not exist: HAL has " << count
            << " device(s)";
    if (!init_error().empty()) message << " (" << init_error() << ")";
    C10_THROW_ERROR(IndexError, message.str());
  }
}

DeviceState& device_state(c10::DeviceIndex index) {
  check_device_index(index);
  return *started().devices[static_cast<size_t>(index)];
}

hal_device_t device_handle(c10::DeviceIndex index) {
  return device_state(index).handle;
}

c10::DeviceIndex index_of(const c10::Device& device) {
  TORCH_CHECK(device.type() == kHalDeviceType, "expected a hal device, got ", device);
  return device.has_index() ? device.index() : current_device();
}

c10::DeviceIndex current_device() noexcept {
  return t_current_device;
}

void set_current_device(c10::DeviceIndex index) {
  check_device_index(index);
  t_current_device = index;
}

void set_current_device_unchecked(c10::DeviceIndex index) noexcept {
  t_current_device = index;
}

// ---- streams --------------------------------------------------------------------------------

namespace {

// Stream |id| of |state|, made when it does not exist yet (ids up to size()).
hal_stream_t ensure_stream(DeviceState& state, c10::StreamId id) {
  std::lock_guard<std::mutex> lock(state.mutex);
  TORCH_CHECK(id >= 0 && id <= static_cast<c10::StreamId>(state.streams.size()) &&
                  id < kMaxStreamsPerDevice,
              "hal stream id ", id, " was never handed out");
  if (id < static_cast<c10::StreamId>(state.streams.size())) {
    return state.streams[static_cast<size_t>(id)];
  }
  hal_stream_t stream = nullptr;
  check(hal_stream_create(state.handle, 0, &stream), "creating a hal stream");
  state.streams.push_back(stream);
  return stream;
}

c10::Stream make_stream(c10::DeviceIndex index, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kHalDeviceType, index), id);
}

}  // namespace

hal_stream_t stream_handle(const c10::Stream& stream) {
  DeviceState& state = device_state(stream.device_index());
  const c10::StreamId id = stream.id();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (id >= 0 && id < static_cast<c10::StreamId>(state.streams.size())) {
      return state.streams[static_cast<size_t>(id)];
    }
  }
  TORCH_CHECK(id == 0, "hal stream id ", id, " of ", stream.device(), " was never handed out");
  return ensure_stream(state, 0);
}

c10::Stream default_stream(c10::DeviceIndex index) {
  ensure_stream(device_state(index), 0);
  return make_stream(index, 0);
}

c10::Stream pool_stream(c10::DeviceIndex index) {
  DeviceState& state = device_state(index);
  ensure_stream(state, 0);
  c10::StreamId id = 0;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    id = 1 + static_cast<c10::StreamId>(state.next_pool_stream++ % kPoolSize);
  }
  // Pool streams are made in order: every id below |id| exists before it.
  for (c10::StreamId i = 1; i <= id; ++i) ensure_stream(state, i);
  return make_stream(index, id);
}

c10::Stream new_stream(c10::DeviceIndex index) {
  DeviceState& state = device_state(index);
  for (c10::StreamId i = 0; i <= kPoolSize; ++i) ensure_stream(state, i);
  c10::StreamId id = 0;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    id = static_cast<c10::StreamId>(state.streams.size());
  }
  if (id >= kMaxStreamsPerDevice) return pool_stream(index);  // bounded: reuse the pool
  ensure_stream(state, id);
  return make_stream(index, id);
}

c10::Stream current_stream(c10::DeviceIndex index) {
  check_device_index(index);
  const c10::StreamId id = t_current_stream[static_cast<size_t>(index)];
  if (id == 0) return default_stream(index);
  return make_stream(index, id);
}

c10::Stream exchange_stream(const c10::Stream& stream) {
  const c10::DeviceIndex index = stream.device_index();
  const c10::Stream previous = current_stream(index);
  stream_handle(stream);  // checks that the stream exists
  t_current_stream[static_cast<size_t>(index)] = stream.id();
  return previous;
}

}  // namespace hal_torch
