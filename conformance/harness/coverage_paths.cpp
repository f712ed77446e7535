// The list of documented paths a device should see: one per function and
// documented result, enum value and descriptor field (from the API model),
// and the semantic paths the coverage hooks record, each with the devices it
// applies to and where SPEC.md defines it.
#include <string>
#include <vector>

#include "api_model.hpp"
#include "coverage.hpp"

namespace halconform::coverage {
namespace {

struct Needs {
  hal_device_caps_t capabilities = 0;
  uint32_t min_devices = 1;
  hal_device_caps_t absent = 0;  // applies only when these are NOT declared
};

std::string why_not(const Needs& needs, const hal_device_properties_t& p, uint32_t devices) {
  const hal_device_caps_t missing = needs.capabilities & ~p.capabilities;
  if (missing != 0) return "the device does not declare " + std::to_string(missing) + "";
  if ((needs.absent & p.capabilities) != 0) return "the device declares the capability";
  if (devices < needs.min_devices) {
    return "needs " + std::to_string(needs.min_devices) + " devices of the plugin";
  }
  return {};
}

std::string cap_names(hal_device_caps_t caps) {
  std::string out;
  const model::EnumType* e = model::find_enum("hal_device_cap_bits_t");
  for (const model::EnumValue& v : e != nullptr ? e->values : std::span<const model::EnumValue>{}) {
    if (v.value != 0 && (caps & static_cast<uint64_t>(v.value)) != 0) {
      out += (out.empty() ? "" : "|") + std::string(v.name);
    }
  }
  return out.empty() ? "none" : out;
}

}  // namespace

std::vector<Path> semantic_paths(const hal_device_properties_t& p, uint32_t devices) {
  std::vector<Path> out;
  auto add = [&](const std::string& name, const Needs& needs, const char* source) {
    std::string reason = why_not(needs, p, devices);
    if (reason.rfind("the device does not declare", 0) == 0) {
      reason = "the device does not declare " + cap_names(needs.capabilities & ~p.capabilities);
    }
    out.push_back({name, reason, source});
  };
  // Copies and fills between every kind of memory (SPEC.md §6, §11.6).
  std::vector<std::pair<std::string, hal_device_caps_t>> classes = {{"host", 0}};
  if (const model::EnumType* kinds = model::find_enum("hal_memory_kind_t")) {
    for (const model::EnumValue& v : kinds->values) {
      const std::string name = memory_kind_short(static_cast<hal_memory_kind_t>(v.value));
      hal_device_caps_t needs = 0;
      if (name == "HOST") needs = HAL_DEVICE_CAP_HOST_MEMORY;
      if (name == "SHARED") needs = HAL_DEVICE_CAP_SHARED_MEMORY;
      classes.emplace_back(name, needs);
    }
  }
  for (const auto& [from, from_needs] : classes) {
    for (const auto& [to, to_needs] : classes) {
      add("memcpy:" + from + "->" + to, {from_needs | to_needs}, "SPEC.md §6, §11.6");
    }
    add("memset:" + from, {from_needs}, "SPEC.md §6, §11.6");
  }
  const Needs peers{HAL_DEVICE_CAP_PEER_ACCESS, 2};
  add("memcpy:peer_DEVICE->DEVICE", peers, "SPEC.md §6 (peer copies)");
  add("memcpy:DEVICE->peer_DEVICE", peers, "SPEC.md §6 (peer copies)");
  add("memcpy:peer_DEVICE->host", peers, "SPEC.md §6 (peer copies)");
  add("memcpy:stream_of_neither_device", peers, "SPEC.md §6 (a copy on a third device's stream)");
  add("memcpy:peer_DEVICE->peer_DEVICE", peers, "SPEC.md §6 (a copy on a third device's stream)");
  add("memset:peer_DEVICE", peers, "SPEC.md §6 (peer copies)");
  add("memcpy:size_zero", {}, "SPEC.md §11.6");
  add("memset:size_zero", {}, "SPEC.md §11.6");
  add("alloc:alignment_default", {}, "SPEC.md §11.6 (alignment 0)");
  add("alloc:alignment_below_minimum", {}, "SPEC.md §11.6 (max(alignment, min_alignment_bytes))");
  add("alloc:alignment_minimum", {}, "SPEC.md §11.6");
  add("alloc:alignment_above_minimum", {}, "SPEC.md §11.6");
  // Host functions: where they run, and what they may call (SPEC.md §7).
  add("host_fn:ran_on_another_thread", {HAL_DEVICE_CAP_HOST_CALLBACKS}, "SPEC.md §7");
  add("host_fn:ran_on_enqueuing_thread", {0, 1, HAL_DEVICE_CAP_HOST_CALLBACKS},
      "SPEC.md §7 (the loader's blocking fallback)");
  for (const char* call : {"hal_stream_synchronize", "hal_stream_destroy"}) {
    add(std::string("from_host_fn:") + call + ":own_stream:HAL_ERROR_INVALID_STATE", {},
        "SPEC.md §7");
  }
  add("from_host_fn:hal_stream_synchronize:other_stream:HAL_SUCCESS", {}, "SPEC.md §7");
  for (const char* call : {"hal_device_synchronize", "hal_mem_free"}) {
    add(std::string("from_host_fn:") + call + ":own_device:HAL_ERROR_INVALID_STATE", {},
        "SPEC.md §7");
  }
  add("from_host_fn:hal_module_unload:own_device:HAL_ERROR_INVALID_STATE", {HAL_DEVICE_CAP_KERNELS},
      "SPEC.md §7");
  add("from_host_fn:hal_device_synchronize:other_device:HAL_SUCCESS", {0, 2}, "SPEC.md §7");
  // Events (SPEC.md §7).
  add("wait_event:same_device", {}, "SPEC.md §7");
  add("wait_event:other_device", {0, 2}, "SPEC.md §7");
  add("wait_event:never_recorded", {}, "SPEC.md §7");
  add("event_record:again", {}, "SPEC.md §7 (re-record)");
  add("elapsed:same_stream", {HAL_DEVICE_CAP_EVENT_TIMING}, "SPEC.md §7 (timing)");
  add("elapsed:across_streams", {HAL_DEVICE_CAP_EVENT_TIMING}, "SPEC.md §7 (timing)");
  // A lost stream: what every call returns until it is destroyed (SPEC.md §4.4).
  // The suite loses a stream by aborting a communicator under a queued collective,
  // which needs the plugin's own collectives.
  const Needs lost{HAL_DEVICE_CAP_COLLECTIVES | HAL_DEVICE_CAP_HOST_CALLBACKS};
  add("lost:first_reported_by:hal_stream_synchronize", lost, "SPEC.md §4.4");
  for (const char* call : {"hal_stream_synchronize", "hal_stream_query", "hal_device_synchronize",
                           "hal_event_query", "hal_event_synchronize", "hal_memcpy_async",
                           "hal_memset_async", "hal_stream_enqueue_host_fn",
                           "hal_stream_wait_event", "hal_event_record", "hal_allreduce"}) {
    add(std::string("on_lost_stream:") + call + ":HAL_ERROR_DEVICE_LOST", lost, "SPEC.md §4.4");
  }
  add("on_lost_stream:hal_launch_kernel:HAL_ERROR_DEVICE_LOST",
      {lost.capabilities | HAL_DEVICE_CAP_KERNELS}, "SPEC.md §4.4");
  add("on_lost_stream:hal_event_elapsed_ms:HAL_ERROR_INVALID_STATE",
      {lost.capabilities | HAL_DEVICE_CAP_EVENT_TIMING}, "SPEC.md §4.4, §11.5");
  for (const char* call : {"hal_stream_destroy", "hal_event_destroy", "hal_mem_free"}) {
    add(std::string("on_lost_stream:") + call + ":HAL_SUCCESS", lost, "SPEC.md §4.4 (releasing)");
  }
  add("on_lost_stream:hal_module_unload:HAL_SUCCESS", {lost.capabilities | HAL_DEVICE_CAP_KERNELS},
      "SPEC.md §4.4 (releasing)");
  add("wait_event:on_failed_work", lost, "SPEC.md §4.4 (scope of a failure)");
  // An event over work before the failure keeps its capture: complete.
  add("on_lost_stream:hal_event_query:HAL_SUCCESS", lost, "SPEC.md §4.4, §11.5");
  add("on_lost_stream:hal_event_synchronize:HAL_SUCCESS", lost, "SPEC.md §4.4, §11.5");
  // Kernels: a launch from a module of every format the device loads (SPEC.md §8).
  if ((p.capabilities & HAL_DEVICE_CAP_KERNELS) != 0) {
    if (const model::EnumType* formats = model::find_enum("hal_module_format_t")) {
      for (const model::EnumValue& v : formats->values) {
        if ((p.module_formats & (1u << v.value)) != 0) {
          add(std::string("launch:format:") + v.name, {HAL_DEVICE_CAP_KERNELS}, "SPEC.md §8");
        }
      }
    }
  }
  // Collectives (SPEC.md §13.2): in and out of place, at and off the root,
  // displacement layouts, grouped and not.
  for (const char* call :
       {"hal_allreduce", "hal_broadcast", "hal_reduce", "hal_allgather", "hal_reduce_scatter"}) {
    add(std::string("collective:") + call + ":in_place", {}, "SPEC.md §13.2 (in place)");
    add(std::string("collective:") + call + ":out_of_place", {}, "SPEC.md §13.2");
  }
  for (const char* call : {"hal_broadcast", "hal_reduce"}) {
    add(std::string("collective:") + call + ":at_root", {}, "SPEC.md §13.2");
    add(std::string("collective:") + call + ":not_root", {0, 2}, "SPEC.md §13.2");
  }
  for (const char* call :
       {"hal_allreduce", "hal_broadcast", "hal_reduce", "hal_allgather", "hal_reduce_scatter"}) {
    add(std::string("collective:") + call + ":in_group", {}, "SPEC.md §13.2 (groups)");
  }
  add("collective:hal_alltoallv:in_group", {HAL_DEVICE_CAP_ALLTOALLV}, "SPEC.md §13.2 (groups)");
  add("collective:hal_allreduce:outside_group", {}, "SPEC.md §13.2");
  for (const char* layout : {"send_packed", "send_displacements", "receive_packed",
                             "receive_displacements", "receive_gaps", "no_gaps", "zero_counts"}) {
    add(std::string("collective:hal_alltoallv:") + layout, {HAL_DEVICE_CAP_ALLTOALLV},
        "SPEC.md §13.2 (uneven all-to-all)");
  }
  return out;
}

std::vector<Path> paths_for(const hal_device_properties_t& properties, uint32_t plugin_devices) {
  std::vector<Path> out;
  // Every function: called successfully, and every result its comment documents.
  for (const model::Function& f : model::functions()) {
    const std::string source = std::string("hal/") + f.header;
    if (!f.returns_result) {
      out.push_back({std::string("call:") + f.name, {}, source});
      continue;
    }
    out.push_back({std::string("result:") + f.name + ":HAL_SUCCESS", {}, source});
    for (const char* const* r = f.results; *r != nullptr; ++r) {
      out.push_back({std::string("result:") + f.name + ":" + *r, {}, source});
    }
  }
  // Every value of every enum a caller passes, and one outside the enum.
  for (const model::EnumType& e : model::enums()) {
    if (!e.input) continue;
    const std::string source = std::string(e.name) + " (hal.h)";
    for (const model::EnumValue& v : e.values) {
      if (e.bitmask) {
        out.push_back({std::string("flags:") + e.name + ":" + v.name, {}, source});
      } else {
        out.push_back({std::string("value:") + e.name + ":" + v.name, {}, source});
      }
    }
    if (e.bitmask) {
      bool named_zero = false;
      for (const model::EnumValue& v : e.values) named_zero |= v.value == 0;
      if (!named_zero) out.push_back({std::string("flags:") + e.name + ":none", {}, source});
      out.push_back({std::string("flags:") + e.name + ":unknown", {}, source});
    } else {
      out.push_back({std::string("value:") + e.name + ":invalid", {}, source});
    }
  }
  // Every field of every struct a caller passes in, zero (its default) and set.
  for (const model::StructType& s : model::structs()) {
    for (const model::Field& field : s.fields) {
      if (model::is_bookkeeping_field(field.name) || field.kind == model::FieldKind::kEnum ||
          field.kind == model::FieldKind::kFlags) {
        continue;
      }
      if (std::string_view(field.type != nullptr ? field.type : "") == "hal_op_header_t") continue;
      if (std::string_view(s.name) == "hal_tensor_desc_t" ||
          std::string_view(s.name) == "hal_op_header_t") {
        continue;  // parts of descriptors, recorded through them
      }
      const std::string base = std::string("field:") + s.name + "." + field.name;
      const std::string source = std::string(s.name) + " (hal.h)";
      if (field.kind != model::FieldKind::kArray) out.push_back({base + ":zero", {}, source});
      out.push_back({base + ":set", {}, source});
    }
  }
  for (Path& path : semantic_paths(properties, plugin_devices)) out.push_back(std::move(path));
  return out;
}

}  // namespace halconform::coverage
