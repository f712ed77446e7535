// hal_torch._C: what the Python side of the device calls (device and stream
// state, memory statistics, metrics, DLPack import). Every aten kernel, the
// allocator, the guard and the hooks register themselves when this library
// loads.
#include "allocator.hpp"
#include "dlpack_import.hpp"
#include "fallback.hpp"
#include "index_status.hpp"
#include "metrics.hpp"
#include "plans.hpp"
#include "runtime.hpp"

#include "generator.hpp"

#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include <string>

namespace hal_torch {

void register_distributed(pybind11::module_& module);  // distributed.cpp

namespace {

namespace py = pybind11;

py::dict device_properties(int index) {
  const DeviceState& state = device_state(static_cast<c10::DeviceIndex>(index));
  const hal_device_properties_t& p = state.properties;
  py::dict out;
  out["name"] = std::string(p.name);
  out["vendor"] = std::string(p.vendor);
  out["plugin"] = std::string(p.plugin);
  out["driver_version"] = std::string(p.driver_version);
  out["hal_index"] = p.index;
  out["compute_units"] = p.compute_units;
  out["total_memory"] = p.total_memory_bytes;
  out["max_allocation"] = p.max_allocation_bytes;
  out["host_accessible"] = state.host_accessible;
  out["pinned_memory"] = state.has_host_memory;
  out["event_timing"] = state.has_event_timing;
  out["peer_access"] = (p.capabilities & HAL_DEVICE_CAP_PEER_ACCESS) != 0;
  return out;
}

py::dict memory_stats_dict(int index) {
  const MemoryStats s = memory_stats(static_cast<c10::DeviceIndex>(index));
  py::dict out;
  out["allocated_bytes.all.current"] = s.allocated_bytes;
  out["allocated_bytes.all.peak"] = s.peak_allocated_bytes;
  out["reserved_bytes.all.current"] = s.reserved_bytes;
  out["reserved_bytes.all.peak"] = s.peak_reserved_bytes;
  out["allocation.all.allocated"] = s.allocations;
  out["num_device_alloc"] = s.hal_allocations;
  out["num_device_free"] = s.hal_frees;
  out["num_alloc_retries"] = s.alloc_retries;
  out["num_ooms"] = s.ooms;
  return out;
}

py::dict metrics_dict() {
  py::dict ops;
  for (const auto& [name, c] : snapshot_counters()) {
    py::dict op;
    op["native"] = c.native;
    op["fallback"] = c.fallback;
    op["bytes_to_host"] = c.bytes_to_host;
    op["bytes_to_device"] = c.bytes_to_device;
    op["bytes_aliased"] = c.bytes_aliased;
    op["fallback_seconds"] = static_cast<double>(c.fallback_ns) * 1e-9;
    ops[py::str(name)] = op;
  }
  py::dict out;
  out["ops"] = ops;
  out["plans_created"] = g_plans_created.load();
  out["plan_cache_hits"] = g_plan_cache_hits.load();
  out["plans_cached"] = plan_cache_size();
  return out;
}

FallbackMode parse_mode(const std::string& mode) {
  if (mode == "warn") return FallbackMode::kWarn;
  if (mode == "silent") return FallbackMode::kSilent;
  if (mode == "error") return FallbackMode::kError;
  throw py::value_error("fallback mode must be 'warn', 'silent' or 'error', not '" + mode + "'");
}

std::string mode_name(FallbackMode mode) {
  switch (mode) {
    case FallbackMode::kWarn:
      return "warn";
    case FallbackMode::kSilent:
      return "silent";
    case FallbackMode::kError:
      return "error";
  }
  return "warn";
}

}  // namespace
}  // namespace hal_torch

PYBIND11_MODULE(_C, m) {
  namespace py = pybind11;
  using namespace hal_torch;
  m.doc() = "hal_torch's C++ half: the hal device for PyTorch on HAL";

  m.def("device_count", [] { return device_count(); });
  m.def("init_error", [] { return init_error(); });
  m.def("current_device", [] { return static_cast<int>(current_device()); });
  m.def("set_device", [](int index) { set_current_device(static_cast<c10::DeviceIndex>(index)); });
  m.def("device_properties", &device_properties);
  m.def(
      "synchronize",
      [](int index) {
        hal_device_t device = device_handle(static_cast<c10::DeviceIndex>(index));
        {
          py::gil_scoped_release release;
          check(hal_device_synchronize(device), "torch.hal.synchronize");
        }
        check_index_status(static_cast<c10::DeviceIndex>(index));
      },
      py::arg("device"));

  // Streams travel as (stream_id, device_index): torch.Stream is built in Python.
  m.def("current_stream", [](int index) {
    const c10::Stream s = current_stream(static_cast<c10::DeviceIndex>(index));
    return py::make_tuple(s.id(), static_cast<int>(s.device_index()));
  });
  m.def("default_stream", [](int index) {
    const c10::Stream s = default_stream(static_cast<c10::DeviceIndex>(index));
    return py::make_tuple(s.id(), static_cast<int>(s.device_index()));
  });
  m.def("set_stream", [](int64_t id, int index) {
    exchange_stream(c10::Stream(c10::Stream::UNSAFE,
                                c10::Device(kHalDeviceType, static_cast<c10::DeviceIndex>(index)),
                                id));
  });

  m.def("memory_stats", &memory_stats_dict);
  m.def("memory_allocated", [](int index) {
    return memory_stats(static_cast<c10::DeviceIndex>(index)).allocated_bytes;
  });
  m.def("max_memory_allocated", [](int index) {
    return memory_stats(static_cast<c10::DeviceIndex>(index)).peak_allocated_bytes;
  });
  m.def("memory_reserved", [](int index) {
    return memory_stats(static_cast<c10::DeviceIndex>(index)).reserved_bytes;
  });
  m.def("max_memory_reserved", [](int index) {
    return memory_stats(static_cast<c10::DeviceIndex>(index)).peak_reserved_bytes;
  });
  m.def("reset_peak_memory_stats",
        [](int index) { reset_peak_memory_stats(static_cast<c10::DeviceIndex>(index)); });
  m.def("empty_cache", [] {
    py::gil_scoped_release release;
    empty_cache();
  });

  m.def("default_generator", [](int index) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(index))));
  });

  m.def("metrics", &metrics_dict);
  m.def("reset_metrics", [] { reset_counters(); });
  m.def("set_fallback_mode", [](const std::string& mode) { set_fallback_mode(parse_mode(mode)); });
  m.def("fallback_mode", [] { return mode_name(fallback_mode()); });
  m.def("clear_plan_cache", [] { clear_plan_cache(); });

  m.def("from_dlpack", &from_dlpack, py::arg("capsule"),
        "A hal tensor over the HAL memory a DLPack capsule describes (no copy)");
  m.def("to_dlpack", &to_dlpack, py::arg("tensor"),
        "A DLPack capsule of a hal tensor (kDLCPU when its memory is host-accessible)");

  register_distributed(m);
}
