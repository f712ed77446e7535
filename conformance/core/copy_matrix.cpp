// core.memory.copy_matrix: copies and fills between every kind of memory
// the device declares and pageable host memory, in every direction (the list
// of kinds comes from the headers through the API model, so a new kind is in
// the matrix the day it is added), and copies between devices of the plugin
// enqueued on a third party's stream. Every destination is surrounded by
// guard bytes that must stay as they were.
#include <cstring>
#include <memory>

#include "api_model.hpp"
#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"

namespace halconform {
namespace {

constexpr uint8_t kMatrixGuard = 0xee;
constexpr size_t kGuardBytes = 64;

// One end of a copy: pageable host memory, or an allocation of a kind on a device.
struct End {
  std::string name;  // "pageable host memory", "HAL_MEMORY_SHARED of device 0"
  std::unique_ptr<Buffer> allocation;
  std::vector<uint8_t> pageable;
  uint8_t* base() const {
    return allocation ? allocation->bytes() : const_cast<uint8_t*>(pageable.data());
  }
};

End make_end(hal_device_t device, const char* device_label, const model::EnumValue* kind,
             size_t size) {
  End end;
  if (kind == nullptr) {
    end.name = "pageable host memory";
    end.pageable.assign(size, 0);
  } else {
    end.name = std::string(kind->name) + " of " + device_label;
    end.allocation =
        std::make_unique<Buffer>(device, size, static_cast<hal_memory_kind_t>(kind->value));
  }
  return end;
}

std::vector<uint8_t> contents(hal_stream_t stream, const End& end, size_t size);

// Fills |end| (size bytes) with guard bytes through |stream|, and checks the
// fill landed: a wrong byte later is then the copy's, never the fill's.
void guard(hal_stream_t stream, const End& end, size_t size) {
  HC_OK(hal_memset_async(end.base(), kMatrixGuard, size, stream));
  const std::vector<uint8_t> got = contents(stream, end, size);
  for (size_t i = 0; i < size; ++i) {
    HC_REQUIRE(got[i] == kMatrixGuard,
               strf("hal_memset_async(0x%02x) of %zu bytes of ", kMatrixGuard, size) + end.name +
                   strf(": byte %zu is 0x%02x", i, got[i]));
  }
}

// Reads |end| back through |stream| (pageable memory directly, after a synchronize).
std::vector<uint8_t> contents(hal_stream_t stream, const End& end, size_t size) {
  if (!end.allocation) {
    HC_OK(hal_stream_synchronize(stream));
    return end.pageable;
  }
  return read_back(stream, end.base(), size);
}

void check_landed(const std::vector<uint8_t>& got, const std::vector<uint8_t>& data, size_t offset,
                  const std::string& what) {
  std::string why;
  if (first_mismatch(got.data() + offset, data.data(), data.size(), why) != SIZE_MAX) {
    fail(what + ": " + why);
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (i >= offset && i < offset + data.size()) continue;
    HC_REQUIRE(got[i] == kMatrixGuard,
               strf("%s wrote byte %zu outside its range (0x%02x, the guard "
                    "was 0x%02x)",
                    what.c_str(), i, got[i], kMatrixGuard));
  }
}

}  // namespace

HALCONFORM_TEST("core.memory.copy_matrix",
                "copies between every pair of memory kinds the device declares and pageable "
                "memory, and fills of each, are exact and write nothing outside their range",
                {}) {
  Stream stream(ctx.device());
  const model::EnumType* kinds = model::find_enum("hal_memory_kind_t");
  HC_REQUIRE(kinds != nullptr, std::string("the API model has no hal_memory_kind_t"));
  // nullptr: pageable host memory; then every kind the device declares.
  std::vector<const model::EnumValue*> ends{nullptr};
  std::string skipped;
  for (const model::EnumValue& kind : kinds->values) {
    void* probe = nullptr;
    const hal_result_t result =
        hal_mem_alloc(ctx.device(), static_cast<hal_memory_kind_t>(kind.value), 64, 0, &probe);
    if (result == HAL_ERROR_UNSUPPORTED) {
      skipped += std::string(skipped.empty() ? "" : ", ") + kind.name;
      continue;
    }
    HC_REQUIRE(result == HAL_SUCCESS, strf("hal_mem_alloc(%s, 64 bytes) returned %s: %s", kind.name,
                                           hal_result_string(result), hal_error_last_message()));
    HC_OK(hal_mem_free(probe));
    ends.push_back(&kind);
  }
  const size_t sizes[] = {1, 13, 4096 + 7, 100003};
  uint64_t seed = 7;
  size_t copies = 0;
  for (const size_t size : sizes) {
    const size_t total = size + 2 * kGuardBytes;
    for (const model::EnumValue* from_kind : ends) {
      for (const model::EnumValue* to_kind : ends) {
        End from = make_end(ctx.device(), "the device", from_kind, total);
        End to = make_end(ctx.device(), "the device", to_kind, total);
        const std::vector<uint8_t> data = random_bytes(size, seed++);
        guard(stream, to, total);
        // The source: staged into place from pageable memory (or written directly).
        if (from.allocation) {
          HC_OK(hal_memcpy_async(from.base() + kGuardBytes, data.data(), size, stream));
        } else {
          std::memcpy(from.base() + kGuardBytes, data.data(), size);
        }
        HC_OK(hal_memcpy_async(to.base() + kGuardBytes, from.base() + kGuardBytes, size, stream));
        const std::string what =
            strf("hal_memcpy_async of %zu bytes from ", size) + from.name + " to " + to.name;
        check_landed(contents(stream, to, total), data, kGuardBytes, what);
        ++copies;
      }
    }
    // Fills, with a value whose high bit is set, of every kind.
    for (const model::EnumValue* kind : ends) {
      End to = make_end(ctx.device(), "the device", kind, total);
      guard(stream, to, total);
      const auto value = static_cast<uint8_t>(0xa5 + size);
      HC_OK(hal_memset_async(to.base() + kGuardBytes, value, size, stream));
      check_landed(contents(stream, to, total), std::vector<uint8_t>(size, value), kGuardBytes,
                   strf("hal_memset_async(0x%02x) of %zu bytes of ", value, size) + to.name);
    }
  }
  ctx.note(strf("%zu copies over %zu kinds of memory", copies, ends.size()) +
           (skipped.empty() ? "" : "; not declared: " + skipped));
}

HALCONFORM_TEST("core.memory.copy_between_devices",
                "copies between two devices of the plugin, each enqueued on the source's, the "
                "destination's and (with a third device) another device's stream",
                {.capabilities = HAL_DEVICE_CAP_PEER_ACCESS, .min_devices = 2}) {
  if ((ctx.peer_properties().capabilities & HAL_DEVICE_CAP_PEER_ACCESS) == 0) {
    ctx.skip("the peer device does not declare HAL_DEVICE_CAP_PEER_ACCESS");
  }
  const std::vector<hal_device_t>& devices = ctx.plugin_devices();
  hal_device_t a = ctx.device(), b = ctx.peer_device();
  // A third device when there is one; with two, a copy between the peer's
  // own allocations on this device's stream is the same third-party case.
  hal_device_t third = a;
  for (hal_device_t d : devices) {
    if (d != a && d != b) third = d;
  }
  const size_t size = 70001, total = size + 2 * kGuardBytes;
  uint64_t seed = 99;
  struct Route {
    hal_device_t from, to, stream;
    const char* name;
  };
  const Route routes[] = {
      {a, b, a, "to the peer, on the source's stream"},
      {a, b, b, "to the peer, on the destination's stream"},
      {b, a, a, "from the peer, on the destination's stream"},
      {b, b, a, "within the peer, on this device's stream"},
      {a, b, third,
       third == a ? "to the peer, on the source's stream (no third device)"
                  : "to the peer, on a third device's stream"},
      {b, a, third,
       third == a ? "from the peer, on the destination's stream (no third device)"
                  : "from the peer, on a third device's stream"},
  };
  // From the peer's memory to pageable memory, on this device's stream.
  {
    Stream stream(a), peer_stream(b);
    Buffer from(b, size);
    const std::vector<uint8_t> data = random_bytes(size, seed++);
    HC_OK(hal_memcpy_async(from.get(), data.data(), size, peer_stream));
    HC_OK(hal_stream_synchronize(peer_stream));
    std::vector<uint8_t> host(size + 2 * kGuardBytes, kMatrixGuard);
    HC_OK(hal_memcpy_async(host.data() + kGuardBytes, from.get(), size, stream));
    HC_OK(hal_stream_synchronize(stream));
    check_landed(host, data, kGuardBytes,
                 "hal_memcpy_async of 70001 bytes from the peer device to pageable memory, on this "
                 "device's stream");
  }
  for (const Route& route : routes) {
    Stream stream(route.stream), from_stream(route.from), to_stream(route.to);
    Buffer from(route.from, total), to(route.to, total);
    const std::vector<uint8_t> data = random_bytes(size, seed++);
    HC_OK(hal_memset_async(to.get(), kMatrixGuard, total, to_stream));
    HC_OK(hal_memcpy_async(from.bytes() + kGuardBytes, data.data(), size, from_stream));
    HC_OK(hal_stream_synchronize(to_stream));
    HC_OK(hal_stream_synchronize(from_stream));
    HC_OK(hal_memcpy_async(to.bytes() + kGuardBytes, from.bytes() + kGuardBytes, size, stream));
    HC_OK(hal_stream_synchronize(stream));
    const std::vector<uint8_t> got = read_back(to_stream, to.get(), total);
    check_landed(got, data, kGuardBytes,
                 std::string("hal_memcpy_async of 70001 bytes between devices ") + route.name);
  }
}

}  // namespace halconform
