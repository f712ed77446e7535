// hal/ops.h: operator plans. The loader checks each descriptor against its
// op's rules once (hal::ops::describe), walks the implementation list (the
// plugin's own, then the loader's portable ones) and checks every execution's
// operands against the plan's signature and the allocation table before any
// implementation sees them.
#include "api_common.hpp"
#include "buffers.hpp"
#include "fallbacks.hpp"
#include "hal_ops/abi_minor.hpp"
#include "hal_ops/tensor.hpp"
#include "hal_util/env.hpp"
#include "hal_util/names.hpp"
#include "layers/intercept.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

using namespace hal::loader;

namespace {

constexpr uint32_t kKnownPlanFlags = HAL_OP_PLAN_DETERMINISTIC;
constexpr uint32_t kMaxAdamwTensors = 4096;

bool ops_verbose() {
  static const bool verbose = [] {
    const char* value = hal::util::env("HAL_OPS_VERBOSE");
    return value != nullptr && value[0] != '\0' && value[0] != '0';
  }();
  return verbose;
}

// HAL_OPS_IMPLEMENTATIONS: a comma-separated list of implementation names
// (or their first component: "cpu" allows "cpu.onednn"); unset allows all.
// True when some token of the list passes |accepts|.
template <class Accepts>
bool some_allowed_token(Accepts accepts) {
  const char* value = hal::util::env("HAL_OPS_IMPLEMENTATIONS");
  if (value == nullptr || value[0] == '\0') return true;
  const std::string list = value;
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    const std::string token = list.substr(begin, end - begin);
    if (!token.empty() && accepts(token)) return true;
    begin = end + 1;
  }
  return false;
}

// Whether the list allows the implementation called |name|.
bool implementation_allowed(const std::string& name) {
  return some_allowed_token(
      [&](const std::string& token) { return name == token || name.rfind(token + ".", 0) == 0; });
}

std::string signature_text(const hal::ops::OpSignature& signature) {
  std::string text;
  for (const hal::ops::OperandSpec& operand : signature.operands) {
    if (!operand.used) continue;
    if (!text.empty()) text += ' ';
    text += operand.name;
    text += '=';
    text += hal::ops::describe_tensor(operand.tensor);
  }
  if (!signature.summary.empty()) text += " " + signature.summary;
  return text;
}

// The declines, one "name: reason" a line, as one line: "a: x; b: y".
std::string one_line(const std::string& declines) {
  std::string text;
  for (size_t begin = 0; begin < declines.size();) {
    size_t end = declines.find('\n', begin);
    if (end == std::string::npos) end = declines.size();
    if (!text.empty()) text += "; ";
    text.append(declines, begin, end - begin);
    begin = end + 1;
  }
  return text;
}

std::string verbose_text(const std::string& line) {
  return "hal_ops: " + line;
}

void verbose_line(const std::string& line) {
  std::fprintf(stderr, "%s\n", verbose_text(line).c_str());
}

// Copies the caller's descriptor (and AdamW's numels, CAT's inputs) into the plan, so the
// plan never reads the caller's memory again.
hal_result_t copy_descriptor(const hal_op_header_t* desc, size_t size, hal_op_plan_s* plan,
                             const char* function) {
  plan->desc.assign(reinterpret_cast<const unsigned char*>(desc),
                    reinterpret_cast<const unsigned char*>(desc) + size);
  auto* header = reinterpret_cast<hal_op_header_t*>(plan->desc.data());
  header->struct_size = size;
  header->next = nullptr;
  if (desc->kind == HAL_OP_ADAMW) {
    auto* adamw = reinterpret_cast<hal_op_adamw_desc_t*>(plan->desc.data());
    if (adamw->tensor_count == 0 || adamw->tensor_count > kMaxAdamwTensors) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                  "desc->tensor_count is %u; an AdamW plan takes 1..%u tensors",
                  adamw->tensor_count, kMaxAdamwTensors);
    }
    if (adamw->numels == nullptr) return null_argument(function, "desc->numels");
    plan->numels.assign(adamw->numels, adamw->numels + adamw->tensor_count);
    adamw->numels = plan->numels.data();
  }
  if (desc->kind == HAL_OP_CAT) {
    auto* cat = reinterpret_cast<hal_op_cat_desc_t*>(plan->desc.data());
    if (cat->input_count == 0 || cat->input_count > HAL_CAT_MAX_INPUTS) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                  "desc->input_count is %u; a CAT plan takes 1..%u inputs", cat->input_count,
                  static_cast<uint32_t>(HAL_CAT_MAX_INPUTS));
    }
    if (cat->inputs == nullptr) return null_argument(function, "desc->inputs");
    plan->inputs.assign(cat->inputs, cat->inputs + cat->input_count);
    cat->inputs = plan->inputs.data();
  }
  return HAL_SUCCESS;
}

// One candidate of an op kind's implementation list, named before anything
// is planned, so HAL_OPS_IMPLEMENTATIONS filters it before any work.
struct Candidate {
  std::string name;
  const hal::ops::Implementation* portable = nullptr;  // nullptr: the plugin's own
  std::string declined_unasked;  // non-empty: declined before anything is asked, why
};

// The implementation list of |kind| on |device|, in the order it is tried:
// the plugin's own (named by its op_implementation entry, or by the plugin's
// name when it has none), then the loader's portable ones. A plugin whose
// op_implementation names none for |kind| is declined here, unasked; so is a
// plugin of an older ABI minor than |kind| or an operand's dtype (SPEC §2):
// it is never handed a value it cannot know. HAL_OPS_IMPLEMENTATIONS
// declines the candidates it excludes, unasked, too.
std::vector<Candidate> implementation_list(const hal_device_s* device, hal_op_kind_t kind,
                                           const hal::ops::OpSignature& signature) {
  std::vector<Candidate> list;
  const PluginRecord& plugin = *device->plugin;
  const hal_plugin_table_v1_t& table = plugin.table;
  if (table.op_plan_create != nullptr && table.op_plan_destroy != nullptr &&
      table.op_execute != nullptr) {
    if (std::string newer = hal::ops::newer_than_plugin(plugin.abi_version, kind, signature);
        !newer.empty()) {
      list.push_back({plugin.name, nullptr, newer});
    } else if (table.op_implementation == nullptr) {
      list.push_back({plugin.name, nullptr, {}});
    } else if (const char* name = table.op_implementation(device->impl, kind);
               name != nullptr && name[0] != '\0') {
      list.push_back({name, nullptr, {}});
    } else {
      list.push_back({plugin.name, nullptr,
                      std::string("the plugin has no implementation of its own for ") +
                          hal::util::op_kind_name(kind)});
    }
  }
  for (const hal::ops::Implementation* portable : hal::ops::implementations(kind)) {
    list.push_back({portable->name(), portable, {}});
  }
  for (Candidate& candidate : list) {
    if (candidate.declined_unasked.empty() && !implementation_allowed(candidate.name)) {
      candidate.declined_unasked = "excluded by HAL_OPS_IMPLEMENTATIONS";
    }
  }
  return list;
}

// Asks the plugin's own implementation, |name|. HAL_SUCCESS with the plan
// set, or HAL_ERROR_UNSUPPORTED with |decline| set, or another failure to
// return.
hal_result_t plan_with_plugin(hal_device_s* device, hal_op_plan_s* plan, const std::string& name,
                              std::string* decline, const char* function) {
  const PluginRecord& plugin = *device->plugin;
  hal_impl_op_plan_t* impl = nullptr;
  size_t workspace = 0;
  const char* planned_name = nullptr;
  const hal_result_t result = plugin.table.op_plan_create(
      device->impl, plan->header_of_desc(), plan->flags, &impl, &workspace, &planned_name);
  if (result == HAL_ERROR_UNSUPPORTED) {
    // The plugin's report is the decline's reason, not the thread's detail:
    // another candidate may still serve the plan (SPEC 4.2).
    *decline = take_plugin_message();
    if (decline->empty()) *decline = "the plugin declined without a detail";
    return result;
  }
  if (result != HAL_SUCCESS) return fail_from_plugin(result, function, plugin.name);
  plan->plugin_plan = impl;
  plan->workspace_bytes = workspace;
  // A plugin without op_implementation names its implementation only now.
  plan->implementation = plugin.table.op_implementation == nullptr && planned_name != nullptr &&
                                 planned_name[0] != '\0'
                             ? planned_name
                             : name;
  return HAL_SUCCESS;
}

// Asks the loader's portable implementation |portable|; as plan_with_plugin.
hal_result_t plan_portable(hal_device_s* device, hal_op_plan_s* plan,
                           const hal::ops::Implementation& portable, std::string* decline) {
  hal::ops::DeviceState* state = nullptr;
  {
    std::lock_guard lock(device->ops_mutex);
    if (!device->ops_state) device->ops_state = std::make_unique<hal::ops::DeviceState>(device);
    state = device->ops_state.get();
  }
  hal::ops::PlanRequest request;
  request.device = device;
  request.properties = &device->properties;
  request.state = state;
  request.desc = plan->header_of_desc();
  request.signature = &plan->signature;
  request.flags = plan->flags;
  std::unique_ptr<hal::ops::PlannedOp> loader_plan;
  {
    // A portable implementation plans with public calls (hal_module_load,
    // hal_kernel_get); one that fails is its decline, whose reason it
    // returns in |decline|, not the thread's detail: the public call may
    // still succeed through another candidate (SPEC 4.2).
    const KeepErrorDetail keep;
    loader_plan = portable.plan(request, decline);
  }
  if (!loader_plan) return HAL_ERROR_UNSUPPORTED;
  plan->workspace_bytes = loader_plan->workspace_bytes();
  plan->loader_plan = std::move(loader_plan);
  plan->implementation = portable.name();
  return HAL_SUCCESS;
}

// A plan of |desc| on |device|, checked against its op's rules, not yet
// served by any implementation; null after a failure (reported).
HandleOwner<hal_op_plan_s> described_plan(hal_device_t device, const hal_op_header_t* desc,
                                          hal_op_plan_flags_t flags, const char* function,
                                          hal_result_t* result) {
  *result = HAL_SUCCESS;
  if ((flags & ~kKnownPlanFlags) != 0) {
    *result = fail(HAL_ERROR_INVALID_ARGUMENT, function,
                   "flags 0x%x has bits no hal_op_plan_flag_bits_t defines", flags);
    return nullptr;
  }
  const size_t size = hal::ops::descriptor_size(desc->kind);
  if (size == 0) {
    *result = fail(HAL_ERROR_INVALID_ARGUMENT, function, "desc->kind %u is not a hal_op_kind_t",
                   static_cast<uint32_t>(desc->kind));
    return nullptr;
  }
  const char* op = hal::util::op_kind_name(desc->kind);
  if (desc->struct_size < size) {
    *result = fail(HAL_ERROR_INVALID_ARGUMENT, function,
                   "desc->struct_size is %zu, smaller than the %zu bytes of the %s descriptor",
                   desc->struct_size, size, op);
    return nullptr;
  }
  HandleOwner<hal_op_plan_s> plan = make_handle<hal_op_plan_s>(device->plugin, device);
  plan->flags = flags;
  if (*result = copy_descriptor(desc, size, plan.get(), function); *result != HAL_SUCCESS) {
    return nullptr;
  }
  std::string message;
  if (hal_result_t described =
          hal::ops::describe(plan->header_of_desc(), &plan->signature, &message);
      described != HAL_SUCCESS) {
    *result = fail(described, function, "%s: %s", op, message.c_str());
    return nullptr;
  }
  return plan;
}

// Asks |list|'s candidates in order until one accepts |plan|'s descriptor
// (HAL_SUCCESS, |plan| served by it); each one before it leaves its
// "name: reason" line in plan->declines. HAL_ERROR_UNSUPPORTED when none
// accepts; another failure as it is. The one walk of hal_op_plan_create and
// hal_op_query_implementations, so the two never differ.
hal_result_t walk_candidates(hal_device_s* device, hal_op_plan_s* plan,
                             const std::vector<Candidate>& list, size_t* accepted,
                             std::vector<std::string>* reasons, const char* function) {
  for (size_t i = 0; i < list.size(); ++i) {
    const Candidate& candidate = list[i];
    std::string reason = candidate.declined_unasked;
    if (reason.empty()) {
      const hal_result_t planned =
          candidate.portable != nullptr
              ? plan_portable(device, plan, *candidate.portable, &reason)
              : plan_with_plugin(device, plan, candidate.name, &reason, function);
      if (planned == HAL_SUCCESS) {
        *accepted = i;
        return HAL_SUCCESS;
      }
      if (planned != HAL_ERROR_UNSUPPORTED) return planned;
    }
    plan->declines += candidate.name + ": " + reason + "\n";
    if (reasons != nullptr) {
      reasons->resize(i + 1);
      (*reasons)[i] = std::move(reason);
    }
  }
  return HAL_ERROR_UNSUPPORTED;
}

hal_result_t plan_create_body(hal_device_t device, const hal_op_header_t* desc,
                              hal_op_plan_flags_t flags, hal_op_plan_t* out_plan) {
  constexpr const char* kFunction = "hal_op_plan_create";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t result =
            check_preconditions(kFunction, Live{device, "device"}, Required{desc, "desc"},
                                Required{out_plan, "out_plan"});
        result != HAL_SUCCESS) {
      return result;
    }
    hal_result_t described = HAL_SUCCESS;
    HandleOwner<hal_op_plan_s> plan = described_plan(device, desc, flags, kFunction, &described);
    if (!plan) return described;
    const char* op = hal::util::op_kind_name(desc->kind);

    size_t accepted = 0;
    const hal_result_t planned = walk_candidates(
        device, plan.get(), implementation_list(device, desc->kind, plan->signature), &accepted,
        nullptr, kFunction);
    if (planned != HAL_SUCCESS && planned != HAL_ERROR_UNSUPPORTED) return planned;
    // Once per plan: who served it and why each one before it declined.
    if (ops_verbose()) {
      verbose_line(std::string("plan ") + op + " " + signature_text(plan->signature) + " -> " +
                   (planned == HAL_SUCCESS ? plan->implementation : std::string("none")) +
                   (plan->declines.empty() ? "" : " (declined: " + one_line(plan->declines) + ")"));
    }
    if (planned != HAL_SUCCESS) {
      const std::string reasons = plan->declines.empty()
                                      ? "no implementation of this op is built for the device"
                                      : one_line(plan->declines);
      return fail(HAL_ERROR_UNSUPPORTED, kFunction,
                  "no implementation of %s on device %u (plugin '%s') accepts %s: %s", op,
                  device->properties.index, device->plugin->name.c_str(),
                  signature_text(plan->signature).c_str(), reasons.c_str());
    }
    *out_plan = device->op_plans.add(std::move(plan));
    return HAL_SUCCESS;
  });
}

// Copies |text| into |out| (|bytes| with the NUL), cut at a UTF-8 character's start.
void copy_cut(const std::string& text, char* out, size_t bytes) {
  size_t kept = std::min(text.size(), bytes - 1);
  while (kept > 0 && kept < text.size() &&
         (static_cast<unsigned char>(text[kept]) & 0xc0) == 0x80) {
    --kept;
  }
  std::memcpy(out, text.data(), kept);
  out[kept] = '\0';
}

hal_result_t query_implementations_body(hal_device_t device, hal_op_kind_t kind,
                                        const hal_op_header_t* desc, hal_op_plan_flags_t flags,
                                        hal_op_implementations_info_t* out_info) {
  constexpr const char* kFunction = "hal_op_query_implementations";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t result =
            check_preconditions(kFunction, Live{device, "device"}, Required{out_info, "out_info"});
        result != HAL_SUCCESS) {
      return result;
    }
    hal_result_t result = HAL_SUCCESS;
    if (struct_too_small(out_info, kFunction, "out_info", "hal_op_implementations_info_t",
                         result)) {
      return result;
    }
    if (hal::ops::descriptor_size(kind) == 0) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction, "kind %u is not a hal_op_kind_t",
                  static_cast<uint32_t>(kind));
    }
    if (desc != nullptr && desc->kind != kind) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                  "desc->kind is %u, not the kind asked about (%s)",
                  static_cast<uint32_t>(desc->kind), hal::util::op_kind_name(kind));
    }
    if (desc == nullptr && (flags & ~kKnownPlanFlags) != 0) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                  "flags 0x%x has bits no hal_op_plan_flag_bits_t defines", flags);
    }
    HandleOwner<hal_op_plan_s> plan;
    if (desc != nullptr) {
      plan = described_plan(device, desc, flags, kFunction, &result);
      if (!plan) return result;
    }
    const hal::ops::OpSignature no_operands;
    const std::vector<Candidate> list =
        implementation_list(device, kind, plan ? plan->signature : no_operands);
    size_t accepted = list.size();
    std::vector<std::string> reasons;  // of the candidates asked before |accepted|
    if (plan) {
      const hal_result_t walked =
          walk_candidates(device, plan.get(), list, &accepted, &reasons, kFunction);
      if (walked != HAL_SUCCESS && walked != HAL_ERROR_UNSUPPORTED) return walked;
    }
    hal_op_implementations_info_t info{};
    info.kind = kind;
    const size_t count = std::min<size_t>(list.size(), HAL_OP_MAX_CANDIDATES);
    info.count = static_cast<uint32_t>(count);
    for (size_t i = 0; i < count; ++i) {
      hal_op_candidate_t& entry = info.candidates[i];
      copy_cut(list[i].name, entry.name, sizeof(entry.name));
      if (plan && i < accepted) {
        entry.verdict = HAL_OP_VERDICT_DECLINES;
        copy_cut(i < reasons.size() ? reasons[i] : std::string(), entry.reason,
                 sizeof(entry.reason));
      } else if (plan && i == accepted) {
        entry.verdict = HAL_OP_VERDICT_ACCEPTS;
      } else if (!list[i].declined_unasked.empty()) {
        entry.verdict = HAL_OP_VERDICT_DECLINES;
        copy_cut(list[i].declined_unasked, entry.reason, sizeof(entry.reason));
      } else {
        entry.verdict = HAL_OP_VERDICT_NOT_ASKED;
      }
    }
    write_sized(info, out_info);
    return HAL_SUCCESS;
  });
}

hal_result_t plan_get_info_body(hal_op_plan_t plan, hal_op_plan_info_t* out_info) {
  constexpr const char* kFunction = "hal_op_plan_get_info";
  HandleUse<hal_op_plan_s> use;
  if (hal_result_t result =
          check_preconditions(kFunction, Held{plan, "plan", use}, Required{out_info, "out_info"});
      result != HAL_SUCCESS) {
    return result;
  }
  hal_result_t result = HAL_SUCCESS;
  if (struct_too_small(out_info, kFunction, "out_info", "hal_op_plan_info_t", result)) {
    return result;
  }
  hal_op_plan_info_t info{};
  info.kind = plan->header_of_desc()->kind;
  info.operand_count = static_cast<uint32_t>(plan->signature.operands.size());
  info.scalar_count = static_cast<uint32_t>(plan->signature.scalars.size());
  info.flags = plan->flags;
  info.workspace_bytes = plan->workspace_bytes;
  std::snprintf(info.implementation, sizeof(info.implementation), "%s",
                plan->implementation.c_str());
  // Whole lines only.
  size_t kept = 0;
  while (kept < plan->declines.size()) {
    const size_t end = plan->declines.find('\n', kept);
    const size_t next = end == std::string::npos ? plan->declines.size() : end + 1;
    if (next >= sizeof(info.declines)) break;
    kept = next;
  }
  std::memcpy(info.declines, plan->declines.data(), kept);
  info.declines[kept] = '\0';
  write_sized(info, out_info);
  return HAL_SUCCESS;
}

struct ByteRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;  // one past
  bool overlaps(const ByteRange& other) const { return begin < other.end && other.begin < end; }
};

// One operand (or the workspace) of an execution: inside one allocation of
// the plan's device, over the whole extent of its tensor.
hal_result_t check_in_allocation(const Registry& registry, const hal_op_plan_s* plan,
                                 const char* name, const void* pointer, uint64_t bytes,
                                 const char* function) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  const std::optional<Allocation> allocation = registry.allocations.find_containing(address);
  if (!allocation) {
    const std::string what = std::string("operand ") + name;
    if (hal_result_t freed = refuse_freed(registry, address, what.c_str(), function);
        freed != HAL_SUCCESS) {
      return freed;
    }
    return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                "operand %s (%p) is not inside a HAL allocation; operators take device memory",
                name, pointer);
  }
  if (allocation->device != plan->device) {
    return fail(HAL_ERROR_DEVICE_MISMATCH, function,
                "operand %s is memory of device %u, but the plan is for device %u", name,
                allocation->device->properties.index, plan->device->properties.index);
  }
  const uint64_t offset = address - allocation->base;
  if (bytes > allocation->size - offset) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                "operand %s reaches %llu bytes from offset %llu of a %zu-byte allocation: its "
                "tensor runs past the allocation's end",
                name, static_cast<unsigned long long>(bytes),
                static_cast<unsigned long long>(offset), allocation->size);
  }
  return HAL_SUCCESS;
}

hal_result_t check_exec_args(const Registry& registry, const hal_op_plan_s* plan,
                             const hal_op_exec_args_t* args, const char* function) {
  hal_result_t result = HAL_SUCCESS;
  if (struct_too_small(args, function, "args", "hal_op_exec_args_t", result)) return result;
  const hal::ops::OpSignature& signature = plan->signature;
  if (args->operand_count != signature.operands.size()) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                "args->operand_count is %u; a %s plan takes %zu operands", args->operand_count,
                hal::util::op_kind_name(plan->header_of_desc()->kind), signature.operands.size());
  }
  if (args->scalar_count != signature.scalars.size()) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                "args->scalar_count is %u; a %s plan takes %zu scalars", args->scalar_count,
                hal::util::op_kind_name(plan->header_of_desc()->kind), signature.scalars.size());
  }
  if (args->operand_count > 0 && args->operands == nullptr) {
    return null_argument(function, "args->operands");
  }
  if (args->scalar_count > 0 && args->scalars == nullptr) {
    return null_argument(function, "args->scalars");
  }
  std::vector<ByteRange> ranges(signature.operands.size());
  for (size_t i = 0; i < signature.operands.size(); ++i) {
    const hal::ops::OperandSpec& operand = signature.operands[i];
    void* pointer = args->operands[i];
    if (!operand.used) {
      if (pointer != nullptr) {
        return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                    "operand %zu (%s) is given, but the plan's descriptor does not use it: pass "
                    "NULL",
                    i, operand.name);
      }
      continue;
    }
    const uint64_t bytes = hal::ops::extent_bytes(operand.tensor);
    if (pointer == nullptr) {
      if (bytes == 0) continue;  // an empty tensor is never dereferenced
      return fail(HAL_ERROR_NULL_POINTER, function, "operand %zu (%s) is NULL", i, operand.name);
    }
    if (bytes == 0) continue;
    if (hal_result_t r =
            check_in_allocation(registry, plan, operand.name, pointer, bytes, function);
        r != HAL_SUCCESS) {
      return r;
    }
    ranges[i] = {reinterpret_cast<uintptr_t>(pointer),
                 reinterpret_cast<uintptr_t>(pointer) + bytes};
  }
  // Outputs overlap nothing else, except the one operand each may be exactly.
  for (size_t i = 0; i < signature.operands.size(); ++i) {
    const hal::ops::OperandSpec& operand = signature.operands[i];
    if (operand.role == hal::ops::Role::kInput || ranges[i].end == 0) continue;
    for (size_t j = 0; j < signature.operands.size(); ++j) {
      if (j == i || ranges[j].end == 0 || !ranges[i].overlaps(ranges[j])) continue;
      const hal::ops::OperandSpec& other = signature.operands[j];
      const bool exact_alias = operand.may_alias == static_cast<int>(j) &&
                               args->operands[i] == args->operands[j] &&
                               hal::ops::same_layout(operand.tensor, other.tensor);
      if (exact_alias) continue;
      return fail(HAL_ERROR_INVALID_ARGUMENT, function, "output %s overlaps operand %s%s",
                  operand.name, other.name,
                  operand.may_alias == static_cast<int>(j)
                      ? " without being exactly it (same pointer and layout)"
                      : ", which this op forbids");
    }
  }
  if (args->workspace_bytes < plan->workspace_bytes) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function,
                "args->workspace_bytes is %zu; the plan needs %zu", args->workspace_bytes,
                plan->workspace_bytes);
  }
  if (plan->workspace_bytes > 0) {
    if (args->workspace == nullptr) return null_argument(function, "args->workspace");
    if (hal_result_t r = check_in_allocation(registry, plan, "workspace", args->workspace,
                                             plan->workspace_bytes, function);
        r != HAL_SUCCESS) {
      return r;
    }
    const ByteRange workspace{reinterpret_cast<uintptr_t>(args->workspace),
                              reinterpret_cast<uintptr_t>(args->workspace) + plan->workspace_bytes};
    for (size_t i = 0; i < ranges.size(); ++i) {
      if (ranges[i].end != 0 && workspace.overlaps(ranges[i])) {
        return fail(HAL_ERROR_INVALID_ARGUMENT, function, "the workspace overlaps operand %s",
                    signature.operands[i].name);
      }
    }
  }
  if (signature.check_scalars) {
    const std::string problem = (*signature.check_scalars)(args->scalars);
    if (!problem.empty()) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, function, "%s", problem.c_str());
    }
  }
  return HAL_SUCCESS;
}

hal_result_t execute_body(hal_op_plan_t plan, const hal_op_exec_args_t* args, hal_stream_t stream) {
  constexpr const char* kFunction = "hal_op_execute";
  return guarded(kFunction, [&]() -> hal_result_t {
    HandleUse<hal_op_plan_s> plan_use;
    HandleUse<hal_stream_s> stream_use;
    Registry* registry = nullptr;
    if (hal_result_t result =
            check_preconditions_in(registry, kFunction, Held{plan, "plan", plan_use},
                                   Held{stream, "stream", stream_use}, Required{args, "args"});
        result != HAL_SUCCESS) {
      return result;
    }
    if (stream->device != plan->device) {
      return fail(HAL_ERROR_DEVICE_MISMATCH, kFunction,
                  "the stream is on device %u, the plan on device %u",
                  stream->device->properties.index, plan->device->properties.index);
    }
    if (hal_result_t result = check_exec_args(*registry, plan, args, kFunction);
        result != HAL_SUCCESS) {
      return result;
    }
    const bool verbose = ops_verbose();
    const char* op_name = hal::util::op_kind_name(plan->header_of_desc()->kind);
    // HAL_OPS_VERBOSE's line is printed by the span when the work has run,
    // with its time: the stream's order times it, nothing waits for it.
    const auto report = [&](layers::tracing::StreamOpSpan& span) {
      if (verbose) {
        span.report_when_finished(verbose_text(std::string("exec ") + op_name + " " +
                                               signature_text(plan->signature) + " -> " +
                                               plan->implementation));
      }
    };
    if (plan->plugin_plan != nullptr) {
      const PluginRecord& plugin = *plan->header.plugin;
      std::lock_guard lock(stream->enqueue_mutex);
      if (hal_result_t lost = refuse_lost_stream(stream, kFunction); lost != HAL_SUCCESS) {
        return lost;
      }
      layers::tracing::StreamOpSpan span(stream, op_name, 0, plan->implementation.c_str(), verbose);
      const hal_result_t result = plugin.table.op_execute(plan->plugin_plan, stream->impl, args);
      if (result != HAL_SUCCESS)
        return stream_entry_failed(stream, StreamEntry::kEnqueue, result, kFunction, plugin);
      report(span);
      return HAL_SUCCESS;
    }
    // The portable and reference implementations enqueue through the
    // loader's own entries, which take the enqueue lock per launch: the
    // span is not under it, so another thread's work enqueued on this
    // stream in between would count in this op's time.
    layers::tracing::StreamOpSpan span(stream, op_name, 0, plan->implementation.c_str(), verbose);
    hal::ops::ExecContext context;
    context.stream = stream;
    context.operands = args->operands;
    context.scalars = args->scalars;
    context.workspace = args->workspace;
    context.workspace_bytes = args->workspace_bytes;
    if (const hal_result_t result = plan->loader_plan->execute(context); result != HAL_SUCCESS) {
      const std::string cause = hal_error_last_message();
      return fail(result, kFunction, "the %s implementation failed: %s",
                  plan->implementation.c_str(), cause.c_str());
    }
    report(span);
    return HAL_SUCCESS;
  });
}

hal_result_t plan_destroy_body(hal_op_plan_t plan) {
  constexpr const char* kFunction = "hal_op_plan_destroy";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t result = check_preconditions(kFunction, Nullable{plan, "plan"});
        result != HAL_SUCCESS) {
      return result;
    }
    if (plan == nullptr) return HAL_SUCCESS;
    if (!begin_destroy(plan->header)) {
      return reject_destroying(plan, HandleKind::kOpPlan, kFunction, "plan");
    }
    // Executions already enqueued hold what they need: the loader's kernels
    // belong to the device's cache, the plugin keeps its plan's parts.
    HandleOwner<hal_op_plan_s> owned = plan->device->op_plans.take(plan);
    return HAL_SUCCESS;
  });
}

}  // namespace

hal_result_t hal_op_plan_create(hal_device_t device, const hal_op_header_t* desc,
                                hal_op_plan_flags_t flags, hal_op_plan_t* out_plan) {
  return layers::call<layers::OpPlanCreate, plan_create_body>(HAL_CALLER, device, desc, flags,
                                                              out_plan);
}

hal_result_t hal_op_query_implementations(hal_device_t device, hal_op_kind_t kind,
                                          const hal_op_header_t* desc, hal_op_plan_flags_t flags,
                                          hal_op_implementations_info_t* out_info) {
  return layers::call<layers::OpQueryImplementations, query_implementations_body>(
      HAL_CALLER, device, kind, desc, flags, out_info);
}

hal_result_t hal_op_plan_get_info(hal_op_plan_t plan, hal_op_plan_info_t* out_info) {
  return layers::call<layers::OpPlanGetInfo, plan_get_info_body>(HAL_CALLER, plan, out_info);
}

hal_result_t hal_op_execute(hal_op_plan_t plan, const hal_op_exec_args_t* args,
                            hal_stream_t stream) {
  return layers::call<layers::OpExecute, execute_body>(HAL_CALLER, plan, args, stream);
}

hal_result_t hal_op_plan_destroy(hal_op_plan_t plan) {
  return layers::call<layers::OpPlanDestroy, plan_destroy_body>(HAL_CALLER, plan);
}
