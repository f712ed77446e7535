// HAL as seen from PyTorch: the process's one HAL initialisation, its devices
// (torch's "hal:N" is HAL device N, whichever plugin serves it), their streams
// and the thread-local current device and stream, and the translation of a
// failed HAL call into PyTorch's own exception types.
#ifndef HAL_TORCH_RUNTIME_HPP_
#define HAL_TORCH_RUNTIME_HPP_

#include <hal.h>

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace hal_torch {

inline constexpr c10::DeviceType kHalDeviceType = c10::DeviceType::PrivateUse1;

// ---- errors ---------------------------------------------------------------------------------

// What a failed call is about, which decides the exception type for the codes
// that mean different things in different places (a timeout of a collective is
// a DistBackendError, of anything else a plain RuntimeError).
enum class ErrorDomain { kDevice, kCollective };

// Throws the PyTorch exception for |result|, with HAL's detail of the last
// failure on this thread (function, message, plugin, native code) after
// |context|. OUT_OF_MEMORY is torch.OutOfMemoryError, argument errors
// ValueError, UNSUPPORTED NotImplementedError, a lost device or a plugin's
// internal error torch.AcceleratorError (error_code = the HAL result), and in
// the collective domain TIMEOUT and REMOTE are DistBackendError; a lost stream
// after a collective failed is DistBackendError too (CollectiveFailureProbe).
[[noreturn]] void raise_hal_error(hal_result_t result, std::string_view context,
                                  ErrorDomain domain = ErrorDomain::kDevice);

// What the distributed backend knows of a failed collective: a non-empty description when
// one of this process's communicators has failed, else empty; never throws. A lost stream
// (HAL_ERROR_DEVICE_LOST) seen anywhere after that (a synchronization, a copy, the next
// collective's enqueue, an event record) is then raised as DistBackendError: the stream was
// lost because it waited for the failed collective, and a DDP step's caller must get
// PyTorch's exception for a failed process group, not a device error.
using CollectiveFailureProbe = std::string (*)() noexcept;
void set_collective_failure_probe(CollectiveFailureProbe probe);

inline void check(hal_result_t result, std::string_view context) {
  if (result != HAL_SUCCESS) raise_hal_error(result, context);
}

// The message raise_hal_error would use, without throwing (for warnings and
// for Work objects that fail later).
std::string hal_error_message(hal_result_t result, std::string_view context);

// ---- devices --------------------------------------------------------------------------------

struct DeviceState {
  hal_device_t handle = nullptr;
  hal_device_properties_t properties{};
  // Device memory the host can dereference (HAL_DEVICE_CAP_UNIFIED_ADDRESSING):
  // the CPU fallback then works on the device memory itself, no copies.
  bool host_accessible = false;
  bool has_host_memory = false;  // HAL_MEMORY_HOST allocations (pinned memory)
  bool has_event_timing = false;

  // The device's streams, by c10 StreamId: 0 is the default stream, the next
  // kPoolSize the pool torch.Stream() draws from, the rest made by
  // getNewStream. Streams live as long as the process (torch copies
  // c10::Stream values freely). Made on first use under |mutex|.
  std::mutex mutex;
  std::vector<hal_stream_t> streams;
  uint32_t next_pool_stream = 0;
};

inline constexpr int kPoolSize = 8;
inline constexpr int kMaxStreamsPerDevice = 1024;

// HAL device count; initialises HAL on first use (hal_init, never shut down:
// tensors and the caching allocator outlive every Python object). 0 when HAL
// could not start; init_error() then says why. Never throws.
int device_count() noexcept;
const std::string& init_error();

// The state of device |index|; raises IndexError for an index out of range.
DeviceState& device_state(c10::DeviceIndex index);
hal_device_t device_handle(c10::DeviceIndex index);
void check_device_index(c10::DeviceIndex index);

// The HAL device index of |device| (which must be a hal device; -1 is the current one).
c10::DeviceIndex index_of(const c10::Device& device);

// The current device of this thread (0 until set).
c10::DeviceIndex current_device() noexcept;
void set_current_device(c10::DeviceIndex index);
void set_current_device_unchecked(c10::DeviceIndex index) noexcept;

// ---- streams --------------------------------------------------------------------------------

hal_stream_t stream_handle(const c10::Stream& stream);
c10::Stream default_stream(c10::DeviceIndex index);
c10::Stream pool_stream(c10::DeviceIndex index);
c10::Stream new_stream(c10::DeviceIndex index);
// This thread's current stream of the device (the default stream until set).
c10::Stream current_stream(c10::DeviceIndex index);
// Makes |stream| current on its device for this thread; returns the previous one.
c10::Stream exchange_stream(const c10::Stream& stream);

// The HAL handle of this thread's current stream of |index|.
inline hal_stream_t current_hal_stream(c10::DeviceIndex index) {
  return stream_handle(current_stream(index));
}

}  // namespace hal_torch

#endif  // HAL_TORCH_RUNTIME_HPP_
