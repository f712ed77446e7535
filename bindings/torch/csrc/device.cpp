// How torch reaches the hal device: the device guard (current device,
// streams, events), the PrivateUse1 hooks (availability, generators, pinned
// memory, pointers) and the generator. All registered at load time.
#include "allocator.hpp"
#include "generator.hpp"
#include "index_status.hpp"
#include "runtime.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>

namespace hal_torch {

// ---- the device guard -----------------------------------------------------------------------

namespace {

hal_event_t as_event(void* event) {
  return static_cast<hal_event_t>(event);
}

class HalGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kHalDeviceType; }

  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device previous = getDevice();
    if (device.index() != previous.index()) setDevice(device);
    return previous;
  }
  c10::Device getDevice() const override { return {kHalDeviceType, current_device()}; }
  void setDevice(c10::Device device) const override { set_current_device(index_of(device)); }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.has_index()) set_current_device_unchecked(device.index());
  }

  c10::Stream getStream(c10::Device device) const override {
    return current_stream(index_of(device));
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return default_stream(index_of(device));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*high_priority*/) const override {
    return pool_stream(index_of(device));
  }
  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    return new_stream(index_of(device));
  }
  c10::Stream exchangeStream(c10::Stream stream) const override { return exchange_stream(stream); }
  void* getStreamNativeHandle(const c10::Stream stream) const override {
    return stream_handle(stream);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count());
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*index*/) const noexcept override {
    if (event != nullptr) hal_event_destroy(as_event(event));
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(index == -1 || index == stream.device_index(), "event of hal:", index,
                " recorded on a stream of ", stream.device());
    if (*event == nullptr) {
      DeviceState& state = device_state(stream.device_index());
      const hal_event_flags_t flags =
          flag == c10::EventFlag::BACKEND_DEFAULT && state.has_event_timing ? HAL_EVENT_FLAG_TIMING
                                                                            : HAL_EVENT_FLAG_NONE;
      hal_event_t created = nullptr;
      check(hal_event_create(state.handle, flags, &created), "creating a hal event");
      *event = created;
    }
    check(hal_event_record(as_event(*event), stream_handle(stream)), "recording a hal event");
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;  // never recorded: complete
    check(hal_stream_wait_event(stream_handle(stream), as_event(event)),
          "making a hal stream wait for an event");
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    const hal_result_t result = hal_event_query(as_event(event));
    if (result == HAL_NOT_READY) return false;
    check(result, "querying a hal event");
    return true;
  }

  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;
    check(hal_event_synchronize(as_event(event)), "waiting for a hal event");
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*index*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "elapsed_time needs both events recorded (and created with enable_timing=True)");
    float ms = 0;
    check(hal_event_elapsed_ms(as_event(start), as_event(end), &ms), "hal event elapsed time");
    return ms;
  }

  bool queryStream(const c10::Stream& stream) const override {
    const hal_result_t result = hal_stream_query(stream_handle(stream));
    if (result == HAL_NOT_READY) return false;
    check(result, "querying a hal stream");
    return true;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    check(hal_stream_synchronize(stream_handle(stream)), "synchronizing a hal stream");
  }

  void synchronizeDevice(const c10::DeviceIndex index) const override {
    check(hal_device_synchronize(device_handle(index)), "synchronizing a hal device");
    check_index_status(index);
  }

  void recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& stream) const override {
    device_allocator().recordStream(data, stream);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, HalGuardImpl)

}  // namespace

// ---- the generator --------------------------------------------------------------------------

namespace {
constexpr uint64_t kDefaultSeed = 67280421310721ull;  // torch's default_rng_seed_val
constexpr size_t kStateBytes = 2 * sizeof(uint64_t);
}  // namespace

HalGenerator::HalGenerator(c10::DeviceIndex index)
    : c10::GeneratorImpl(c10::Device(kHalDeviceType, index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(kDefaultSeed) {}

void HalGenerator::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}
void HalGenerator::set_offset(uint64_t offset) {
  offset_ = offset;
}
uint64_t HalGenerator::get_offset() const {
  return offset_;
}
uint64_t HalGenerator::current_seed() const {
  return seed_;
}

uint64_t HalGenerator::seed() {
  std::random_device device;
  const uint64_t seed =
      (static_cast<uint64_t>(device()) << 32) ^ device() ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  set_current_seed(seed);
  return seed;
}

c10::intrusive_ptr<c10::TensorImpl> HalGenerator::get_state() const {
  at::Tensor state = at::empty({static_cast<int64_t>(kStateBytes)}, at::kByte);
  auto* bytes = state.data_ptr<uint8_t>();
  std::memcpy(bytes, &seed_, sizeof seed_);
  std::memcpy(bytes + sizeof seed_, &offset_, sizeof offset_);
  return state.getIntrusivePtr();
}

void HalGenerator::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK_TYPE(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
                   "a hal RNG state is a torch.uint8 tensor, got ", new_state.dtype());
  TORCH_CHECK_VALUE(new_state.numel() == static_cast<int64_t>(kStateBytes),
                    "a hal RNG state holds ", kStateBytes, " bytes (seed, offset), got ",
                    new_state.numel());
  TORCH_CHECK_VALUE(new_state.device().is_cpu() && new_state.is_contiguous(),
                    "a hal RNG state is a contiguous CPU tensor");
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed_, bytes, sizeof seed_);
  std::memcpy(&offset_, bytes + sizeof seed_, sizeof offset_);
}

std::pair<uint64_t, uint64_t> HalGenerator::reserve(uint64_t count) {
  const uint64_t first = offset_;
  // Whole Philox blocks (4 words each), so the next op starts on a fresh counter.
  offset_ += (count + 3) / 4;
  return {seed_, first};
}

c10::DeviceType HalGenerator::device_type() {
  return kHalDeviceType;
}

HalGenerator* HalGenerator::clone_impl() const {
  auto* copy = new HalGenerator(device().index());
  copy->seed_ = seed_;
  copy->offset_ = offset_;
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  check_device_index(index);
  static std::once_flag once;
  static std::deque<at::Generator>* generators = nullptr;
  std::call_once(once, [] {
    generators = new std::deque<at::Generator>;  // never destroyed, as torch's own
    for (int i = 0; i < device_count(); ++i) {
      generators->push_back(at::make_generator<HalGenerator>(static_cast<c10::DeviceIndex>(i)));
    }
  });
  return (*generators)[static_cast<size_t>(index)];
}

HalGenerator* generator_or_default(const std::optional<at::Generator>& generator,
                                   c10::DeviceIndex index) {
  const at::Generator& chosen =
      generator.has_value() && generator->defined() ? *generator : default_generator(index);
  TORCH_CHECK(chosen.device().type() == kHalDeviceType, "a ", chosen.device(),
              " generator was given to an op on hal:", static_cast<int>(index));
  return at::check_generator<HalGenerator>(chosen);
}

// ---- the hooks ------------------------------------------------------------------------------

namespace {

class HalHooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    return index >= 0 && index < device_count();
  }
  void init() const override { device_count(); }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count());
  }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_current_device(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const c10::DeviceIndex previous = current_device();
    set_current_device(index);
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    if (index < 0 || index >= device_count()) return current_device();
    return exchangeDevice(index);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index < 0 ? current_device() : index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return at::make_generator<HalGenerator>(index < 0 ? current_device() : index);
  }

  at::Allocator* getPinnedMemoryAllocator() const override { return &host_allocator(); }

  bool isPinnedPtr(const void* data) const override {
    if (data == nullptr || device_count() == 0) return false;
    if (is_pinned_host_pointer(data)) return true;
    hal_memory_info_t info{};
    info.struct_size = sizeof info;
    return hal_mem_get_info(data, &info) == HAL_SUCCESS && info.kind == HAL_MEMORY_HOST;
  }

  at::Device getDeviceFromPtr(void* data) const override {
    hal_memory_info_t info{};
    info.struct_size = sizeof info;
    check(hal_mem_get_info(data, &info), "finding the hal device of a pointer");
    for (int i = 0; i < device_count(); ++i) {
      if (device_state(static_cast<c10::DeviceIndex>(i)).handle == info.device) {
        return {kHalDeviceType, static_cast<c10::DeviceIndex>(i)};
      }
    }
    C10_THROW_ERROR(ValueError, "the pointer belongs to a HAL device torch cannot address");
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
    c10::Allocator* allocator = storage.allocator();
    TORCH_CHECK(allocator != nullptr, "Trying to resize storage without an allocator");
    const c10::DeviceIndex index = storage.device().index();
    const c10::DeviceIndex previous = current_device();
    set_current_device(index);
    c10::DataPtr fresh = allocator->allocate(new_bytes);
    const size_t keep = std::min(new_bytes, storage.nbytes());
    if (keep > 0) {
      hal_stream_t stream = current_hal_stream(index);
      check(hal_memcpy_async(fresh.get(), storage.data(), keep, stream), "resizing a hal storage");
    }
    set_current_device_unchecked(previous);
    // The old block is freed in stream order on this device's current stream.
    const_cast<c10::Storage&>(storage).set_data_ptr_noswap(std::move(fresh));
    const_cast<c10::Storage&>(storage).set_nbytes(new_bytes);
  }
};

struct RegisterHooks {
  RegisterHooks() { at::RegisterPrivateUse1HooksInterface(new HalHooks); }
};
const RegisterHooks register_hooks;

}  // namespace
}  // namespace hal_torch
