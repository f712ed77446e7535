// performance.bandwidth: copy bandwidth per direction (host to device,
// device to host, device to device) with buffers far larger than caches.
#include <chrono>

#include "context.hpp"
#include "hal_objects.hpp"
#include "thresholds.hpp"

namespace halconform {
namespace {

enum class Direction { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// Repeats the copy until ~0.25 s have passed (after one warm-up copy) and
// records bytes per second; the declared peak is peak_memory_bandwidth.
void measure(TestContext& ctx, Direction direction, const char* metric) {
  const uint64_t size = std::min<uint64_t>(ctx.properties().max_allocation_bytes / 2, 64u << 20);
  Stream stream(ctx.device());
  Buffer device_a(ctx.device(), size), device_b(ctx.device(), size);
  std::vector<uint8_t> host(size, 1);
  void* dst =
      direction == Direction::kDeviceToHost ? static_cast<void*>(host.data()) : device_b.get();
  const void* src = direction == Direction::kHostToDevice ? static_cast<const void*>(host.data())
                                                          : device_a.get();
  HC_OK(hal_memset_async(device_a.get(), 2, size, stream));
  HC_OK(hal_memcpy_async(dst, src, size, stream));  // warm-up: first touch, caches
  HC_OK(hal_stream_synchronize(stream));
  const auto start = std::chrono::steady_clock::now();
  const CpuShare share;
  uint64_t copies = 0;
  double seconds = 0;
  while (seconds < 0.25 || copies < 3) {
    HC_OK(hal_memcpy_async(dst, src, size, stream));
    HC_OK(hal_stream_synchronize(stream));
    ++copies;
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const double achieved = static_cast<double>(size * copies) / seconds;
  const double declared = ctx.properties().peak_memory_bandwidth;
  ctx.record_metric(metric, achieved, "bytes/s", declared > 0 ? declared : NAN);
  ctx.note(strf("%llu copies of %llu bytes in %.3f s", static_cast<unsigned long long>(copies),
                static_cast<unsigned long long>(size), seconds));
  // Host<->device copies may legitimately run far below device memory
  // bandwidth (a bus in between), so only device-to-device has a floor.
  check_against_declared(metric, achieved, declared, direction == Direction::kDeviceToDevice,
                         share.of(ctx.properties()));
}

}  // namespace

HALCONFORM_TEST("performance.bandwidth.h2d", "host to device copy bandwidth (pageable host)", {}) {
  measure(ctx, Direction::kHostToDevice, "copy_bandwidth_h2d");
}

HALCONFORM_TEST("performance.bandwidth.d2h", "device to host copy bandwidth (pageable host)", {}) {
  measure(ctx, Direction::kDeviceToHost, "copy_bandwidth_d2h");
}

HALCONFORM_TEST("performance.bandwidth.d2d", "device to device copy bandwidth", {}) {
  measure(ctx, Direction::kDeviceToDevice, "copy_bandwidth_d2d");
}

}  // namespace halconform
