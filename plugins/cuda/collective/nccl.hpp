// NCCL as the cuda plugin uses it: libnccl.so.2 opened at run time with dlopen
// (HAL_CUDA_NCCL_PATH, else the soname), never linked, so the plugin loads
// where NCCL is missing and then leaves collectives to the loader. The plugin
// needs NCCL 2.14 or later: communicators are made non-blocking
// (ncclConfig_t.blocking = 0), so that HAL's deadlines and aborts hold.
#ifndef HAL_PLUGINS_CUDA_COLLECTIVE_NCCL_HPP_
#define HAL_PLUGINS_CUDA_COLLECTIVE_NCCL_HPP_

#include <nccl.h>

#include <memory>
#include <optional>
#include <string>

#include "hal_plugin.h"
#include "hal_plugin_sdk/vendor_library.hpp"

namespace hal::cuda::collective {

// One pointer per NCCL function the plugin calls, typed by the header's
// declaration (the library exports these names unversioned).
struct NcclApi {
// clang-format off
#define HAL_NCCL_FUNCTIONS(X) \
  X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommFinalize) \
  X(ncclCommDestroy) X(ncclCommAbort) X(ncclCommGetAsyncError) X(ncclGroupStart) \
  X(ncclGroupEnd) X(ncclAllReduce) X(ncclBroadcast) X(ncclReduce) X(ncclAllGather) \
  X(ncclReduceScatter) X(ncclSend) X(ncclRecv)
// clang-format on
#define HAL_NCCL_DECLARE(name) decltype(&::name) name = nullptr;
  HAL_NCCL_FUNCTIONS(HAL_NCCL_DECLARE)
#undef HAL_NCCL_DECLARE
};

// The opened library, kept for the process (NCCL keeps threads and CUDA
// state that are not built to be unloaded).
class Nccl {
 public:
  // Opens HAL_CUDA_NCCL_PATH or libnccl.so.2. Null, with |why|
  // ("libnccl.so.2 not found: <dlerror>"), when absent, incomplete or older
  // than 2.14.
  static std::unique_ptr<const Nccl> open(std::string& why);

  const NcclApi& api() const { return api_; }
  const std::string& path() const { return library_.path(); }
  int version() const { return version_; }  // ncclGetVersion, e.g. 22809

 private:
  Nccl() = default;
  hal::plugin::VendorLibrary library_;  // pinned once accepted
  int version_ = 0;
  NcclApi api_;
};

// "ncclSystemError (2)": the plugin's own names (ncclGetErrorString gives a
// sentence, not the name).
std::string nccl_error_text(ncclResult_t code);

// The HAL result of a failed NCCL call.
hal_result_t result_of(ncclResult_t code);

// NCCL's type for a HAL dtype; nullopt for a dtype this NCCL cannot reduce
// (bf16 before NCCL 2.10) or one HAL added later. |why| says which.
std::optional<ncclDataType_t> nccl_dtype(hal_dtype_t dtype, int nccl_version, std::string& why);
// NCCL's reduction for a HAL one; nullopt (with |why|) where NCCL has none.
std::optional<ncclRedOp_t> nccl_op(hal_reduce_op_t op, int nccl_version, std::string& why);

}  // namespace hal::cuda::collective

#endif  // HAL_PLUGINS_CUDA_COLLECTIVE_NCCL_HPP_
