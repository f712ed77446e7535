// The loader's own implementations of the ops (the plugin's are reached
// through its table): an Implementation plans a descriptor or declines with
// a reason; a PlannedOp executes on a stream through the public API only.
#pragma once

#include "hal_ops/signature.hpp"

#include <hal.h>

#include <memory>
#include <span>
#include <string>

namespace hal::ops {

class DeviceState;

struct ExecContext {
  hal_stream_t stream = nullptr;
  void* const* operands = nullptr;  // checked against the signature by the loader
  const hal_op_scalar_t* scalars = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

class PlannedOp {
 public:
  virtual ~PlannedOp() = default;
  virtual size_t workspace_bytes() const { return 0; }
  // Enqueues the execution. On failure the public call that failed has set
  // the error detail; nothing may have been enqueued before a check fails.
  virtual hal_result_t execute(const ExecContext& context) const = 0;
};

struct PlanRequest {
  hal_device_t device = nullptr;
  const hal_device_properties_t* properties = nullptr;
  DeviceState* state = nullptr;  // per-device caches (compiled modules)
  const hal_op_header_t* desc = nullptr;
  const OpSignature* signature = nullptr;
  hal_op_plan_flags_t flags = 0;
};

class Implementation {
 public:
  virtual ~Implementation() = default;
  virtual const char* name() const = 0;
  // A planned op, or nullptr with |decline| saying why (dtype, layout, shape,
  // device). Throws only std::bad_alloc.
  virtual std::unique_ptr<PlannedOp> plan(const PlanRequest& request,
                                          std::string* decline) const = 0;
};

// The loader's implementations of |kind|, in the order they are tried (after
// the plugin's own).
std::span<const Implementation* const> implementations(hal_op_kind_t kind);

}  // namespace hal::ops
