#include "nccl.hpp"

#include <string>

#include "../library_search.hpp"
#include "hal_util/names.hpp"

namespace hal::cuda::collective {
namespace {

constexpr char kDefaultLibrary[] = "libnccl.so.2";
// ncclCommInitRankConfig, ncclConfig_t.blocking and ncclCommFinalize.
constexpr int kMinimumVersion = 21400;
// ncclBfloat16 and ncclAvg.
constexpr int kBfloat16AvgVersion = 21000;

const char* known_name(ncclResult_t code) {
  switch (code) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "NCCL error";
  }
}

// NCCL's version code: 2.8.4 is 2804, 2.28.9 is 22809.
std::string version_text(int code) {
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

}  // namespace

std::unique_ptr<const Nccl> Nccl::open(std::string& why) {
  std::unique_ptr<Nccl> nccl(new Nccl());
  if (!open_first_candidate(nccl->library_, "HAL_CUDA_NCCL_PATH", {kDefaultLibrary}, why)) {
    return nullptr;
  }
  const std::string path = nccl->library_.path();
  NcclApi& api = nccl->api_;
  std::string missing;
#define HAL_NCCL_RESOLVE(name)                                                   \
  api.name = reinterpret_cast<decltype(api.name)>(nccl->library_.symbol(#name)); \
  if (api.name == nullptr && missing.empty()) missing = #name;
  HAL_NCCL_FUNCTIONS(HAL_NCCL_RESOLVE)
#undef HAL_NCCL_RESOLVE
  if (!missing.empty()) {
    why = path + " has no " + missing + ": not an NCCL of version 2.14 or later";
    return nullptr;  // closed again: nothing of it was used
  }
  if (api.ncclGetVersion(&nccl->version_) != ncclSuccess || nccl->version_ < kMinimumVersion) {
    why = path + " is NCCL " + version_text(nccl->version_) +
          "; the plugin needs 2.14 or later (non-blocking communicators)";
    return nullptr;
  }
  nccl->library_.pin();
  return nccl;
}

std::string nccl_error_text(ncclResult_t code) {
  return std::string(known_name(code)) + " (" + std::to_string(static_cast<int>(code)) + ")";
}

hal_result_t result_of(ncclResult_t code) {
  switch (code) {
    case ncclSuccess:
      return HAL_SUCCESS;
    case ncclInvalidArgument:
      return HAL_ERROR_INVALID_ARGUMENT;
    case ncclInvalidUsage:
      return HAL_ERROR_INVALID_STATE;
    case ncclRemoteError:
      return HAL_ERROR_REMOTE;
    case ncclUnhandledCudaError:
      return HAL_ERROR_DEVICE_LOST;
    default:
      return HAL_ERROR_INTERNAL;
  }
}

std::optional<ncclDataType_t> nccl_dtype(hal_dtype_t dtype, int nccl_version, std::string& why) {
  switch (dtype) {
    case HAL_DTYPE_F32:
      return ncclFloat32;
    case HAL_DTYPE_F16:
      return ncclFloat16;
    case HAL_DTYPE_F64:
      return ncclFloat64;
    case HAL_DTYPE_I32:
      return ncclInt32;
    case HAL_DTYPE_I64:
      return ncclInt64;
    case HAL_DTYPE_I8:
      return ncclInt8;
    case HAL_DTYPE_U8:
      return ncclUint8;
    case HAL_DTYPE_BF16:
      if (nccl_version >= kBfloat16AvgVersion) return ncclBfloat16;
      why = "NCCL " + version_text(nccl_version) + " has no bf16 (2.10 added it)";
      return std::nullopt;
    default:
      why = std::string("NCCL has no type for dtype ") + hal::util::dtype_name(dtype);
      return std::nullopt;
  }
}

std::optional<ncclRedOp_t> nccl_op(hal_reduce_op_t op, int nccl_version, std::string& why) {
  switch (op) {
    case HAL_REDUCE_SUM:
      return ncclSum;
    case HAL_REDUCE_PROD:
      return ncclProd;
    case HAL_REDUCE_MIN:
      return ncclMin;
    case HAL_REDUCE_MAX:
      return ncclMax;
    case HAL_REDUCE_AVG:
      if (nccl_version >= kBfloat16AvgVersion) return ncclAvg;
      why = "NCCL " + version_text(nccl_version) + " has no ncclAvg (2.10 added it)";
      return std::nullopt;
    default:
      why = "NCCL has no reduction for op " + std::to_string(static_cast<int>(op));
      return std::nullopt;
  }
}

}  // namespace hal::cuda::collective
