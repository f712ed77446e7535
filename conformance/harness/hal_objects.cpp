#include "hal_objects.hpp"

#include <algorithm>
#include <chrono>
#include <random>

#include "check.hpp"

namespace halconform {

Stream::Stream(hal_device_t device) {
  HC_OK(hal_stream_create(device, 0, &handle_));
}

Stream::~Stream() {
  if (handle_ != nullptr) hal_stream_destroy(handle_);
}

Event::Event(hal_device_t device, hal_event_flags_t flags) {
  HC_OK(hal_event_create(device, flags, &handle_));
}

Event::~Event() {
  if (handle_ != nullptr) hal_event_destroy(handle_);
}

Buffer::Buffer(hal_device_t device, size_t size, hal_memory_kind_t kind, size_t alignment)
    : size_(size) {
  HC_OK(hal_mem_alloc(device, kind, size, alignment, &pointer_));
}

Buffer::~Buffer() {
  if (pointer_ != nullptr) hal_mem_free(pointer_);
}

Module::Module(hal_device_t device, const std::string& path) {
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = HAL_MODULE_FORMAT_CPU_SHARED_OBJECT;
  desc.path = path.c_str();
  HC_OK(hal_module_load(device, &desc, &handle_));
}

Module::~Module() {
  if (handle_ != nullptr) hal_module_unload(handle_);
}

hal_kernel_t Module::kernel(const char* name) const {
  hal_kernel_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.name = name;
  hal_kernel_t kernel = nullptr;
  HC_OK(hal_kernel_get(handle_, &desc, &kernel));
  return kernel;
}

HostGate::HostGate(double max_hold_seconds) : state_(std::make_shared<State>()) {
  state_->max_hold_seconds = max_hold_seconds;
}

void HostGate::enqueue_on(hal_stream_t stream) {
  auto share = std::make_unique<std::shared_ptr<State>>(state_);
  HC_OK(hal_stream_enqueue_host_fn(stream, &HostGate::hold, share.get()));
  share.release();  // the host function owns it now
}

void HostGate::release() {
  std::lock_guard lock(state_->mutex);
  state_->open = true;
  state_->opened.notify_all();
}

void HostGate::open() {
  release();
  if (was_held_open_by_timeout()) {
    fail(
        strf("a HostGate holding a stream opened by itself after %.0f s, before the test opened "
             "it: a call waited for work held behind the gate (a false dependency between "
             "streams, or a wait done on the host thread)",
             state_->max_hold_seconds));
  }
}

bool HostGate::was_held_open_by_timeout() const {
  std::lock_guard lock(state_->mutex);
  return state_->timed_out;
}

void HostGate::hold(void* share) {
  const std::unique_ptr<std::shared_ptr<State>> owned(static_cast<std::shared_ptr<State>*>(share));
  State& state = **owned;
  std::unique_lock lock(state.mutex);
  const auto limit = std::chrono::duration<double>(state.max_hold_seconds);
  if (!state.opened.wait_for(lock, limit, [&state] { return state.open; })) {
    state.timed_out = true;
  }
}

std::vector<uint8_t> random_bytes(size_t size, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::vector<uint8_t> bytes(size);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint64_t word = engine();
    for (int b = 0; b < 8; ++b) bytes[i + b] = static_cast<uint8_t>(word >> (8 * b));
  }
  for (; i < size; ++i) bytes[i] = static_cast<uint8_t>(engine());
  return bytes;
}

std::vector<uint8_t> read_back(hal_stream_t stream, const void* src, size_t size) {
  // Read twice, into buffers filled with 0x00 and 0xff: a byte the copy did
  // not write differs between them, so a broken device->host copy is named as
  // such instead of showing up as wrong data of whatever the test checks.
  std::vector<uint8_t> host(size, 0x00), again(size, 0xff);
  HC_OK(hal_memcpy_async(host.data(), src, size, stream));
  HC_OK(hal_memcpy_async(again.data(), src, size, stream));
  HC_OK(hal_stream_synchronize(stream));
  if (host != again) {
    const auto at = static_cast<size_t>(
        std::mismatch(host.begin(), host.end(), again.begin()).first - host.begin());
    fail(
        strf("hal_memcpy_async device->host of %zu bytes from %p did not write byte %zu (two "
             "reads into 0x00- and 0xff-filled buffers gave 0x%02x and 0x%02x)",
             size, src, at, host[at], again[at]));
  }
  return host;
}

size_t first_mismatch(const uint8_t* actual, const uint8_t* expected, size_t size,
                      std::string& out_message) {
  for (size_t i = 0; i < size; ++i) {
    if (actual[i] == expected[i]) continue;
    size_t wrong = 0;
    for (size_t j = i; j < size; ++j) wrong += actual[j] != expected[j] ? 1 : 0;
    out_message = strf("byte %zu of %zu is 0x%02x, expected 0x%02x (%zu bytes differ)", i, size,
                       actual[i], expected[i], wrong);
    return i;
  }
  return SIZE_MAX;
}

}  // namespace halconform
