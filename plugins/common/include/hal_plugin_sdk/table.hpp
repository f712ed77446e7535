// The entries of hal_plugin_table_v1_t, listed once (HAL_PLUGIN_V1_ENTRIES):
// the name, the result, the parameters and the part of the table each
// belongs to, in the table's order. Everything a plugin needs of the table
// comes from this one list:
// - the type of each entry (v1::device_count_fn ...), so that a plugin that
//   writes an entry itself declares it without retyping its prototype:
//     plugin::v1::comm_enqueue_fn comm_enqueue;
// - the table itself, from the entries a plugin implements
//   (make_table<Entries, implemented>()): every entry of |implemented| is
//   set from |Entries| (usually ObjectEntries, entries.hpp), every other one
//   stays NULL, which brings the loader's fallback (SPEC.md §10.3).
// The static_asserts below check the list against the C struct, entry by
// entry, so that neither can change without the other.
#ifndef HAL_PLUGIN_SDK_TABLE_HPP_
#define HAL_PLUGIN_SDK_TABLE_HPP_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "hal_plugin.h"

// X(name, result, (parameters), part): part is the section of
// hal_plugin_table_v1_t the entry is in (api/hal/plugin_v1.h marks which
// entries are required and which form groups).
// clang-format off
#define HAL_PLUGIN_V1_ENTRIES(X)                                                                  \
  X(plugin_shutdown, void, (hal_plugin_context_t* context), kPlugin)                              \
  X(device_count, hal_result_t, (hal_plugin_context_t* context, uint32_t* out_count), kPlugin)    \
  X(device_open, hal_result_t,                                                                    \
    (hal_plugin_context_t* context, uint32_t index, hal_impl_device_t** out_device), kPlugin)     \
  X(device_close, void, (hal_impl_device_t* device), kPlugin)                                     \
  X(device_get_properties, hal_result_t,                                                          \
    (hal_impl_device_t* device, hal_device_properties_t* out_properties), kDevice)                \
  X(device_synchronize, hal_result_t, (hal_impl_device_t* device), kDevice)                       \
  X(mem_alloc, hal_result_t,                                                                      \
    (hal_impl_device_t* device, hal_memory_kind_t kind, size_t size, size_t alignment,            \
     void** out_ptr), kMemory)                                                                    \
  X(mem_free, hal_result_t, (hal_impl_device_t* device, void* ptr), kMemory)                      \
  X(memcpy_async, hal_result_t,                                                                   \
    (hal_impl_stream_t* stream, void* dst, const void* src, size_t size), kMemory)                \
  X(memset_async, hal_result_t,                                                                   \
    (hal_impl_stream_t* stream, void* dst, uint8_t value, size_t size), kMemory)                  \
  X(stream_create, hal_result_t,                                                                  \
    (hal_impl_device_t* device, hal_stream_flags_t flags, hal_impl_stream_t** out_stream),       \
    kStream)                                                                                      \
  X(stream_destroy, hal_result_t, (hal_impl_stream_t* stream), kStream)                           \
  X(stream_synchronize, hal_result_t, (hal_impl_stream_t* stream), kStream)                       \
  X(stream_query, hal_result_t, (hal_impl_stream_t* stream), kStream)                             \
  X(stream_wait_event, hal_result_t, (hal_impl_stream_t* stream, hal_impl_event_t* event),        \
    kStream)                                                                                      \
  X(stream_enqueue_host_fn, hal_result_t,                                                         \
    (hal_impl_stream_t* stream, hal_host_fn_t fn, void* user_data), kStream)                      \
  X(event_create, hal_result_t,                                                                   \
    (hal_impl_device_t* device, hal_event_flags_t flags, hal_impl_event_t** out_event), kEvent)   \
  X(event_destroy, hal_result_t, (hal_impl_event_t* event), kEvent)                               \
  X(event_record, hal_result_t, (hal_impl_event_t* event, hal_impl_stream_t* stream), kEvent)     \
  X(event_query, hal_result_t, (hal_impl_event_t* event), kEvent)                                 \
  X(event_synchronize, hal_result_t, (hal_impl_event_t* event), kEvent)                           \
  X(event_elapsed_ms, hal_result_t,                                                               \
    (hal_impl_event_t* start, hal_impl_event_t* end, float* out_ms), kEvent)                      \
  X(module_load, hal_result_t,                                                                    \
    (hal_impl_device_t* device, const hal_module_desc_t* desc, hal_impl_module_t** out_module),   \
    kKernel)                                                                                      \
  X(module_unload, hal_result_t, (hal_impl_module_t* module), kKernel)                            \
  X(kernel_get, hal_result_t,                                                                     \
    (hal_impl_module_t* module, const hal_kernel_desc_t* desc, hal_impl_kernel_t** out_kernel,    \
     hal_kernel_info_t* out_info), kKernel)                                                       \
  X(launch_kernel, hal_result_t,                                                                  \
    (hal_impl_stream_t* stream, hal_impl_kernel_t* kernel, const hal_launch_config_t* config,     \
     uint32_t arg_count, const hal_kernel_arg_t* args), kKernel)                                  \
  X(comm_init_local, hal_result_t,                                                                \
    (uint32_t count, hal_impl_device_t* const* devices, const hal_comm_config_t* config,          \
     hal_impl_comm_t** out_comms), kCollective)                                                   \
  X(comm_init_rank, hal_result_t,                                                                 \
    (hal_impl_device_t* device, uint32_t nranks, uint32_t rank, const hal_comm_config_t* config,  \
     hal_impl_comm_t** out_comm), kCollective)                                                    \
  X(comm_destroy, hal_result_t, (hal_impl_comm_t* comm), kCollective)                             \
  X(comm_abort, void, (hal_impl_comm_t* comm), kCollective)                                       \
  X(comm_get_async_error, hal_result_t, (hal_impl_comm_t* comm), kCollective)                     \
  X(comm_enqueue, hal_result_t,                                                                   \
    (hal_impl_comm_t* comm, hal_impl_stream_t* stream, uint32_t call_count,                       \
     const hal_collective_call_t* calls), kCollective)                                            \
  X(op_plan_create, hal_result_t,                                                                 \
    (hal_impl_device_t* device, const hal_op_header_t* desc, hal_op_plan_flags_t flags,           \
     hal_impl_op_plan_t** out_plan, size_t* out_workspace_bytes,                                  \
     const char** out_implementation), kOperator)                                                 \
  X(op_plan_destroy, hal_result_t, (hal_impl_op_plan_t* plan), kOperator)                         \
  X(op_execute, hal_result_t,                                                                     \
    (hal_impl_op_plan_t* plan, hal_impl_stream_t* stream, const hal_op_exec_args_t* args),        \
    kOperator)                                                                                    \
  X(comm_init_rank_exchange, hal_result_t,                                                        \
    (hal_impl_device_t* device, uint32_t nranks, uint32_t rank, const hal_comm_config_t* config,  \
     const hal_comm_exchange_t* exchange, hal_impl_comm_t** out_comm), kCollective)              \
  X(op_implementation, const char*, (hal_impl_device_t* device, hal_op_kind_t kind), kOperator)
// clang-format on

namespace hal::plugin {

// The type of each entry: v1::<name>_fn, e.g. v1::stream_query_fn is
// hal_result_t(hal_impl_stream_t*). A declaration `v1::stream_query_fn
// stream_query;` declares the function stream_query with that prototype.
namespace v1 {
#define HAL_PLUGIN_SDK_ENTRY_TYPE(name, result, parameters, part) \
  using name##_fn = result parameters;
HAL_PLUGIN_V1_ENTRIES(HAL_PLUGIN_SDK_ENTRY_TYPE)
#undef HAL_PLUGIN_SDK_ENTRY_TYPE
}  // namespace v1

// One value per entry, in the table's order.
enum class Entry : uint32_t {
#define HAL_PLUGIN_SDK_ENTRY_ID(name, result, parameters, part) name,
  HAL_PLUGIN_V1_ENTRIES(HAL_PLUGIN_SDK_ENTRY_ID)
#undef HAL_PLUGIN_SDK_ENTRY_ID
};

#define HAL_PLUGIN_SDK_ENTRY_COUNT(name, result, parameters, part) +1
inline constexpr uint32_t kEntryCount = 0 HAL_PLUGIN_V1_ENTRIES(HAL_PLUGIN_SDK_ENTRY_COUNT);
#undef HAL_PLUGIN_SDK_ENTRY_COUNT

// The entry's name as the table spells it ("stream_query").
constexpr std::string_view entry_name(Entry entry) {
  switch (entry) {
#define HAL_PLUGIN_SDK_ENTRY_NAME(name, result, parameters, part) \
  case Entry::name:                                               \
    return #name;
    HAL_PLUGIN_V1_ENTRIES(HAL_PLUGIN_SDK_ENTRY_NAME)
#undef HAL_PLUGIN_SDK_ENTRY_NAME
  }
  return "?";
}

// A set of entries: what a plugin implements. A literal type, so that a set
// is a template argument (make_table) and the table is built at compile time.
struct EntrySet {
  uint64_t bits = 0;  // bit i: Entry(i); public, as a template argument requires

  constexpr EntrySet() = default;
  constexpr EntrySet(Entry entry) : bits(uint64_t{1} << static_cast<uint32_t>(entry)) {}
  constexpr bool has(Entry entry) const { return (bits & EntrySet(entry).bits) != 0; }
  friend constexpr EntrySet operator|(EntrySet a, EntrySet b) { return from_bits(a.bits | b.bits); }
  // |a| without the entries of |b|: "every stream entry but stream_query".
  friend constexpr EntrySet operator-(EntrySet a, EntrySet b) {
    return from_bits(a.bits & ~b.bits);
  }
  friend constexpr bool operator==(EntrySet a, EntrySet b) = default;

 private:
  static constexpr EntrySet from_bits(uint64_t bits) {
    EntrySet set;
    set.bits = bits;
    return set;
  }
};
static_assert(kEntryCount <= 64, "EntrySet holds one bit per entry");

// The parts of the table (api/hal/plugin_v1.h), as sets.
enum class Part { kPlugin, kDevice, kMemory, kStream, kEvent, kKernel, kCollective, kOperator };

constexpr EntrySet entries_of(Part wanted) {
  EntrySet set;
#define HAL_PLUGIN_SDK_ENTRY_PART(name, result, parameters, part) \
  if (Part::part == wanted) set = set | Entry::name;
  HAL_PLUGIN_V1_ENTRIES(HAL_PLUGIN_SDK_ENTRY_PART)
#undef HAL_PLUGIN_SDK_ENTRY_PART
  return set;
}

// plugin_shutdown, device_count, device_open, device_close.
inline constexpr EntrySet kPluginEntries = entries_of(Part::kPlugin);
// device_get_properties, device_synchronize.
inline constexpr EntrySet kDeviceEntries = entries_of(Part::kDevice);
// mem_alloc, mem_free, memcpy_async, memset_async.
inline constexpr EntrySet kMemoryEntries = entries_of(Part::kMemory);
// stream_create ... stream_enqueue_host_fn.
inline constexpr EntrySet kStreamEntries = entries_of(Part::kStream);
// The events group and event_elapsed_ms.
inline constexpr EntrySet kEventEntries = entries_of(Part::kEvent);
// The kernels group: module_load, module_unload, kernel_get, launch_kernel.
inline constexpr EntrySet kKernelEntries = entries_of(Part::kKernel);
// Every comm_* entry.
inline constexpr EntrySet kCollectiveEntries = entries_of(Part::kCollective);
// The operators group: op_plan_create, op_plan_destroy, op_execute, op_implementation.
inline constexpr EntrySet kOperatorEntries = entries_of(Part::kOperator);
// Every entry of ABI 1.0: a plugin with streams, events and kernels.
inline constexpr EntrySet kCoreEntries = kPluginEntries | kDeviceEntries | kMemoryEntries |
                                         kStreamEntries | kEventEntries | kKernelEntries;

// The table of a plugin: every entry of |implemented| is &Entries::<name>,
// every other entry is NULL. |Entries| has a static function (or a static
// reference to a function) of the entry's type for each entry it is asked for.
template <class Entries, EntrySet implemented>
constexpr hal_plugin_table_v1_t make_table() {
  hal_plugin_table_v1_t table{};
  table.struct_size = sizeof(hal_plugin_table_v1_t);
#define HAL_PLUGIN_SDK_SET_ENTRY(name, result, parameters, part) \
  if constexpr (implemented.has(Entry::name)) table.name = &Entries::name;
  HAL_PLUGIN_V1_ENTRIES(HAL_PLUGIN_SDK_SET_ENTRY)
#undef HAL_PLUGIN_SDK_SET_ENTRY
  return table;
}

// The list is the C struct: every entry of it, of its type, at its place.
static_assert(sizeof(hal_plugin_table_v1_t) == sizeof(size_t) + kEntryCount * sizeof(void*),
              "HAL_PLUGIN_V1_ENTRIES lists every entry of hal_plugin_table_v1_t");
#define HAL_PLUGIN_SDK_CHECK_ENTRY(name, result, parameters, part)                       \
  static_assert(std::is_same_v<decltype(hal_plugin_table_v1_t::name), v1::name##_fn*>,   \
                "the type of entry " #name);                                             \
  static_assert(offsetof(hal_plugin_table_v1_t, name) ==                                 \
                    sizeof(size_t) + static_cast<uint32_t>(Entry::name) * sizeof(void*), \
                "the place of entry " #name);
HAL_PLUGIN_V1_ENTRIES(HAL_PLUGIN_SDK_CHECK_ENTRY)
#undef HAL_PLUGIN_SDK_CHECK_ENTRY

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_TABLE_HPP_
