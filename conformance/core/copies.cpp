// core.memory copies and fills: every direction, odd sizes and offsets,
// guard bytes around the destination, zero sizes, and peer copies.
#include <algorithm>
#include <cstring>

#include "check.hpp"
#include "context.hpp"
#include "hal_objects.hpp"

namespace halconform {
namespace {

constexpr uint8_t kGuard = 0xee;

// Copies |size| bytes from host to src_buffer+src_offset, then device to
// device into dst_buffer+dst_offset (pre-filled with guard bytes), then back
// to the host; checks the copied bytes and that no guard byte changed.
void check_copy_chain(hal_stream_t stream, const Buffer& src, const Buffer& dst, size_t src_offset,
                      size_t dst_offset, size_t size, uint64_t seed) {
  const std::vector<uint8_t> data = random_bytes(size, seed);
  HC_OK(hal_memset_async(dst.get(), kGuard, dst.size(), stream));
  HC_OK(hal_memcpy_async(src.bytes() + src_offset, data.data(), size, stream));
  HC_OK(hal_memcpy_async(dst.bytes() + dst_offset, src.bytes() + src_offset, size, stream));
  const std::vector<uint8_t> back = read_back(stream, dst.get(), dst.size());
  std::string why;
  if (first_mismatch(back.data() + dst_offset, data.data(), size, why) != SIZE_MAX) {
    fail(strf("hal_memcpy_async of %zu bytes host->device (offset %zu), device->device (to "
              "offset %zu), device->host: ",
              size, src_offset, dst_offset) +
         why);
  }
  for (size_t i = 0; i < dst.size(); ++i) {
    if (i >= dst_offset && i < dst_offset + size) continue;
    HC_REQUIRE(back[i] == kGuard,
               strf("hal_memcpy_async of %zu bytes to offset %zu wrote byte %zu outside its "
                    "range (0x%02x, the hal_memset_async guard was 0x%02x)",
                    size, dst_offset, i, back[i], kGuard));
  }
}

}  // namespace

HALCONFORM_TEST("core.memory.copy_directions",
                "host->device, device->device, device->host copies are exact, odd sizes and "
                "offsets, nothing written outside the range",
                {}) {
  Stream stream(ctx.device());
  std::uniform_int_distribution<size_t> offset(0, 63);
  uint64_t seed = 1;
  for (size_t size : {size_t{1}, size_t{2}, size_t{7}, size_t{64}, size_t{1000}, size_t{4099},
                      size_t{65536}, size_t{1000003}}) {
    const size_t src_offset = offset(ctx.random()), dst_offset = offset(ctx.random());
    Buffer src(ctx.device(), size + 64), dst(ctx.device(), size + 128);
    check_copy_chain(stream, src, dst, src_offset, dst_offset, size, seed++);
  }
  // Host to host through a stream is a copy too (both pointers are pageable memory).
  std::vector<uint8_t> a = random_bytes(777, 99), b(777, 0);
  HC_OK(hal_memcpy_async(b.data(), a.data(), a.size(), stream));
  HC_OK(hal_stream_synchronize(stream));
  HC_REQUIRE(a == b, "a host-to-host copy through the stream differs");
}

HALCONFORM_TEST("core.memory.fill",
                "hal_memset_async sets exactly its range to the value, odd sizes and offsets", {}) {
  Stream stream(ctx.device());
  Buffer buffer(ctx.device(), 70001);
  std::vector<uint8_t> expected(buffer.size(), kGuard);
  HC_OK(hal_memset_async(buffer.get(), kGuard, buffer.size(), stream));
  // Which fill wrote each byte last (-1: the first, whole-buffer one), to name it on failure.
  std::vector<int> last_fill(buffer.size(), -1);
  struct Fill {
    size_t first, size;
    uint8_t value;
  };
  std::vector<Fill> fills;
  std::uniform_int_distribution<size_t> start(0, buffer.size() - 1);
  for (int round = 0; round < 40; ++round) {
    const size_t first = start(ctx.random());
    // Every fourth fill is short (1..11 bytes: not a multiple of a word, and often unaligned).
    const size_t size =
        round % 4 == 3
            ? std::min<size_t>(1 + ctx.random()() % 11, buffer.size() - first)
            : std::uniform_int_distribution<size_t>(1, buffer.size() - first)(ctx.random());
    const uint8_t value = static_cast<uint8_t>(round * 37 + 1);
    HC_OK(hal_memset_async(buffer.bytes() + first, value, size, stream));
    std::memset(expected.data() + first, value, size);
    std::fill(last_fill.begin() + first, last_fill.begin() + first + size, round);
    fills.push_back({first, size, value});
  }
  const std::vector<uint8_t> back = read_back(stream, buffer.get(), buffer.size());
  std::string why;
  if (const size_t at = first_mismatch(back.data(), expected.data(), back.size(), why);
      at != SIZE_MAX) {
    if (last_fill[at] < 0) fail("the first hal_memset_async (the whole buffer): " + why);
    const Fill& fill = fills[last_fill[at]];
    fail(strf("hal_memset_async #%d (value 0x%02x, %zu bytes at offset %zu), the last fill of "
              "byte %zu: ",
              last_fill[at], fill.value, fill.size, fill.first, at) +
         why);
  }
}

HALCONFORM_TEST("core.memory.zero_size",
                "size 0 copies and fills succeed, even with NULL pointers, and change nothing",
                {}) {
  Stream stream(ctx.device());
  Buffer buffer(ctx.device(), 256);
  HC_OK(hal_memset_async(buffer.get(), 0x11, 256, stream));
  HC_OK(hal_memcpy_async(nullptr, nullptr, 0, stream));
  HC_OK(hal_memset_async(nullptr, 0x22, 0, stream));
  HC_OK(hal_memset_async(buffer.get(), 0x33, 0, stream));
  HC_OK(hal_memcpy_async(buffer.get(), buffer.bytes() + 1, 0, stream));
  const std::vector<uint8_t> back = read_back(stream, buffer.get(), 256);
  for (uint8_t byte : back) HC_REQUIRE(byte == 0x11, "a size 0 operation changed memory");
}

HALCONFORM_TEST("core.memory.copy_peer",
                "copies between two devices of the plugin, in both directions",
                {.capabilities = HAL_DEVICE_CAP_PEER_ACCESS, .min_devices = 2}) {
  if ((ctx.peer_properties().capabilities & HAL_DEVICE_CAP_PEER_ACCESS) == 0) {
    ctx.skip("the peer device does not declare HAL_DEVICE_CAP_PEER_ACCESS");
  }
  Stream stream(ctx.device()), peer_stream(ctx.peer_device());
  Buffer local(ctx.device(), 300007), remote(ctx.peer_device(), 300007);
  Buffer back_local(ctx.device(), 300007 + 64);
  const std::vector<uint8_t> data = random_bytes(local.size(), 4242);
  HC_OK(hal_memcpy_async(local.get(), data.data(), data.size(), stream));
  HC_OK(hal_memcpy_async(remote.get(), local.get(), data.size(), stream));  // to the peer
  HC_OK(hal_stream_synchronize(stream));
  std::string why;
  std::vector<uint8_t> seen = read_back(peer_stream, remote.get(), remote.size());
  if (first_mismatch(seen.data(), data.data(), data.size(), why) != SIZE_MAX) {
    fail("copy to the peer device: " + why);
  }
  HC_OK(hal_memcpy_async(back_local.bytes() + 17, remote.get(), data.size(), peer_stream));
  HC_OK(hal_stream_synchronize(peer_stream));
  seen = read_back(stream, back_local.bytes() + 17, data.size());
  if (first_mismatch(seen.data(), data.data(), data.size(), why) != SIZE_MAX) {
    fail("copy back from the peer device on its stream: " + why);
  }
}

}  // namespace halconform
