// Fuzz target (a): sequences of HAL calls with random arguments against the
// cpu plugin, with the validation and tracing layers on.
//
// Each input is a little program: an opcode byte picks a call, the bytes
// after it pick its arguments from pools of handles (live, destroyed, NULL,
// foreign, of the wrong kind), pointers (allocation + offset, past the end,
// host buffer, NULL) and sizes. Every call must return a documented result
// without crashing; the harness checks a few invariants and cleans up what
// the input left alive. Inputs the contract calls undefined are not
// generated: host ranges are always valid memory of the harness, and kernels
// run only the empty kernel (a kernel's own memory accesses are unchecked).
#include "fuzz_input.hpp"

#include <hal.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <vector>

using hal_fuzz::FuzzInput;

namespace {

constexpr size_t kHostBytes = 1 << 16;
constexpr uint32_t kMaxAllocation = 1 << 16;

struct Pools {
  std::vector<hal_stream_t> streams;  // live and destroyed
  std::vector<bool> stream_live;
  std::vector<hal_event_t> events;
  std::vector<bool> event_live;
  std::vector<void*> allocations;  // live
  std::vector<uint32_t> allocation_sizes;
  std::vector<hal_kernel_t> kernels;  // live while |module| is
  hal_module_t module = nullptr;
};

std::array<uint8_t, kHostBytes> host_buffer;
int foreign_object = 0;
uint32_t device_count = 0;

[[noreturn]] void broken(const char* what, hal_result_t result) {
  std::fprintf(stderr, "api_sequence: invariant broken: %s returned %s: %s\n", what,
               hal_result_string(result), hal_error_last_message());
  std::abort();
}

hal_device_t pick_device(FuzzInput& in) {
  const uint32_t index = in.below(device_count + 1);
  if (index == device_count) return reinterpret_cast<hal_device_t>(&foreign_object);
  hal_device_t device = nullptr;
  if (hal_result_t result = hal_device_get(index, &device); result != HAL_SUCCESS)
    broken("hal_device_get", result);
  return device;
}

template <class Handle>
Handle pick_handle(FuzzInput& in, const std::vector<Handle>& pool, const Pools& pools) {
  const uint32_t choice = in.below(static_cast<uint32_t>(pool.size()) + 3);
  if (choice < pool.size()) return pool[choice];
  if (choice == pool.size()) return nullptr;
  if (choice == pool.size() + 1) return reinterpret_cast<Handle>(&foreign_object);
  // Another kind of handle.
  if (!pools.events.empty()) return reinterpret_cast<Handle>(pools.events.front());
  return reinterpret_cast<Handle>(pools.streams.empty() ? nullptr : pools.streams.front());
}

// A pointer and how many bytes from it the harness may touch as host memory
// (0 for HAL allocations, which the loader bounds-checks itself).
struct Pointer {
  void* address;
  bool host;
  size_t host_room;
};

Pointer pick_pointer(FuzzInput& in, const Pools& pools) {
  const uint32_t choice = in.below(4);
  if (choice == 0 && !pools.allocations.empty()) {
    const uint32_t slot = in.below(static_cast<uint32_t>(pools.allocations.size()));
    // Offsets up to and just past the end.
    const uint32_t offset = in.below(pools.allocation_sizes[slot] + 2);
    return {static_cast<uint8_t*>(pools.allocations[slot]) + offset, false, 0};
  }
  if (choice == 1) return {nullptr, false, 0};
  const uint32_t offset = in.below(kHostBytes);
  return {host_buffer.data() + offset, true, kHostBytes - offset};
}

// Sizes host ranges can take: never past the harness's buffer.
size_t pick_size(FuzzInput& in, const Pointer& a, const Pointer& b) {
  size_t size = in.below(4) == 0 ? 0 : in.u16() + 1u;
  for (const Pointer* p : {&a, &b}) {
    if (p->host && size > p->host_room) size = p->host_room;
  }
  return size;
}

void run_one(FuzzInput& in, Pools& pools) {
  switch (in.below(16)) {
    case 0: {
      hal_stream_t stream = nullptr;
      if (hal_stream_create(pick_device(in), in.below(4) == 0 ? 1 : 0, &stream) == HAL_SUCCESS) {
        pools.streams.push_back(stream);
        pools.stream_live.push_back(true);
      }
      break;
    }
    case 1: {
      if (pools.streams.empty()) break;
      const uint32_t slot = in.below(static_cast<uint32_t>(pools.streams.size()));
      const hal_result_t result = hal_stream_destroy(pools.streams[slot]);
      if (pools.stream_live[slot] && result != HAL_SUCCESS) broken("hal_stream_destroy", result);
      if (!pools.stream_live[slot] && result != HAL_ERROR_DESTROYED_HANDLE)
        broken("a second hal_stream_destroy", result);
      pools.stream_live[slot] = false;
      break;
    }
    case 2: {
      hal_event_t event = nullptr;
      if (hal_event_create(pick_device(in), in.below(3), &event) == HAL_SUCCESS) {
        pools.events.push_back(event);
        pools.event_live.push_back(true);
      }
      break;
    }
    case 3: {
      if (pools.events.empty()) break;
      const uint32_t slot = in.below(static_cast<uint32_t>(pools.events.size()));
      const hal_result_t result = hal_event_destroy(pools.events[slot]);
      if (pools.event_live[slot] != (result == HAL_SUCCESS)) broken("hal_event_destroy", result);
      pools.event_live[slot] = false;
      break;
    }
    case 4: {
      void* memory = nullptr;
      const uint32_t size = in.below(kMaxAllocation + 1);
      const size_t alignment = in.below(4) == 0 ? in.u16() : 0;
      if (hal_mem_alloc(pick_device(in), static_cast<hal_memory_kind_t>(in.below(4)), size,
                        alignment, &memory) == HAL_SUCCESS) {
        pools.allocations.push_back(memory);
        pools.allocation_sizes.push_back(size);
      }
      break;
    }
    case 5: {
      if (pools.allocations.empty()) break;
      const uint32_t slot = in.below(static_cast<uint32_t>(pools.allocations.size()));
      void* base = pools.allocations[slot];
      // hal_mem_free waits for its own device only; copies on the other
      // device's streams may still use the memory.
      for (size_t i = 0; i < pools.streams.size(); ++i) {
        if (pools.stream_live[i]) hal_stream_synchronize(pools.streams[i]);
      }
      if (in.below(4) == 0) {  // inside, not the base: refused
        if (hal_mem_free(static_cast<uint8_t*>(base) + 1) == HAL_SUCCESS &&
            pools.allocation_sizes[slot] > 1)
          broken("hal_mem_free inside an allocation", HAL_SUCCESS);
        break;
      }
      if (hal_result_t result = hal_mem_free(base); result != HAL_SUCCESS)
        broken("hal_mem_free", result);
      if (hal_mem_free(base) != HAL_ERROR_NOT_FOUND) broken("a second hal_mem_free", HAL_SUCCESS);
      pools.allocations.erase(pools.allocations.begin() + slot);
      pools.allocation_sizes.erase(pools.allocation_sizes.begin() + slot);
      break;
    }
    case 6:
    case 7: {
      const Pointer dst = pick_pointer(in, pools);
      const Pointer src = pick_pointer(in, pools);
      const size_t size = pick_size(in, dst, src);
      hal_stream_t stream = pick_handle(in, pools.streams, pools);
      if (in.below(2) == 0) {
        hal_memcpy_async(dst.address, src.address, size, stream);
      } else {
        hal_memset_async(dst.address, in.byte(), size, stream);
      }
      break;
    }
    case 8:
      hal_event_record(pick_handle(in, pools.events, pools), pick_handle(in, pools.streams, pools));
      break;
    case 9:
      hal_stream_wait_event(pick_handle(in, pools.streams, pools),
                            pick_handle(in, pools.events, pools));
      break;
    case 10: {
      hal_stream_t stream = pick_handle(in, pools.streams, pools);
      if (in.below(2) == 0) {
        hal_stream_synchronize(stream);
      } else {
        hal_stream_query(stream);
      }
      break;
    }
    case 11: {
      hal_event_t event = pick_handle(in, pools.events, pools);
      float ms = 0;
      switch (in.below(3)) {
        case 0:
          hal_event_query(event);
          break;
        case 1:
          hal_event_synchronize(event);
          break;
        default:
          hal_event_elapsed_ms(event, pick_handle(in, pools.events, pools),
                               in.below(4) == 0 ? nullptr : &ms);
      }
      break;
    }
    case 12: {
      static int counter = 0;
      const hal_host_fn_t count = [](void* data) { ++*static_cast<int*>(data); };
      hal_stream_enqueue_host_fn(pick_handle(in, pools.streams, pools),
                                 in.below(4) == 0 ? nullptr : count, &counter);
      break;
    }
    case 13: {
      hal_memory_info_t info{};
      info.struct_size = in.below(4) == 0 ? in.below(sizeof(info)) : sizeof(info);
      hal_mem_get_info(pick_pointer(in, pools).address, &info);
      hal_device_properties_t properties{};
      properties.struct_size = in.below(4) == 0 ? in.below(sizeof(properties)) : sizeof(properties);
      hal_device_get_properties(pick_device(in), &properties);
      break;
    }
    case 14: {
      if (pools.module == nullptr) {
        hal_module_desc_t desc{};
        desc.struct_size = sizeof(desc);
        desc.format = HAL_MODULE_FORMAT_CPU_SHARED_OBJECT;
        desc.path = HAL_FUZZ_EMPTY_KERNEL_PATH;
        hal_device_t device = nullptr;
        hal_device_get(0, &device);
        if (hal_module_load(device, &desc, &pools.module) != HAL_SUCCESS) pools.module = nullptr;
        break;
      }
      // The empty kernel with a declared signature that may disagree.
      std::array<hal_arg_type_t, 4> types{};
      hal_kernel_desc_t desc{};
      desc.struct_size = sizeof(desc);
      desc.name = in.below(4) == 0 ? "missing" : "empty";
      desc.arg_count = in.below(3) == 0 ? in.below(5) : 0;
      for (auto& type : types) type = static_cast<hal_arg_type_t>(in.below(9));
      desc.arg_types = desc.arg_count > 0 ? types.data() : nullptr;
      hal_kernel_t kernel = nullptr;
      if (hal_kernel_get(pools.module, &desc, &kernel) == HAL_SUCCESS)
        pools.kernels.push_back(kernel);
      break;
    }
    default: {
      if (pools.kernels.empty()) break;
      hal_launch_config_t config{};
      config.struct_size = in.below(8) == 0 ? 8 : sizeof(config);
      for (int axis = 0; axis < 3; ++axis) {
        config.grid[axis] = in.below(3);
        config.block[axis] = in.below(4) == 0 ? in.u16() : in.below(3);
      }
      config.shared_memory_bytes = in.below(4) == 0 ? in.u32() : 0;
      uint64_t value = 0;
      const hal_kernel_arg_t arg{&value, 8};
      hal_launch_kernel(pools.kernels[in.below(static_cast<uint32_t>(pools.kernels.size()))],
                        in.below(4) == 0 ? nullptr : &config, in.below(2), &arg,
                        pick_handle(in, pools.streams, pools));
      break;
    }
  }
}

void clean_up(Pools& pools) {
  for (size_t i = 0; i < pools.streams.size(); ++i) {
    if (pools.stream_live[i] && hal_stream_destroy(pools.streams[i]) != HAL_SUCCESS)
      broken("hal_stream_destroy at clean-up", HAL_ERROR_INTERNAL);
  }
  for (size_t i = 0; i < pools.events.size(); ++i) {
    if (pools.event_live[i]) hal_event_destroy(pools.events[i]);
  }
  for (void* memory : pools.allocations) {
    if (hal_result_t result = hal_mem_free(memory); result != HAL_SUCCESS)
      broken("hal_mem_free at clean-up", result);
  }
  if (pools.module != nullptr) hal_module_unload(pools.module);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Layers are chosen at the first hal_init; the fuzzer keeps one reference.
  setenv("HAL_VALIDATION", "1", 0);
  setenv("HAL_TRACE", "/dev/null", 0);
  setenv("HAL_CPU_DEVICES", "2", 1);
  hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
  options.plugins = HAL_FUZZ_CPU_PLUGIN_PATH;
  if (hal_result_t result = hal_init(&options); result != HAL_SUCCESS) broken("hal_init", result);
  if (hal_result_t result = hal_device_count(&device_count);
      result != HAL_SUCCESS || device_count == 0)
    broken("hal_device_count", result);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  Pools pools;
  for (int calls = 0; calls < 64 && !in.empty(); ++calls) run_one(in, pools);
  clean_up(pools);
  return 0;
}
