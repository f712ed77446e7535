// kernel_get's signature rules for a plugin whose modules come as binaries
// that carry no argument types (PTX, cubin, AMD GPU code objects) or as HAL
// dialect source that declares them: which signature a kernel is bound to,
// the check of a declared signature against the argument sizes the vendor
// reports, and the hal_kernel_info_t the loader reads back. Written once, so
// the GPU plugins cannot drift apart in what they accept.
#ifndef HAL_PLUGIN_SDK_KERNEL_SIGNATURE_HPP_
#define HAL_PLUGIN_SDK_KERNEL_SIGNATURE_HPP_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hal_plugin.h"
#include "hal_plugin_sdk/report.hpp"
#include "hal_plugin_sdk/signature.hpp"
#include "hal_plugin_sdk/versioned_struct.hpp"

namespace hal::plugin {

// The signature |desc|'s kernel is bound to, in |out_types|. A module
// compiled from HAL dialect source (|dialect| not null) declares it: the
// record of the kernel's entry is |out_record|, and an entry it lacks is
// HAL_ERROR_NOT_FOUND naming the kernels it has (the loader compares a
// signature the caller declares with the one reported in out_info).
// Otherwise the caller's arg_types, and without them
// HAL_ERROR_ARGUMENT_MISMATCH: "'<name>' has no signature: <why_none>".
// |Dialect| has find(name) -> const Record* and kernels, records with
// .entry and .arg_types (hal_dialect's TranslatedModule).
template <class Dialect, class Record>
hal_result_t resolve_kernel_signature(const ErrorReporter& report, const Dialect* dialect,
                                      const hal_kernel_desc_t& desc, std::string_view why_none,
                                      const Record*& out_record,
                                      std::vector<hal_arg_type_t>& out_types) {
  out_record = nullptr;
  out_types.clear();
  const std::string name = desc.name;
  if (dialect != nullptr) {
    out_record = dialect->find(name);
    if (out_record == nullptr) {
      std::string known;
      for (const auto& kernel : dialect->kernels) {
        known += (known.empty() ? "" : ", ") + kernel.entry;
      }
      return report.fail(HAL_ERROR_NOT_FOUND, 0,
                         "kernel_get: the module has no kernel '%s' (its kernels: %s)",
                         name.c_str(), known.c_str());
    }
    out_types = out_record->arg_types;
    return HAL_SUCCESS;
  }
  if (desc.arg_types == nullptr) {
    return report.fail(HAL_ERROR_ARGUMENT_MISMATCH, 0, "kernel_get: '%s' has no signature: %.*s",
                       name.c_str(), static_cast<int>(why_none.size()), why_none.data());
  }
  out_types.assign(desc.arg_types, desc.arg_types + desc.arg_count);
  return HAL_SUCCESS;
}

// How a vendor names what it reports argument sizes of, for the messages of
// signature_size_disagreement: "the entry takes 5 parameters", "parameter 1
// of the entry is 4 bytes".
struct ArgumentWording {
  std::string_view kernel;    // "the entry", "the code object's kernel"
  std::string_view argument;  // "parameter", "argument"
  std::string_view owner;     // "the entry", "the kernel": whose argument i is
};

// Checks the declared |types| against the argument |sizes| the vendor
// reports for the kernel: a wrong declared signature would be undefined
// behaviour on the device. Empty when they agree, else the disagreement.
inline std::string signature_size_disagreement(const std::vector<size_t>& sizes,
                                               const std::vector<hal_arg_type_t>& types,
                                               const ArgumentWording& wording) {
  // Appended piece by piece: GCC 12 warns (-Wrestrict) on "text" + std::string&&.
  std::string entry_sizes;
  for (size_t size : sizes) {
    if (!entry_sizes.empty()) entry_sizes += ',';
    entry_sizes += std::to_string(size);
  }
  const std::string declared = format_signature(types.data(), types.size());
  std::string why;
  if (sizes.size() != types.size()) {
    why.append(wording.kernel).append(" takes ").append(std::to_string(sizes.size()));
    why.append(" ").append(wording.argument).append("s (bytes: ").append(entry_sizes);
    why.append("), the declared signature \"").append(declared).append("\" has ");
    why.append(std::to_string(types.size()));
    return why;
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] != arg_type_size(types[i])) {
      why.append(wording.argument).append(" ").append(std::to_string(i)).append(" of ");
      why.append(wording.owner).append(" is ").append(std::to_string(sizes[i]));
      why.append(" bytes, the declared signature \"").append(declared).append("\" makes it ");
      why.append(arg_type_name(types[i])).append(" (");
      why.append(std::to_string(arg_type_size(types[i]))).append(" bytes)");
      return why;
    }
  }
  return {};
}

// What kernel_get reports of a kernel (hal_kernel_info_t): a plugin's Kernel
// derives from it, and its launches read the signature back.
class KernelInfo {
 public:
  KernelInfo(std::string name, std::vector<hal_arg_type_t> arg_types,
             uint32_t max_threads_per_block, uint32_t static_shared_bytes)
      : name_(std::move(name)),
        arg_types_(std::move(arg_types)),
        max_threads_(max_threads_per_block),
        static_shared_bytes_(static_shared_bytes) {}

  const std::string& name() const { return name_; }
  const std::vector<hal_arg_type_t>& arg_types() const { return arg_types_; }
  uint32_t max_threads() const { return max_threads_; }
  uint32_t static_shared_bytes() const { return static_shared_bytes_; }
  // kernel_get's |out_info| (write_kernel_info, below).
  void write_info(hal_kernel_info_t* out_info) const;

 protected:
  // For a kernel whose limits are known only once it is made.
  void set_limits(uint32_t max_threads_per_block, uint32_t static_shared_bytes) {
    max_threads_ = max_threads_per_block;
    static_shared_bytes_ = static_shared_bytes;
  }

 private:
  std::string name_;
  std::vector<hal_arg_type_t> arg_types_;
  uint32_t max_threads_;
  uint32_t static_shared_bytes_;
};

// Writes what kernel_get found into |out_info| (when not null), in the
// layout the caller's struct_size allows. info.name points into |name|:
// pass the kernel's own copy, which lives as long as the kernel.
inline void write_kernel_info(const std::string& name, const std::vector<hal_arg_type_t>& types,
                              uint32_t max_threads_per_block, uint32_t static_shared_bytes,
                              hal_kernel_info_t* out_info) {
  if (out_info == nullptr) return;
  hal_kernel_info_t info{};
  info.name = name.c_str();
  info.arg_count = static_cast<uint32_t>(types.size());
  for (uint32_t i = 0; i < info.arg_count; ++i) info.arg_types[i] = types[i];
  info.max_threads_per_block = max_threads_per_block;
  info.static_shared_memory_bytes = static_shared_bytes;
  write_versioned_struct(info, out_info);
}

inline void KernelInfo::write_info(hal_kernel_info_t* out_info) const {
  write_kernel_info(name_, arg_types_, max_threads_, static_shared_bytes_, out_info);
}

}  // namespace hal::plugin

#endif  // HAL_PLUGIN_SDK_KERNEL_SIGNATURE_HPP_
