#include "coverage.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>
#include <unordered_set>

#include "api_model.hpp"

namespace halconform::model {

std::string enum_label(std::string_view type_name, int64_t value) {
  const EnumType* type = find_enum(type_name);
  const char* name = type != nullptr ? enum_name(*type, value) : nullptr;
  if (name != nullptr) return name;
  return std::to_string(value) + " (not a " + std::string(type_name) + ")";
}

}  // namespace halconform::model

namespace halconform::coverage {

// conformance/coverage_waivers.txt, embedded by conformance/CMakeLists.txt.
extern const std::string_view kCoverageWaivers;

std::atomic<bool> g_recording{false};

namespace {

std::mutex g_mutex;
std::unordered_set<std::string> g_seen;

bool all_zero(const void* bytes, size_t size) {
  const auto* p = static_cast<const uint8_t*>(bytes);
  for (size_t i = 0; i < size; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

int64_t read_signed(const void* bytes, size_t size) {
  switch (size) {
    case 1:
      return *static_cast<const int8_t*>(bytes);
    case 2: {
      int16_t v;
      std::memcpy(&v, bytes, 2);
      return v;
    }
    case 4: {
      int32_t v;
      std::memcpy(&v, bytes, 4);
      return v;
    }
    default: {
      int64_t v;
      std::memcpy(&v, bytes, 8);
      return v;
    }
  }
}

void record_fields(const model::StructType& type, const void* value, size_t readable,
                   bool field_paths) {
  const auto* base = static_cast<const uint8_t*>(value);
  for (const model::Field& field : type.fields) {
    if (field.offset + field.size > readable) continue;  // past the caller's struct_size
    const bool header = field.type != nullptr && std::strcmp(field.type, "hal_op_header_t") == 0;
    const uint8_t* at = base + field.offset;
    switch (field.kind) {
      case model::FieldKind::kEnum:
        record_enum(field.type, read_signed(at, field.size));
        continue;
      case model::FieldKind::kFlags:
        record_flags(field.type, static_cast<uint64_t>(read_signed(at, field.size)) & 0xffffffffu);
        continue;
      case model::FieldKind::kStruct:
        if (const model::StructType* nested = model::find_struct(field.type)) {
          record_fields(*nested, at, field.size, false);
        }
        break;
      default:
        break;
    }
    if (field_paths && !header && !model::is_bookkeeping_field(field.name)) {
      const bool zero = all_zero(at, field.size);
      // An array (a grid's dimensions) is never absent: only "set" is a path.
      if (!(zero && field.kind == model::FieldKind::kArray)) {
        record(std::string("field:") + type.name + "." + field.name + (zero ? ":zero" : ":set"));
      }
    }
  }
}

}  // namespace

void begin_test() {
  std::lock_guard lock(g_mutex);
  g_seen.clear();
  g_recording.store(true);
}

std::vector<std::string> end_test() {
  g_recording.store(false);
  std::lock_guard lock(g_mutex);
  std::vector<std::string> out(g_seen.begin(), g_seen.end());
  g_seen.clear();
  std::sort(out.begin(), out.end());
  return out;
}

void record(std::string_view path) {
  if (!recording()) return;
  std::lock_guard lock(g_mutex);
  g_seen.emplace(path);
}

void record_result(const char* function, hal_result_t result) {
  record(std::string("result:") + function + ":" + hal_result_string(result));
}

void record_call(const char* function) {
  record(std::string("call:") + function);
}

void record_enum(const char* type, int64_t value) {
  const model::EnumType* e = model::find_enum(type);
  if (e == nullptr) return;
  const char* name = model::enum_name(*e, value);
  record(std::string("value:") + type + ":" + (name != nullptr ? name : "invalid"));
}

void record_flags(const char* bits_type, uint64_t flags) {
  const model::EnumType* e = model::find_enum(bits_type);
  if (e == nullptr) return;
  uint64_t known = 0;
  bool named_zero = false;
  for (const model::EnumValue& v : e->values) {
    if (v.value == 0) {
      named_zero = true;
      if (flags == 0) record(std::string("flags:") + bits_type + ":" + v.name);
      continue;
    }
    known |= static_cast<uint64_t>(v.value);
    if ((flags & static_cast<uint64_t>(v.value)) == static_cast<uint64_t>(v.value)) {
      record(std::string("flags:") + bits_type + ":" + v.name);
    }
  }
  if (flags == 0 && !named_zero) record(std::string("flags:") + bits_type + ":none");
  if ((flags & ~known) != 0) record(std::string("flags:") + bits_type + ":unknown");
}

void record_struct(const char* type, const void* value) {
  const model::StructType* s = model::find_struct(type);
  if (s == nullptr || value == nullptr) return;
  size_t readable = s->size;
  if (!s->fields.empty() && std::strcmp(s->fields.front().name, "struct_size") == 0) {
    size_t declared = 0;
    std::memcpy(&declared, value, sizeof(declared));
    readable = std::min(readable, declared);
  }
  record_fields(*s, value, readable, true);
}

void record_op_descriptor(const hal_op_header_t* descriptor) {
  if (descriptor == nullptr) return;
  record_enum("hal_op_kind_t", descriptor->kind);
  for (const model::OpDescriptor& op : model::op_descriptors()) {
    if (op.kind == descriptor->kind) {
      record_struct(op.descriptor, descriptor);
      return;
    }
  }
}

std::string memory_kind_short(hal_memory_kind_t kind) {
  const model::EnumType* e = model::find_enum("hal_memory_kind_t");
  const char* name = e != nullptr ? model::enum_name(*e, kind) : nullptr;
  if (name == nullptr) return "unknown";
  const std::string full = name;
  return full.rfind("HAL_MEMORY_", 0) == 0 ? full.substr(11) : full;
}

std::vector<Waiver> waivers() {
  std::vector<Waiver> out;
  size_t start = 0;
  while (start < kCoverageWaivers.size()) {
    size_t end = kCoverageWaivers.find('\n', start);
    if (end == std::string_view::npos) end = kCoverageWaivers.size();
    const std::string line(kCoverageWaivers.substr(start, end - start));
    start = end + 1;
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    const size_t gap = line.find_first_of(" \t", first);
    if (gap == std::string::npos) continue;  // a waiver without a reason is no waiver
    const size_t reason = line.find_first_not_of(" \t", gap);
    if (reason == std::string::npos) continue;
    out.push_back({line.substr(first, gap - first), line.substr(reason)});
  }
  return out;
}

const char* path_status_name(PathStatus status) {
  switch (status) {
    case PathStatus::kCovered:
      return "covered";
    case PathStatus::kUncovered:
      return "uncovered";
    case PathStatus::kWaived:
      return "waived";
    case PathStatus::kNotApplicable:
      return "not_applicable";
  }
  return "uncovered";
}

DeviceCoverage evaluate(const hal_device_properties_t& properties, uint32_t plugin_devices,
                        const std::map<std::string, std::vector<std::string>>& recorded) {
  std::map<std::string, std::vector<std::string>> tests_of;  // path -> tests
  for (const auto& [test, paths] : recorded) {
    for (const std::string& path : paths) tests_of[path].push_back(test);
  }
  const std::vector<Waiver> waived = waivers();
  DeviceCoverage out;
  std::set<std::string> listed;
  for (const Path& path : paths_for(properties, plugin_devices)) {
    if (!listed.insert(path.name).second) continue;
    PathResult result{path.name, path.source, PathStatus::kUncovered, {}, {}};
    if (auto found = tests_of.find(path.name); found != tests_of.end()) {
      result.status = PathStatus::kCovered;
      result.tests = found->second;
    } else if (!path.applies.empty()) {
      result.status = PathStatus::kNotApplicable;
      result.reason = path.applies;
    } else {
      for (const Waiver& waiver : waived) {
        if (fnmatch(waiver.glob.c_str(), path.name.c_str(), 0) == 0) {
          result.status = PathStatus::kWaived;
          result.reason = waiver.reason;
          break;
        }
      }
    }
    switch (result.status) {
      case PathStatus::kCovered:
        ++out.covered;
        break;
      case PathStatus::kUncovered:
        ++out.uncovered;
        break;
      case PathStatus::kWaived:
        ++out.waived;
        break;
      case PathStatus::kNotApplicable:
        ++out.not_applicable;
        break;
    }
    out.paths.push_back(std::move(result));
  }
  for (const auto& [path, tests] : tests_of) {
    // Results and values outside the documented lists are not paths the
    // headers define (an undocumented result is the plugin's defect, checked
    // by the tests themselves).
    if (listed.count(path) == 0 && !path.starts_with("result:") && !path.starts_with("value:")) {
      out.unlisted.push_back(path);
    }
  }
  return out;
}

}  // namespace halconform::coverage
