// halinfo: prints the libhal version, every plugin candidate the loader
// considered (with the reason it was skipped), and every device with its
// properties and capabilities, as text or as one JSON object (--json);
// with --ops, each device's operator implementation lists and what each
// implementation says of a few cases (hal_op_query_implementations).
#include <hal.h>

#include "hal_util/names.hpp"
#include "op_cases.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

using hal::util::device_type_name;
using hal::util::Spelling;

const char* outcome_name(hal_plugin_outcome_t outcome) {
  return hal::util::plugin_outcome_name(outcome);
}

const char* outcome_enum_name(hal_plugin_outcome_t outcome) {
  return hal::util::enumerator_name(hal::util::plugin_outcome_table(),
                                    static_cast<uint32_t>(outcome));
}

// "kernels event_timing" as a list; "none" is the empty list.
std::vector<std::string> split_names(const std::string& joined) {
  std::vector<std::string> names;
  if (joined == "none") return names;
  for (size_t start = 0; start <= joined.size();) {
    const size_t space = std::min(joined.find(' ', start), joined.size());
    names.push_back(joined.substr(start, space - start));
    start = space + 1;
  }
  return names;
}

// The names of the set bits, from hal_util's one table per enum (the short
// name for text, the enumerator for JSON: SPEC §12); a bit no table names
// shows as its number rather than vanishing.
std::vector<std::string> capability_list(hal_device_caps_t capabilities, Spelling spelling) {
  return split_names(hal::util::capability_names(capabilities, spelling, " "));
}

std::vector<std::string> module_format_list(uint32_t formats, Spelling spelling) {
  return split_names(hal::util::module_format_names(formats, spelling, " "));
}

std::string version_string(uint32_t version) {
  return std::to_string(HAL_VERSION_MAJOR(version)) + "." +
         std::to_string(HAL_VERSION_MINOR(version)) + "." +
         std::to_string(HAL_VERSION_PATCH(version));
}

std::string uuid_string(const uint8_t (&uuid)[16]) {
  std::string text;
  char byte[3];
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    std::snprintf(byte, sizeof(byte), "%02x", uuid[i]);
    text += byte;
  }
  return text;
}

std::string json_string(std::string_view text) {
  std::string quoted = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        quoted += "\\\"";
        break;
      case '\\':
        quoted += "\\\\";
        break;
      case '\n':
        quoted += "\\n";
        break;
      case '\r':
        quoted += "\\r";
        break;
      case '\t':
        quoted += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
          quoted += escaped;
        } else {
          quoted += c;
        }
    }
  }
  return quoted + "\"";
}

std::string json_list(const std::vector<std::string>& names) {
  std::string list = "[";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) list += ',';
    list += json_string(names[i]);
  }
  return list + "]";
}

std::string text_list(const std::vector<std::string>& names) {
  if (names.empty()) return "(none)";
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) list += std::string(i ? " " : "") + names[i];
  return list;
}

std::string dims(const uint32_t (&values)[3]) {
  return std::to_string(values[0]) + " x " + std::to_string(values[1]) + " x " +
         std::to_string(values[2]);
}

std::string json_dims(const uint32_t (&values)[3]) {
  // Appending, not "[" + std::string: GCC 12 -O3 raises a false -Wrestrict on the latter.
  std::string list = "[";
  for (int d = 0; d < 3; ++d) {
    if (d) list += ',';
    list += std::to_string(values[d]);
  }
  return list + "]";
}

// What one query said: the implementations in order, or why it failed.
struct OpQuery {
  std::string label;  // the case's; empty for the kind's list without a descriptor
  std::vector<hal_op_candidate_t> candidates;
  std::string error;  // the query failed (a case the loader refused): its message
};

// One op kind on one device: its list, then each case.
struct OpKindReport {
  hal_op_kind_t kind;
  OpQuery list;
  std::vector<OpQuery> cases;
};

struct Inventory {
  std::vector<hal_plugin_report_t> reports;
  std::vector<hal_device_properties_t> devices;
  std::vector<std::vector<OpKindReport>> operators;  // per device, with --ops
};

OpQuery query(hal_device_t device, hal_op_kind_t kind, const halinfo::OpCase* op_case) {
  OpQuery result;
  if (op_case != nullptr) result.label = op_case->label;
  hal_op_implementations_info_t info{};
  info.struct_size = sizeof(info);
  if (hal_op_query_implementations(device, kind, op_case ? op_case->header() : nullptr, 0, &info) !=
      HAL_SUCCESS) {
    result.error = hal_error_last_message();
    return result;
  }
  result.candidates.assign(info.candidates, info.candidates + info.count);
  return result;
}

// Every op kind of the headers (hal_util's table) the library knows (one it
// refuses, a library older than this halinfo, is left out), with its cases.
std::vector<OpKindReport> collect_operators(hal_device_t device) {
  std::vector<OpKindReport> kinds;
  for (const hal::util::EnumName& entry : hal::util::op_kind_table()) {
    const auto kind = static_cast<hal_op_kind_t>(entry.value);
    OpKindReport report{kind, query(device, kind, nullptr), {}};
    if (!report.list.error.empty()) continue;
    for (const halinfo::OpCase& op_case : halinfo::op_cases(kind)) {
      report.cases.push_back(query(device, kind, &op_case));
    }
    kinds.push_back(std::move(report));
  }
  return kinds;
}

bool collect(Inventory& inventory, bool operators) {
  uint32_t count = 0;
  if (hal_plugin_report_count(&count) != HAL_SUCCESS) return false;
  for (uint32_t i = 0; i < count; ++i) {
    hal_plugin_report_t report{};
    report.struct_size = sizeof(report);
    if (hal_plugin_report_get(i, &report) != HAL_SUCCESS) return false;
    inventory.reports.push_back(report);
  }
  if (hal_device_count(&count) != HAL_SUCCESS) return false;
  for (uint32_t i = 0; i < count; ++i) {
    hal_device_t device = nullptr;
    hal_device_properties_t properties{};
    properties.struct_size = sizeof(properties);
    if (hal_device_get(i, &device) != HAL_SUCCESS ||
        hal_device_get_properties(device, &properties) != HAL_SUCCESS) {
      return false;
    }
    inventory.devices.push_back(properties);
    if (operators) inventory.operators.push_back(collect_operators(device));
  }
  return true;
}

const char* verdict_name(hal_op_verdict_t verdict, Spelling spelling) {
  return spelling == Spelling::kShort
             ? hal::util::short_name(hal::util::op_verdict_table(), verdict)
             : hal::util::enumerator_name(hal::util::op_verdict_table(), verdict);
}

// One line per implementation: "name verdict[: reason]".
void print_candidates_text(const OpQuery& query, const char* indent) {
  if (!query.error.empty()) {
    std::printf("%srefused: %s\n", indent, query.error.c_str());
    return;
  }
  if (query.candidates.empty()) std::printf("%s(no implementation)\n", indent);
  for (const hal_op_candidate_t& c : query.candidates) {
    if (c.verdict == HAL_OP_VERDICT_DECLINES) {
      std::printf("%s%-14s declines: %s\n", indent, c.name, c.reason);
    } else {
      std::printf("%s%-14s %s\n", indent, c.name, verdict_name(c.verdict, Spelling::kShort));
    }
  }
}

void print_operators_text(const std::vector<OpKindReport>& kinds) {
  std::printf("    operators (each kind's implementations in the order tried):\n");
  for (const OpKindReport& kind : kinds) {
    std::string names;
    for (const hal_op_candidate_t& c : kind.list.candidates) {
      names += std::string(names.empty() ? "" : " > ") + c.name;
    }
    std::printf("      %-28s %s\n", hal::util::op_kind_name(kind.kind),
                names.empty() ? "(none)" : names.c_str());
    // A decline known before any descriptor (no implementation of its own).
    for (const hal_op_candidate_t& c : kind.list.candidates) {
      if (c.verdict == HAL_OP_VERDICT_DECLINES) {
        std::printf("        %s declines: %s\n", c.name, c.reason);
      }
    }
    for (const OpQuery& op_case : kind.cases) {
      std::printf("        %s:\n", op_case.label.c_str());
      print_candidates_text(op_case, "          ");
    }
  }
}

void print_text(const Inventory& inventory) {
  std::printf("libhal %s (ABI %s)\n\n", version_string(hal_get_version()).c_str(),
              version_string(HAL_ABI_VERSION).c_str());
  std::printf("Plugins considered: %zu\n", inventory.reports.size());
  for (const hal_plugin_report_t& report : inventory.reports) {
    std::printf("  %-16s %s\n", report.name, outcome_name(report.outcome));
    std::printf("    path:      %s\n", report.path);
    std::printf("    found by:  %s%s\n", report.found_by, report.requested ? " (requested)" : "");
    if (report.outcome == HAL_PLUGIN_LOADED) {
      std::printf("    version:   %s  vendor: %s  build: %s  ABI %s\n", report.version,
                  report.vendor, report.build_id, version_string(report.abi_version).c_str());
      std::printf("    devices:   %u\n", report.device_count);
      // A plugin that loads with no devices says why (its driver is absent).
      if (report.reason[0] != '\0') std::printf("    note:      %s\n", report.reason);
    } else {
      std::printf("    result:    %s\n", hal_result_string(report.result));
      std::printf("    reason:    %s\n", report.reason);
    }
  }
  std::printf("\nDevices: %zu\n", inventory.devices.size());
  for (const hal_device_properties_t& d : inventory.devices) {
    std::printf("  [%u] %s\n", d.index, d.name);
    std::printf("    plugin:              %s (device %u)\n", d.plugin, d.plugin_device_index);
    std::printf("    type:                %s\n", device_type_name(d.type));
    std::printf("    vendor:              %s\n", d.vendor);
    std::printf("    driver version:      %s\n", d.driver_version);
    std::printf("    uuid:                %s\n", uuid_string(d.uuid).c_str());
    std::printf("    compute units:       %u\n", d.compute_units);
    std::printf("    total memory:        %llu bytes\n",
                static_cast<unsigned long long>(d.total_memory_bytes));
    std::printf("    max allocation:      %llu bytes\n",
                static_cast<unsigned long long>(d.max_allocation_bytes));
    std::printf("    min alignment:       %llu bytes\n",
                static_cast<unsigned long long>(d.min_alignment_bytes));
    std::printf("    max threads/block:   %u\n", d.max_threads_per_block);
    std::printf("    max block dims:      %s\n", dims(d.max_block_dims).c_str());
    std::printf("    max grid dims:       %s\n", dims(d.max_grid_dims).c_str());
    std::printf("    max shared memory:   %u bytes\n", d.max_shared_memory_bytes);
    std::printf("    subgroup size:       %u\n", d.subgroup_size);
    std::printf("    peak fp32:           %.3g FLOP/s\n", d.peak_fp32_flops);
    std::printf("    peak bandwidth:      %.3g B/s\n", d.peak_memory_bandwidth);
    std::printf("    capabilities:        %s\n",
                text_list(capability_list(d.capabilities, Spelling::kShort)).c_str());
    std::printf("    module formats:      %s\n",
                text_list(module_format_list(d.module_formats, Spelling::kShort)).c_str());
    if (d.index < inventory.operators.size()) print_operators_text(inventory.operators[d.index]);
  }
}

std::string json_candidates(const OpQuery& query) {
  std::string out = "[";
  for (size_t i = 0; i < query.candidates.size(); ++i) {
    const hal_op_candidate_t& c = query.candidates[i];
    out += std::string(i ? "," : "") + "{\"name\":" + json_string(c.name) +
           ",\"verdict\":" + json_string(verdict_name(c.verdict, Spelling::kEnumerator)) +
           ",\"reason\":" + json_string(c.reason) + "}";
  }
  return out + "]";
}

// [{"kind": "convolution", "implementations": [...], "cases": [{"case": "...",
//   "implementations": [...], "error": null}]}]
std::string json_operators(const std::vector<OpKindReport>& kinds) {
  std::string out = "[";
  for (size_t k = 0; k < kinds.size(); ++k) {
    const OpKindReport& kind = kinds[k];
    out += std::string(k ? "," : "") +
           "{\"kind\":" + json_string(hal::util::op_kind_name(kind.kind)) +
           ",\"implementations\":" + json_candidates(kind.list) + ",\"cases\":[";
    for (size_t i = 0; i < kind.cases.size(); ++i) {
      const OpQuery& op_case = kind.cases[i];
      out += std::string(i ? "," : "") + "{\"case\":" + json_string(op_case.label) +
             ",\"implementations\":" + json_candidates(op_case) + ",\"error\":" +
             (op_case.error.empty() ? std::string("null") : json_string(op_case.error)) + "}";
    }
    out += "]}";
  }
  return out + "]";
}

// SPEC §12: one object; "error" is null on success, else hal_init's detail
// (and then "plugins" and "devices" are empty).
void print_json(const Inventory& inventory, const hal_error_detail_t* error) {
  std::string out = "{\"hal_version\":" + json_string(version_string(hal_get_version())) +
                    ",\"abi_version\":" + json_string(version_string(HAL_ABI_VERSION)) +
                    ",\"plugins\":[";
  for (size_t i = 0; i < inventory.reports.size(); ++i) {
    const hal_plugin_report_t& r = inventory.reports[i];
    out += std::string(i ? "," : "") + "{\"path\":" + json_string(r.path) +
           ",\"name\":" + json_string(r.name) + ",\"version\":" + json_string(r.version) +
           ",\"vendor\":" + json_string(r.vendor) + ",\"build_id\":" + json_string(r.build_id) +
           ",\"found_by\":" + json_string(r.found_by) +
           ",\"requested\":" + (r.requested ? "true" : "false") +
           ",\"outcome\":" + json_string(outcome_enum_name(r.outcome)) +
           ",\"result\":" + json_string(hal_result_string(r.result)) +
           ",\"reason\":" + json_string(r.reason) +
           ",\"abi_version\":" + json_string(version_string(r.abi_version)) +
           ",\"device_count\":" + std::to_string(r.device_count) + "}";
  }
  out += "],\"devices\":[";
  char number[64];
  const auto real = [&](double value) {
    std::snprintf(number, sizeof(number), "%.17g", value);
    // JSON has no inf or nan.
    return std::string(std::strpbrk(number, "in") != nullptr ? "null" : number);
  };
  for (size_t i = 0; i < inventory.devices.size(); ++i) {
    const hal_device_properties_t& d = inventory.devices[i];
    out +=
        std::string(i ? "," : "") + "{\"index\":" + std::to_string(d.index) +
        ",\"plugin\":" + json_string(d.plugin) +
        ",\"plugin_device_index\":" + std::to_string(d.plugin_device_index) +
        ",\"name\":" + json_string(d.name) + ",\"type\":" + json_string(device_type_name(d.type)) +
        ",\"vendor\":" + json_string(d.vendor) +
        ",\"driver_version\":" + json_string(d.driver_version) +
        ",\"uuid\":" + json_string(uuid_string(d.uuid)) +
        ",\"capabilities\":" + json_list(capability_list(d.capabilities, Spelling::kEnumerator)) +
        ",\"module_formats\":" +
        json_list(module_format_list(d.module_formats, Spelling::kEnumerator)) +
        ",\"compute_units\":" + std::to_string(d.compute_units) +
        ",\"total_memory_bytes\":" + std::to_string(d.total_memory_bytes) +
        ",\"max_allocation_bytes\":" + std::to_string(d.max_allocation_bytes) +
        ",\"min_alignment_bytes\":" + std::to_string(d.min_alignment_bytes) +
        ",\"max_threads_per_block\":" + std::to_string(d.max_threads_per_block) +
        ",\"max_block_dims\":" + json_dims(d.max_block_dims) +
        ",\"max_grid_dims\":" + json_dims(d.max_grid_dims) +
        ",\"max_shared_memory_bytes\":" + std::to_string(d.max_shared_memory_bytes) +
        ",\"subgroup_size\":" + std::to_string(d.subgroup_size) +
        ",\"peak_fp32_flops\":" + real(d.peak_fp32_flops) +
        ",\"peak_memory_bandwidth\":" + real(d.peak_memory_bandwidth);
    if (d.index < inventory.operators.size()) {
      out += ",\"operators\":" + json_operators(inventory.operators[d.index]);
    }
    out += "}";
  }
  out += "],\"error\":";
  if (error == nullptr) {
    out += "null";
  } else {
    out += "{\"result\":" + json_string(hal_result_string(error->result)) +
           ",\"function\":" + json_string(error->function != nullptr ? error->function : "") +
           ",\"plugin\":" + json_string(error->plugin != nullptr ? error->plugin : "") +
           ",\"message\":" + json_string(error->message != nullptr ? error->message : "") +
           ",\"native_code\":" + std::to_string(error->native_code) + "}";
  }
  out += "}\n";
  std::fputs(out.c_str(), stdout);
}

// The text form of a failure: the detail of the call that failed.
void print_error_text(const hal_error_detail_t& error) {
  std::fprintf(stderr,
               "halinfo: %s failed: %s\n  plugin:      %s\n  message:     %s\n"
               "  native code: %lld\n",
               error.function != nullptr ? error.function : "HAL", hal_result_string(error.result),
               error.plugin != nullptr ? error.plugin : "",
               error.message != nullptr ? error.message : "",
               static_cast<long long>(error.native_code));
}

void print_usage(const char* program) {
  std::printf(
      "Usage: %s [--json] [--ops] [--help]\n"
      "Lists the HAL plugins the loader considered (loaded or skipped, with the reason)\n"
      "and every device with its properties and capabilities.\n\n"
      "  --json   print one JSON object instead of text\n"
      "  --ops    also each device's operator implementations per op kind, in the order\n"
      "           tried, and what each says of a few cases (accepts, or declines and why)\n"
      "  --help   print this help\n\n"
      "Environment: HAL_PLUGINS (explicit list), HAL_PLUGIN_PATH (extra directories),\n"
      "HAL_LOG=1 (plugin diagnostics on stderr).\n",
      program);
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  bool operators = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "--ops") == 0) {
      operators = true;
    } else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      print_usage(argv[0]);
      return 0;
    } else {
      std::fprintf(stderr, "halinfo: unknown argument '%s'\n", argv[i]);
      print_usage(argv[0]);
      return 2;
    }
  }
  Inventory inventory;
  const bool initialised = hal_init(nullptr) == HAL_SUCCESS;
  const bool collected = initialised && collect(inventory, operators);
  if (!collected) {
    // The detail of what failed (hal_init's survives it), and no partial lists.
    hal_error_detail_t error{};
    error.struct_size = sizeof(error);
    hal_error_get_detail(&error);
    inventory = Inventory{};
    if (json) {
      print_json(inventory, &error);
    } else {
      print_error_text(error);
    }
  } else if (json) {
    print_json(inventory, nullptr);
  } else {
    print_text(inventory);
  }
  if (initialised) hal_shutdown();
  return collected ? 0 : 1;
}
