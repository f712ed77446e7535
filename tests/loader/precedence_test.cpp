// SPEC §4.1 "Which error is reported": when an input breaks several rules the
// call reports one, and which one follows a single order. The table below
// lists every public entry point by the roles of its arguments; every
// combination of faults is tried, with and without the validation layer, and
// the result must be the one the order predicts:
//   not initialised > handles left to right (NULL, foreign or wrong type:
//   INVALID_HANDLE; destroyed: DESTROYED_HANDLE) > NULL required pointers >
//   argument values.
// A second test fails when an exported function has no row (or is not
// listed as exempt), so a new entry point cannot skip the order.
#include "test_support.hpp"

#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>

using namespace loader_test;

namespace {

enum class Kind { kDevice, kStream, kEvent, kModule, kKernel, kComm, kOpPlan, kMoeRouting };
enum class Fault { kNone, kNull, kForeign, kWrongKind, kDestroyed, kNullOut, kBadValue };

struct Parameter {
  enum { kHandle, kOut, kValue } role;
  Kind kind = Kind::kDevice;             // for handles
  hal_result_t bad_value = HAL_SUCCESS;  // for values: the code a bad one gives
  bool nullable = false;                 // for handles: NULL is a no-op (destroy)
};

Parameter handle(Kind kind) {
  return {Parameter::kHandle, kind, HAL_SUCCESS, false};
}
Parameter nullable(Kind kind) {
  return {Parameter::kHandle, kind, HAL_SUCCESS, true};
}
Parameter out() {
  return {Parameter::kOut, Kind::kDevice, HAL_SUCCESS, false};
}
Parameter value(hal_result_t code) {
  return {Parameter::kValue, Kind::kDevice, code, false};
}

// What a call receives for one parameter.
struct Argument {
  void* handle = nullptr;  // handles
  bool null_out = false;   // out-pointers
  bool bad = false;        // values
};

struct Entry {
  const char* name;
  std::vector<Parameter> parameters;
  std::function<hal_result_t(const std::vector<Argument>&)> call;
};

template <class T>
T as(const Argument& argument) {
  return static_cast<T>(argument.handle);
}

// Static buffers for the calls' pointer arguments: host memory, as the copies
// and collectives accept it.
alignas(64) unsigned char g_source[64];
alignas(64) unsigned char g_target[64];
void no_op(void*) {}

template <class T>
T* out_or_null(const Argument& argument, T& storage) {
  return argument.null_out ? nullptr : &storage;
}

hal_launch_config_t launch_config(bool too_small) {
  hal_launch_config_t config{};
  config.struct_size = too_small ? 8 : sizeof(config);
  config.grid[0] = config.grid[1] = config.grid[2] = 1;
  config.block[0] = config.block[1] = config.block[2] = 1;
  return config;
}

hal_module_desc_t module_desc(bool bad_format) {
  static const char kSource[] = "kernel void scale() {}";
  hal_module_desc_t desc{};
  desc.struct_size = sizeof(desc);
  desc.format = bad_format ? static_cast<hal_module_format_t>(99) : HAL_MODULE_FORMAT_OPENCL_C;
  desc.data = kSource;
  desc.size = sizeof(kSource) - 1;
  return desc;
}

constexpr hal_dtype_t kBadDtype = static_cast<hal_dtype_t>(77);
constexpr hal_reduce_op_t kBadOp = static_cast<hal_reduce_op_t>(77);
hal_dtype_t dtype(const Argument& a) {
  return a.bad ? kBadDtype : HAL_DTYPE_F32;
}
hal_reduce_op_t op(const Argument& a) {
  return a.bad ? kBadOp : HAL_REDUCE_SUM;
}
uint32_t rank(const Argument& a) {
  return a.bad ? 1000u : 0u;  // the communicators have one rank
}

// One row per public entry point that SPEC §4.1's order applies to (all but
// kExempt): its parameters' roles, in order, and how to call it.
const std::vector<Entry>& entries() {
  using A = const std::vector<Argument>&;
  const Parameter bad_argument = value(HAL_ERROR_INVALID_ARGUMENT);
  static const std::vector<Entry> table = {
      // ---- hal/init.h, hal/device.h
      {"hal_plugin_report_count",
       {out()},
       [](A a) {
         uint32_t count = 0;
         return hal_plugin_report_count(out_or_null(a[0], count));
       }},
      {"hal_plugin_report_get",
       {value(HAL_ERROR_NOT_FOUND), out()},
       [](A a) {
         hal_plugin_report_t report{};
         report.struct_size = sizeof(report);
         return hal_plugin_report_get(a[0].bad ? 1000 : 0, out_or_null(a[1], report));
       }},
      {"hal_device_count",
       {out()},
       [](A a) {
         uint32_t count = 0;
         return hal_device_count(out_or_null(a[0], count));
       }},
      {"hal_device_get",
       {value(HAL_ERROR_NOT_FOUND), out()},
       [](A a) {
         hal_device_t device = nullptr;
         return hal_device_get(a[0].bad ? 1000 : 0, out_or_null(a[1], device));
       }},
      {"hal_device_get_properties",
       {handle(Kind::kDevice), out(), bad_argument},
       [](A a) {
         hal_device_properties_t properties{};
         properties.struct_size = a[2].bad ? 8 : sizeof(properties);
         return hal_device_get_properties(as<hal_device_t>(a[0]), out_or_null(a[1], properties));
       }},
      {"hal_device_synchronize",
       {handle(Kind::kDevice)},
       [](A a) { return hal_device_synchronize(as<hal_device_t>(a[0])); }},
      // ---- hal/stream.h
      {"hal_stream_create",
       {handle(Kind::kDevice), bad_argument, out()},
       [](A a) {
         hal_stream_t stream = nullptr;
         return hal_stream_create(as<hal_device_t>(a[0]),
                                  static_cast<hal_stream_flags_t>(a[1].bad ? 0x40u : 0u),
                                  out_or_null(a[2], stream));
       }},
      {"hal_stream_destroy",
       {nullable(Kind::kStream)},
       [](A a) { return hal_stream_destroy(as<hal_stream_t>(a[0])); }},
      {"hal_stream_get_device",
       {handle(Kind::kStream), out()},
       [](A a) {
         hal_device_t device = nullptr;
         return hal_stream_get_device(as<hal_stream_t>(a[0]), out_or_null(a[1], device));
       }},
      {"hal_stream_synchronize",
       {handle(Kind::kStream)},
       [](A a) { return hal_stream_synchronize(as<hal_stream_t>(a[0])); }},
      {"hal_stream_query",
       {handle(Kind::kStream)},
       [](A a) { return hal_stream_query(as<hal_stream_t>(a[0])); }},
      {"hal_stream_wait_event",
       {handle(Kind::kStream), handle(Kind::kEvent)},
       [](A a) { return hal_stream_wait_event(as<hal_stream_t>(a[0]), as<hal_event_t>(a[1])); }},
      {"hal_stream_enqueue_host_fn",
       {handle(Kind::kStream), out()},
       [](A a) {
         return hal_stream_enqueue_host_fn(as<hal_stream_t>(a[0]), a[1].null_out ? nullptr : no_op,
                                           nullptr);
       }},
      // ---- hal/event.h
      {"hal_event_create",
       {handle(Kind::kDevice), bad_argument, out()},
       [](A a) {
         hal_event_t event = nullptr;
         return hal_event_create(as<hal_device_t>(a[0]),
                                 static_cast<hal_event_flags_t>(a[1].bad ? 0x40u : 0u),
                                 out_or_null(a[2], event));
       }},
      {"hal_event_destroy",
       {nullable(Kind::kEvent)},
       [](A a) { return hal_event_destroy(as<hal_event_t>(a[0])); }},
      {"hal_event_record",
       {handle(Kind::kEvent), handle(Kind::kStream)},
       [](A a) { return hal_event_record(as<hal_event_t>(a[0]), as<hal_stream_t>(a[1])); }},
      {"hal_event_query",
       {handle(Kind::kEvent)},
       [](A a) { return hal_event_query(as<hal_event_t>(a[0])); }},
      {"hal_event_synchronize",
       {handle(Kind::kEvent)},
       [](A a) { return hal_event_synchronize(as<hal_event_t>(a[0])); }},
      {"hal_event_elapsed_ms",
       {handle(Kind::kEvent), handle(Kind::kEvent), out()},
       [](A a) {
         float ms = 0;
         return hal_event_elapsed_ms(as<hal_event_t>(a[0]), as<hal_event_t>(a[1]),
                                     out_or_null(a[2], ms));
       }},
      // ---- hal/memory.h
      {"hal_mem_alloc",
       {handle(Kind::kDevice), value(HAL_ERROR_INVALID_SIZE), out()},
       [](A a) {
         void* pointer = nullptr;
         return hal_mem_alloc(as<hal_device_t>(a[0]), HAL_MEMORY_DEVICE, a[1].bad ? 0 : 64, 0,
                              out_or_null(a[2], pointer));
       }},
      // A pointer HAL did not allocate: NOT_FOUND (NULL is the documented no-op).
      {"hal_mem_free",
       {value(HAL_ERROR_NOT_FOUND)},
       [](A a) { return hal_mem_free(a[0].bad ? g_target : g_source); }},
      {"hal_mem_get_info",
       {out(), out(), bad_argument},
       [](A a) {
         hal_memory_info_t info{};
         info.struct_size = a[2].bad ? 8 : sizeof(info);
         return hal_mem_get_info(a[0].null_out ? nullptr : g_source, out_or_null(a[1], info));
       }},
      {"hal_memcpy_async",
       {out(), out(), handle(Kind::kStream)},
       [](A a) {
         return hal_memcpy_async(a[0].null_out ? nullptr : g_target,
                                 a[1].null_out ? nullptr : g_source, 16, as<hal_stream_t>(a[2]));
       }},
      {"hal_memset_async",
       {out(), handle(Kind::kStream)},
       [](A a) {
         return hal_memset_async(a[0].null_out ? nullptr : g_target, 7, 16, as<hal_stream_t>(a[1]));
       }},
      // ---- hal/kernel.h
      {"hal_module_load",
       {handle(Kind::kDevice), out(), out(), bad_argument},
       [](A a) {
         const hal_module_desc_t desc = module_desc(a[3].bad);
         hal_module_t module = nullptr;
         return hal_module_load(as<hal_device_t>(a[0]), a[1].null_out ? nullptr : &desc,
                                out_or_null(a[2], module));
       }},
      {"hal_module_unload",
       {nullable(Kind::kModule)},
       [](A a) { return hal_module_unload(as<hal_module_t>(a[0])); }},
      {"hal_kernel_get",
       {handle(Kind::kModule), out(), out(), bad_argument},
       [](A a) {
         hal_kernel_desc_t desc{};
         desc.struct_size = a[3].bad ? 8 : sizeof(desc);
         desc.name = "scale";
         hal_kernel_t kernel = nullptr;
         return hal_kernel_get(as<hal_module_t>(a[0]), a[1].null_out ? nullptr : &desc,
                               out_or_null(a[2], kernel));
       }},
      {"hal_kernel_get_info",
       {handle(Kind::kKernel), out(), bad_argument},
       [](A a) {
         hal_kernel_info_t info{};
         info.struct_size = a[2].bad ? 8 : sizeof(info);
         return hal_kernel_get_info(as<hal_kernel_t>(a[0]), out_or_null(a[1], info));
       }},
      {"hal_launch_kernel",
       {handle(Kind::kKernel), out(), bad_argument, handle(Kind::kStream)},
       [](A a) {
         const hal_launch_config_t config = launch_config(a[2].bad);
         return hal_launch_kernel(as<hal_kernel_t>(a[0]), a[1].null_out ? nullptr : &config, 0,
                                  nullptr, as<hal_stream_t>(a[3]));
       }},
      // ---- hal/collective.h
      {"hal_comm_get_unique_id",
       {out()},
       [](A a) {
         hal_comm_unique_id_t id{};
         return hal_comm_get_unique_id(out_or_null(a[0], id));
       }},
      {"hal_comm_init_rank",
       {handle(Kind::kDevice), bad_argument, out()},
       [](A a) {
         hal_comm_t comm = nullptr;
         return hal_comm_init_rank(as<hal_device_t>(a[0]), 1, nullptr, rank(a[1]), nullptr,
                                   out_or_null(a[2], comm));
       }},
      {"hal_comm_init_all",
       {bad_argument, out(), out()},
       [](A a) {
         static hal_device_t devices[1];
         hal_comm_t comms[1] = {};
         return hal_comm_init_all(a[0].bad ? 0 : 1, a[1].null_out ? nullptr : devices, nullptr,
                                  a[2].null_out ? nullptr : comms);
       }},
      {"hal_comm_destroy",
       {nullable(Kind::kComm)},
       [](A a) { return hal_comm_destroy(as<hal_comm_t>(a[0])); }},
      {"hal_comm_abort",
       {handle(Kind::kComm)},
       [](A a) { return hal_comm_abort(as<hal_comm_t>(a[0])); }},
      {"hal_comm_get_async_error",
       {handle(Kind::kComm), out()},
       [](A a) {
         hal_result_t error = HAL_SUCCESS;
         return hal_comm_get_async_error(as<hal_comm_t>(a[0]), out_or_null(a[1], error));
       }},
      {"hal_comm_count",
       {handle(Kind::kComm), out()},
       [](A a) {
         uint32_t count = 0;
         return hal_comm_count(as<hal_comm_t>(a[0]), out_or_null(a[1], count));
       }},
      {"hal_comm_rank",
       {handle(Kind::kComm), out()},
       [](A a) {
         uint32_t rank = 0;
         return hal_comm_rank(as<hal_comm_t>(a[0]), out_or_null(a[1], rank));
       }},
      {"hal_comm_get_device",
       {handle(Kind::kComm), out()},
       [](A a) {
         hal_device_t device = nullptr;
         return hal_comm_get_device(as<hal_comm_t>(a[0]), out_or_null(a[1], device));
       }},
      {"hal_allreduce",
       {bad_argument, bad_argument, handle(Kind::kComm), handle(Kind::kStream)},
       [](A a) {
         return hal_allreduce(g_source, g_target, 4, dtype(a[0]), op(a[1]), as<hal_comm_t>(a[2]),
                              as<hal_stream_t>(a[3]));
       }},
      {"hal_broadcast",
       {bad_argument, bad_argument, handle(Kind::kComm), handle(Kind::kStream)},
       [](A a) {
         return hal_broadcast(g_source, g_target, 4, dtype(a[0]), rank(a[1]), as<hal_comm_t>(a[2]),
                              as<hal_stream_t>(a[3]));
       }},
      {"hal_reduce",
       {bad_argument, bad_argument, bad_argument, handle(Kind::kComm), handle(Kind::kStream)},
       [](A a) {
         return hal_reduce(g_source, g_target, 4, dtype(a[0]), op(a[1]), rank(a[2]),
                           as<hal_comm_t>(a[3]), as<hal_stream_t>(a[4]));
       }},
      {"hal_allgather",
       {bad_argument, handle(Kind::kComm), handle(Kind::kStream)},
       [](A a) {
         return hal_allgather(g_source, g_target, 4, dtype(a[0]), as<hal_comm_t>(a[1]),
                              as<hal_stream_t>(a[2]));
       }},
      {"hal_reduce_scatter",
       {bad_argument, bad_argument, handle(Kind::kComm), handle(Kind::kStream)},
       [](A a) {
         return hal_reduce_scatter(g_source, g_target, 4, dtype(a[0]), op(a[1]),
                                   as<hal_comm_t>(a[2]), as<hal_stream_t>(a[3]));
       }},
      {"hal_alltoall",
       {bad_argument, handle(Kind::kComm), handle(Kind::kStream)},
       [](A a) {
         return hal_alltoall(g_source, g_target, 4, dtype(a[0]), as<hal_comm_t>(a[1]),
                             as<hal_stream_t>(a[2]));
       }},
      {"hal_alltoallv",
       {out(), out(), bad_argument, handle(Kind::kComm), handle(Kind::kStream)},
       [](A a) {
         static const size_t counts[1] = {4};
         return hal_alltoallv(g_source, a[0].null_out ? nullptr : counts, nullptr, g_target,
                              a[1].null_out ? nullptr : counts, nullptr, dtype(a[2]),
                              as<hal_comm_t>(a[3]), as<hal_stream_t>(a[4]));
       }},
      {"hal_send",
       {bad_argument, bad_argument, handle(Kind::kComm), handle(Kind::kStream)},
       [](A a) {
         return hal_send(g_source, 4, dtype(a[0]), rank(a[1]), as<hal_comm_t>(a[2]),
                         as<hal_stream_t>(a[3]));
       }},
      {"hal_recv",
       {bad_argument, bad_argument, handle(Kind::kComm), handle(Kind::kStream)},
       [](A a) {
         return hal_recv(g_target, 4, dtype(a[0]), rank(a[1]), as<hal_comm_t>(a[2]),
                         as<hal_stream_t>(a[3]));
       }},
      // ---- hal/ops.h
      {"hal_op_plan_create",
       {handle(Kind::kDevice), out(), bad_argument, out()},
       [](A a) {
         const hal_op_unary_desc_t desc = scale_desc();
         hal_op_plan_t plan = nullptr;
         const hal_result_t result =
             hal_op_plan_create(as<hal_device_t>(a[0]), a[1].null_out ? nullptr : &desc.header,
                                a[2].bad ? 0x80u : 0u, out_or_null(a[3], plan));
         if (plan != nullptr) hal_op_plan_destroy(plan);
         return result;
       }},
      {"hal_op_query_implementations",
       {handle(Kind::kDevice), bad_argument, bad_argument, out()},
       [](A a) {
         const hal_op_unary_desc_t desc = scale_desc();
         hal_op_implementations_info_t info{};
         info.struct_size = sizeof(info);
         return hal_op_query_implementations(
             as<hal_device_t>(a[0]), a[1].bad ? static_cast<hal_op_kind_t>(9999) : HAL_OP_UNARY,
             a[1].bad ? nullptr : &desc.header, a[2].bad ? 0x80u : 0u, out_or_null(a[3], info));
       }},
      {"hal_op_plan_get_info",
       {handle(Kind::kOpPlan), out()},
       [](A a) {
         hal_op_plan_info_t info{};
         info.struct_size = sizeof(info);
         return hal_op_plan_get_info(as<hal_op_plan_t>(a[0]), out_or_null(a[1], info));
       }},
      {"hal_op_execute",
       {handle(Kind::kOpPlan), out(), handle(Kind::kStream)},
       [](A a) {
         void* operands[2] = {g_source, g_target};
         hal_op_exec_args_t args{};
         args.struct_size = sizeof(args);
         args.operand_count = 2;
         args.operands = operands;
         return hal_op_execute(as<hal_op_plan_t>(a[0]), a[1].null_out ? nullptr : &args,
                               as<hal_stream_t>(a[2]));
       }},
      {"hal_op_plan_destroy",
       {nullable(Kind::kOpPlan)},
       [](A a) { return hal_op_plan_destroy(as<hal_op_plan_t>(a[0])); }},
      // ---- hal/moe.h (routings of no tokens: no buffer is touched)
      {"hal_moe_routing_create",
       {handle(Kind::kComm), out(), bad_argument, handle(Kind::kStream), out()},
       [](A a) {
         hal_moe_routing_desc_t desc = HAL_MOE_ROUTING_DESC_INIT;
         desc.num_experts = 1;
         desc.top_k = a[2].bad ? 0u : 1u;
         hal_moe_routing_t routing = nullptr;
         const hal_result_t result =
             hal_moe_routing_create(as<hal_comm_t>(a[0]), a[1].null_out ? nullptr : &desc, nullptr,
                                    as<hal_stream_t>(a[3]), out_or_null(a[4], routing));
         if (routing != nullptr) hal_moe_routing_destroy(routing);
         return result;
       }},
      {"hal_moe_routing_get_info",
       {handle(Kind::kMoeRouting), out()},
       [](A a) {
         hal_moe_routing_info_t info{};
         info.struct_size = sizeof(info);
         return hal_moe_routing_get_info(as<hal_moe_routing_t>(a[0]), out_or_null(a[1], info));
       }},
      {"hal_moe_routing_get_expert_counts",
       {handle(Kind::kMoeRouting), bad_argument, out()},
       [](A a) {
         size_t counts[1] = {};
         return hal_moe_routing_get_expert_counts(as<hal_moe_routing_t>(a[0]), a[1].bad ? 2u : 1u,
                                                  a[2].null_out ? nullptr : counts);
       }},
      {"hal_moe_routing_destroy",
       {nullable(Kind::kMoeRouting)},
       [](A a) { return hal_moe_routing_destroy(as<hal_moe_routing_t>(a[0])); }},
      {"hal_moe_dispatch",
       {handle(Kind::kMoeRouting), bad_argument, handle(Kind::kStream)},
       [](A a) {
         return hal_moe_dispatch(as<hal_moe_routing_t>(a[0]), nullptr, nullptr, 4, dtype(a[1]),
                                 nullptr, as<hal_stream_t>(a[2]));
       }},
      {"hal_moe_combine",
       {handle(Kind::kMoeRouting), bad_argument, handle(Kind::kStream)},
       [](A a) {
         return hal_moe_combine(as<hal_moe_routing_t>(a[0]), nullptr, nullptr, 4, dtype(a[1]),
                                nullptr, as<hal_stream_t>(a[2]));
       }},
      // No arguments: only "not initialised" applies.
      {"hal_group_start", {}, [](A) { return hal_group_start(); }},
      {"hal_group_end", {}, [](A) { return hal_group_end(); }},
  };
  return table;
}

// The exported functions SPEC §4.1's order does not apply to: they work
// without hal_init (§4.1, "Results beyond the listed ones"), or are the
// plugins' entry rather than the loader's.
const std::set<std::string> kExempt = {
    "hal_init", "hal_shutdown", "hal_get_version", "hal_result_string", "hal_error_get_detail",
    "hal_error_last_message", "hal_plugin_entry",
    // a static inline helper of hal/ops.h: no handle, no state, never fails
    "hal_tensor_desc_contiguous"};

// The public functions of the ABI baseline (abi/baseline.txt, kept equal to
// api/ and libhal.so by the abi tests).
std::set<std::string> baseline_functions() {
  std::ifstream baseline(HAL_TEST_ABI_BASELINE);
  REQUIRE(baseline.good());
  std::set<std::string> functions;
  std::string line;
  while (std::getline(baseline, line)) {
    static const std::string kPrefix = "function ";
    if (line.compare(0, kPrefix.size(), kPrefix) == 0)
      functions.insert(line.substr(kPrefix.size()));
  }
  return functions;
}

std::vector<Fault> faults_of(const Parameter& parameter) {
  switch (parameter.role) {
    case Parameter::kHandle:
      // Devices are never destroyed.
      if (parameter.kind == Kind::kDevice)
        return {Fault::kNone, Fault::kNull, Fault::kForeign, Fault::kWrongKind};
      return {Fault::kNone, Fault::kNull, Fault::kForeign, Fault::kWrongKind, Fault::kDestroyed};
    case Parameter::kOut:
      return {Fault::kNone, Fault::kNullOut};
    case Parameter::kValue:
      return {Fault::kNone, Fault::kBadValue};
  }
  return {};
}

// The precedence, written independently of the loader.
hal_result_t predicted(bool initialised, const std::vector<Parameter>& parameters,
                       const std::vector<Fault>& faults) {
  if (!initialised) return HAL_ERROR_NOT_INITIALIZED;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (parameters[i].role != Parameter::kHandle || faults[i] == Fault::kNone) continue;
    if (faults[i] == Fault::kNull && parameters[i].nullable) return HAL_SUCCESS;  // a no-op
    return faults[i] == Fault::kDestroyed ? HAL_ERROR_DESTROYED_HANDLE : HAL_ERROR_INVALID_HANDLE;
  }
  for (size_t i = 0; i < parameters.size(); ++i)
    if (faults[i] == Fault::kNullOut) return HAL_ERROR_NULL_POINTER;
  for (size_t i = 0; i < parameters.size(); ++i)
    if (faults[i] == Fault::kBadValue) return parameters[i].bad_value;
  return HAL_SUCCESS;
}

const char* fault_name(Fault fault) {
  switch (fault) {
    case Fault::kNone:
      return "ok";
    case Fault::kNull:
      return "NULL";
    case Fault::kForeign:
      return "foreign";
    case Fault::kWrongKind:
      return "wrong-type";
    case Fault::kDestroyed:
      return "destroyed";
    case Fault::kNullOut:
      return "NULL-out";
    case Fault::kBadValue:
      return "bad-value";
  }
  return "?";
}

// Live and destroyed handles of each kind, all on one device.
struct Handles {
  static constexpr size_t kKinds = 8;
  void* live_handles[kKinds] = {};
  void* destroyed_handles[kKinds] = {};  // none for devices: they are never destroyed

  void* live(Kind kind) const { return live_handles[static_cast<size_t>(kind)]; }
  // A live handle of another type.
  void* wrong(Kind kind) const { return live(kind == Kind::kEvent ? Kind::kStream : Kind::kEvent); }
  void* destroyed(Kind kind) const { return destroyed_handles[static_cast<size_t>(kind)]; }
};

// Calls every entry with every combination of faults; returns how many calls.
size_t check_all(bool initialised, const Handles& handles) {
  alignas(64) static unsigned char foreign[128] = {};  // zeros: no HAL handle
  size_t calls = 0;
  for (const Entry& entry : entries()) {
    const size_t n = entry.parameters.size();
    std::vector<std::vector<Fault>> choices;
    for (const Parameter& parameter : entry.parameters) choices.push_back(faults_of(parameter));
    std::vector<size_t> pick(n, 0);
    while (true) {
      std::vector<Fault> faults(n);
      bool any = false;
      for (size_t i = 0; i < n; ++i) {
        faults[i] = choices[i][pick[i]];
        any = any || faults[i] != Fault::kNone;
      }
      // Fault-free calls do real work and are tested elsewhere.
      if (any || !initialised) {
        std::vector<Argument> arguments(n);
        std::string described;
        for (size_t i = 0; i < n; ++i) {
          const Parameter& parameter = entry.parameters[i];
          described += std::string(i ? ", " : "") + fault_name(faults[i]);
          if (parameter.role == Parameter::kHandle) {
            switch (faults[i]) {
              case Fault::kNone:
                arguments[i].handle = handles.live(parameter.kind);
                break;
              case Fault::kForeign:
                arguments[i].handle = foreign;
                break;
              case Fault::kWrongKind:
                arguments[i].handle = handles.wrong(parameter.kind);
                break;
              case Fault::kDestroyed:
                arguments[i].handle = handles.destroyed(parameter.kind);
                break;
              default:
                arguments[i].handle = nullptr;
            }
          }
          arguments[i].null_out = faults[i] == Fault::kNullOut;
          arguments[i].bad = faults[i] == Fault::kBadValue;
        }
        const hal_result_t expected = predicted(initialised, entry.parameters, faults);
        INFO(entry.name << "(" << described << ")" << (initialised ? "" : " before hal_init"));
        const hal_result_t result = entry.call(arguments);
        CHECK(hal_result_string(result) == std::string(hal_result_string(expected)));
        if (result != HAL_SUCCESS) {
          const Detail detail = last_detail();
          CHECK(detail.result == result);
          CHECK(detail.function == entry.name);
        }
        ++calls;
      }
      size_t i = 0;
      while (i < n && ++pick[i] == choices[i].size()) pick[i++] = 0;
      if (i == n) break;
    }
  }
  return calls;
}

// Creates a live and a destroyed handle of each kind on the mock plugin's
// first device (a destroyed module's kernel is a destroyed kernel).
Handles make_handles() {
  Handles handles;
  hal_device_t device = nullptr;
  REQUIRE(hal_device_get(0, &device) == HAL_SUCCESS);
  auto set = [&](Kind kind, void* live, void* destroyed) {
    handles.live_handles[static_cast<size_t>(kind)] = live;
    handles.destroyed_handles[static_cast<size_t>(kind)] = destroyed;
  };
  hal_stream_t streams[2] = {};
  hal_event_t events[2] = {};
  hal_module_t modules[2] = {};
  hal_kernel_t kernels[2] = {};
  hal_comm_t comms[2] = {};
  hal_op_plan_t plans[2] = {};
  const hal_op_unary_desc_t scale = scale_desc();
  const hal_module_desc_t desc = module_desc(false);
  hal_kernel_desc_t kernel_desc{};
  kernel_desc.struct_size = sizeof(kernel_desc);
  kernel_desc.name = "scale";
  for (int i = 0; i < 2; ++i) {
    REQUIRE(hal_stream_create(device, HAL_STREAM_FLAG_NONE, &streams[i]) == HAL_SUCCESS);
    REQUIRE(hal_event_create(device, HAL_EVENT_FLAG_NONE, &events[i]) == HAL_SUCCESS);
    REQUIRE(hal_module_load(device, &desc, &modules[i]) == HAL_SUCCESS);
    REQUIRE(hal_kernel_get(modules[i], &kernel_desc, &kernels[i]) == HAL_SUCCESS);
    REQUIRE(hal_comm_init_all(1, &device, nullptr, &comms[i]) == HAL_SUCCESS);
    REQUIRE(hal_op_plan_create(device, &scale.header, 0, &plans[i]) == HAL_SUCCESS);
  }
  REQUIRE(hal_op_plan_destroy(plans[1]) == HAL_SUCCESS);
  hal_moe_routing_t routings[2] = {};
  hal_moe_routing_desc_t routing_desc = HAL_MOE_ROUTING_DESC_INIT;
  routing_desc.num_experts = 1;
  routing_desc.top_k = 1;
  for (hal_moe_routing_t& routing : routings) {
    REQUIRE(hal_moe_routing_create(comms[0], &routing_desc, nullptr, streams[0], &routing) ==
            HAL_SUCCESS);
  }
  REQUIRE(hal_moe_routing_destroy(routings[1]) == HAL_SUCCESS);
  REQUIRE(hal_stream_destroy(streams[1]) == HAL_SUCCESS);
  REQUIRE(hal_event_destroy(events[1]) == HAL_SUCCESS);
  REQUIRE(hal_module_unload(modules[1]) == HAL_SUCCESS);
  REQUIRE(hal_comm_destroy(comms[1]) == HAL_SUCCESS);
  set(Kind::kDevice, device, nullptr);
  set(Kind::kStream, streams[0], streams[1]);
  set(Kind::kEvent, events[0], events[1]);
  set(Kind::kModule, modules[0], modules[1]);
  set(Kind::kKernel, kernels[0], kernels[1]);
  set(Kind::kComm, comms[0], comms[1]);
  set(Kind::kOpPlan, plans[0], plans[1]);
  set(Kind::kMoeRouting, routings[0], routings[1]);
  return handles;
}

void destroy_handles(const Handles& handles) {
  CHECK(hal_moe_routing_destroy(static_cast<hal_moe_routing_t>(handles.live(Kind::kMoeRouting))) ==
        HAL_SUCCESS);
  CHECK(hal_op_plan_destroy(static_cast<hal_op_plan_t>(handles.live(Kind::kOpPlan))) ==
        HAL_SUCCESS);
  CHECK(hal_comm_destroy(static_cast<hal_comm_t>(handles.live(Kind::kComm))) == HAL_SUCCESS);
  CHECK(hal_module_unload(static_cast<hal_module_t>(handles.live(Kind::kModule))) == HAL_SUCCESS);
  CHECK(hal_event_destroy(static_cast<hal_event_t>(handles.live(Kind::kEvent))) == HAL_SUCCESS);
  CHECK(hal_stream_destroy(static_cast<hal_stream_t>(handles.live(Kind::kStream))) == HAL_SUCCESS);
}

}  // namespace

TEST_CASE("every entry reports the first fault in the documented precedence", "[errors]") {
  // The validation layer checks handles by its own records before the entry
  // point does: the order must hold with it too. Layers are chosen at hal_init.
  for (const char* validation : {"0", "1"}) {
    INFO("HAL_VALIDATION=" << validation);
    REQUIRE(setenv("HAL_VALIDATION", validation, 1) == 0);
    Handles handles;
    {
      Session session(kPluginDir, "mock");
      REQUIRE(session.result == HAL_SUCCESS);
      handles = make_handles();
      CHECK(check_all(true, handles) > 1000);
      destroy_handles(handles);
    }
    // Not initialised comes first: no handle is even read (these are dangling now).
    CHECK(check_all(false, handles) >= entries().size());
  }
  unsetenv("HAL_VALIDATION");
}

TEST_CASE("every exported function has a row in the precedence table", "[errors]") {
  std::set<std::string> rows;
  for (const Entry& entry : entries()) {
    CHECK(rows.insert(entry.name).second);  // one row each
    CHECK(kExempt.count(entry.name) == 0);
  }
  const std::set<std::string> exported = baseline_functions();
  REQUIRE(exported.size() > 40);
  for (const std::string& function : exported) {
    INFO(function << " is exported but has no row in precedence_test.cpp's table");
    CHECK((rows.count(function) == 1 || kExempt.count(function) == 1));
  }
  for (const std::string& row : rows) {
    INFO(row << " has a row but is not an exported function");
    CHECK(exported.count(row) == 1);
  }
}
