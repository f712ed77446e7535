// The cuda plugin's context (the driver, NVRTC, NCCL and the GPUs, found at
// load) and its devices' properties.
#include "device.hpp"

#include <algorithm>
#include <cstring>

#include "event.hpp"
#include "hal_plugin_sdk/versioned_struct.hpp"
#include "module.hpp"
#include "stream.hpp"

namespace hal::cuda {
Plugin::Plugin(const hal_plugin_host_t* host) : PluginBase(host) {
  std::string why;
  driver_ = Driver::open(why);
  if (!driver_) {
    report().log(HAL_LOG_WARNING, "cuda: %s; 0 devices", why.c_str());
    return;
  }
  const DriverApi& api = driver_->api();
  int count = 0;
  if (const CUresult result = api.cuDeviceGetCount(&count); result != CUDA_SUCCESS) {
    report().log(HAL_LOG_WARNING, "cuda: cuDeviceGetCount failed: %s; 0 devices",
                 cu_error_text(&api, result).c_str());
    return;
  }
  if (count == 0) {
    report().log(HAL_LOG_WARNING, "cuda: the driver (%s) sees no GPU; 0 devices",
                 driver_->path().c_str());
    return;
  }
  std::string nvrtc_why;
  nvrtc_ = Nvrtc::open(nvrtc_why);
  if (!nvrtc_) {
    report().log(HAL_LOG_INFO, "cuda: %s; HAL dialect modules are not offered", nvrtc_why.c_str());
  } else {
    report().log(HAL_LOG_INFO, "cuda: dialect modules through %s", nvrtc_->identity().c_str());
  }
  std::string nccl_why;
  nccl_ = collective::Nccl::open(nccl_why);
  if (!nccl_) {
    report().log(HAL_LOG_INFO, "cuda: %s; the loader's host-staged collectives serve",
                 nccl_why.c_str());
  } else {
    report().log(HAL_LOG_INFO, "cuda: collectives on NCCL %d from %s", nccl_->version(),
                 nccl_->path().c_str());
  }
  // The primary contexts are retained on each device's first use (Device::bind),
  // not here: a process that uses one GPU of eight pays for one context.
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice handle = 0;
    if (const CUresult result = api.cuDeviceGet(&handle, ordinal); result != CUDA_SUCCESS) {
      report().log(HAL_LOG_WARNING, "cuda: GPU %d skipped: %s", ordinal,
                   cu_error_text(&api, result).c_str());
      continue;
    }
    devices_.push_back(std::make_unique<Device>(
        report(), *driver_, nvrtc_.get(), blas_loader_, nccl_.get(), handle,
        static_cast<uint32_t>(devices_.size()) HAL_CUDA_IF_CUDNN(, dnn_loader_)));
  }
}

namespace {
thread_local bool running_on_driver_thread = false;
}  // namespace

bool on_driver_thread() {
  return running_on_driver_thread;
}

void set_on_driver_thread(bool value) {
  running_on_driver_thread = value;
}

ContextScope::ContextScope(const DriverApi& api, CUcontext context, CUresult result)
    : api_(api), result_(result) {
  if (result_ == CUDA_SUCCESS && running_on_driver_thread) result_ = CUDA_ERROR_NOT_PERMITTED;
  if (result_ != CUDA_SUCCESS) return;
  result_ = api_.cuCtxGetCurrent(&previous_);
  if (result_ != CUDA_SUCCESS || previous_ == context) return;
  result_ = api_.cuCtxSetCurrent(context);
  switched_ = result_ == CUDA_SUCCESS;
}

ContextScope::~ContextScope() {
  // The caller's context (or none) back, as it was.
  if (switched_) api_.cuCtxSetCurrent(previous_);
}

bool is_fatal(CUresult code) {
  switch (code) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
      return true;
    default:
      return false;
  }
}

uint32_t fp32_lanes_per_sm(int major, int minor) {
  switch (major) {
    case 3:
      return 192;
    case 5:
      return 128;
    case 6:
      return minor == 0 ? 64 : 128;
    case 7:
      return 64;
    case 8:
      return minor == 0 ? 64 : 128;
    default:
      return 128;  // 9.x, 10.x, 12.x and later
  }
}

Device::Device(const plugin::ErrorReporter& report, const Driver& driver, const Nvrtc* nvrtc,
               ops::CublasLtLoader& blas_loader, const collective::Nccl* nccl, CUdevice handle,
               uint32_t index HAL_CUDA_IF_CUDNN(, ops::CudnnLoader& dnn_loader))
    : DeviceBase(report),
      driver_(driver),
      nvrtc_(nvrtc),
      nccl_(nccl),
      handle_(handle),
      index_(index),
      blas_(std::make_unique<ops::DeviceBlas>(blas_loader))
          HAL_CUDA_IF_CUDNN(, dnn_(std::make_unique<ops::DeviceDnn>(dnn_loader))) {
  read_properties();
}

Device::~Device() {
  release_all();
  const std::vector<plugin::Allocations::Block> left = allocations_.take_all();
  if (context_.load() != nullptr) {
    // The cuBLASLt handle (if a matmul was planned) goes with the context
    // current, before the context is released; then what the application
    // left, freed without a caller to report a failure to.
    if (const ContextScope bound = bind(); bound.ok()) {
      blas_.reset();
      HAL_CUDA_IF_CUDNN(dnn_.reset();)
      for (const plugin::Allocations::Block& block : left) release(block.kind, block.base);
    }
    api().cuDevicePrimaryCtxRelease(handle_);
  }
}

CUresult Device::context(CUcontext& out) const {
  out = context_.load(std::memory_order_acquire);
  if (out != nullptr) return CUDA_SUCCESS;
  std::lock_guard lock(context_mutex_);
  out = context_.load(std::memory_order_relaxed);
  if (out != nullptr) return CUDA_SUCCESS;
  const CUresult result = api().cuDevicePrimaryCtxRetain(&out, handle_);
  if (result == CUDA_SUCCESS) context_.store(out, std::memory_order_release);
  return result;
}

ContextScope Device::bind() const {
  CUcontext context = nullptr;
  CUresult result = lost();
  if (result == CUDA_SUCCESS) result = this->context(context);
  return ContextScope(api(), context, result);
}

size_t Device::allocatable_bytes(size_t total) const {
  // cuMemGetInfo needs a context, and a context reserves device memory of its
  // own (its stacks, printf FIFO, module images): what one can allocate is
  // what cuMemGetInfo reports free once a context exists. Measured with the
  // primary context retained for the measurement only (released after, so an
  // unused GPU keeps no context), less headroom for what the plugin's
  // libraries allocate on first use (cuBLASLt's handle and workspace, NCCL's
  // buffers are not counted: those are charged to the collectives), in whole
  // 2 MiB pages. Without an answer, cuDeviceTotalMem's total.
  constexpr size_t kPage = size_t{2} << 20;
  constexpr size_t kHeadroom = size_t{128} << 20;
  CUcontext context = nullptr;
  if (api().cuDevicePrimaryCtxRetain(&context, handle_) != CUDA_SUCCESS) return total;
  size_t free_bytes = 0, total_bytes = 0;
  CUresult result = CUDA_ERROR_UNKNOWN;
  {
    const ContextScope bound(api(), context, CUDA_SUCCESS);
    if (bound.ok()) result = api().cuMemGetInfo(&free_bytes, &total_bytes);
  }
  api().cuDevicePrimaryCtxRelease(handle_);
  if (result != CUDA_SUCCESS || free_bytes <= kHeadroom + kPage) return total;
  return std::min(total, (free_bytes - kHeadroom) / kPage * kPage);
}

hal_result_t Device::fail(CUresult result, const char* what) const {
  return fail(result_of(result), result, what);
}

hal_result_t Device::fail(hal_result_t mapped, CUresult result, const char* what,
                          const std::string& detail) const {
  if (is_fatal(result)) {
    CUresult expected = CUDA_SUCCESS;
    lost_.compare_exchange_strong(expected, result, std::memory_order_acq_rel);
    mapped = HAL_ERROR_DEVICE_LOST;
  }
  return report().fail(mapped, static_cast<int64_t>(result), "%s: %s%s", what,
                       cu_error_text(&api(), result).c_str(), detail.c_str());
}

void Device::read_properties() {
  const DriverApi& cu = api();
  auto attribute = [&](CUdevice_attribute which, int fallback = 0) {
    int value = 0;
    return cu.cuDeviceGetAttribute(&value, which, handle_) == CUDA_SUCCESS ? value : fallback;
  };
  hal_device_properties_t& out = properties_;
  out.struct_size = sizeof(out);
  // Written in place (the struct is zeroed): NUL-terminated within the field.
  if (cu.cuDeviceGetName(out.name, sizeof(out.name) - 1, handle_) != CUDA_SUCCESS) {
    std::snprintf(out.name, sizeof(out.name), "CUDA device %u", index_);
  }
  plugin::copy_string(out.vendor, "NVIDIA");
  plugin::copy_string(out.plugin, kPluginName);
  const int version = driver_.version();
  const std::string driver_text =
      "CUDA driver " + std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
  plugin::copy_string(out.driver_version, driver_text.c_str());
  CUuuid uuid{};
  if (cu.cuDeviceGetUuid(&uuid, handle_) == CUDA_SUCCESS) {
    std::memcpy(out.uuid, uuid.bytes, sizeof(out.uuid));
  }
  out.type = HAL_DEVICE_TYPE_GPU;
  cc_major_ = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  cc_minor_ = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  // HOST_CALLBACKS: on the stream's host thread (host_functions.hpp).
  out.capabilities = HAL_DEVICE_CAP_KERNELS | HAL_DEVICE_CAP_EVENT_TIMING |
                     HAL_DEVICE_CAP_HOST_CALLBACKS | HAL_DEVICE_CAP_HOST_MEMORY |
                     HAL_DEVICE_CAP_STREAM_QUERY;
  // Collectives on NCCL (collective/), alltoallv with them (the plugin checks
  // that the ranks' counts agree before the data); without NCCL the loader's
  // host-staged ones.
  if (nccl_ != nullptr) out.capabilities |= HAL_DEVICE_CAP_COLLECTIVES | HAL_DEVICE_CAP_ALLTOALLV;
  // NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU
  // detected", ncclInvalidUsage): say so, so callers size communicators.
  out.max_ranks_per_device = nccl_ != nullptr ? 1 : 0;
  if (attribute(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY) != 0) {
    out.capabilities |= HAL_DEVICE_CAP_SHARED_MEMORY;
  }
  out.module_formats = (1u << HAL_MODULE_FORMAT_PTX) | (1u << HAL_MODULE_FORMAT_CUBIN);
  if (nvrtc_ != nullptr && nvrtc_->pick_arch(cc_major_, cc_minor_) != 0) {
    out.module_formats |= 1u << HAL_MODULE_FORMAT_HAL_DIALECT;
  }
  const int sms = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  out.compute_units = static_cast<uint32_t>(sms);
  size_t total = 0;
  cu.cuDeviceTotalMem(&total, handle_);
  // What can be allocated, not the board's size (SPEC §11.2, cuda).
  const size_t allocatable = allocatable_bytes(total);
  out.total_memory_bytes = allocatable;
  out.max_allocation_bytes = allocatable;
  out.min_alignment_bytes = kNativeAlignment;
  out.max_threads_per_block =
      static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
  out.max_block_dims[0] = static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X));
  out.max_block_dims[1] = static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y));
  out.max_block_dims[2] = static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z));
  out.max_grid_dims[0] = static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X));
  out.max_grid_dims[1] = static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y));
  out.max_grid_dims[2] = static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z));
  // The opt-in limit: launches above the default 48 KiB raise the kernel's
  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first (launch_kernel).
  out.max_shared_memory_bytes =
      static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                      attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)));
  out.subgroup_size = static_cast<uint32_t>(attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32));
  // Declared peaks from the attributes: one FMA (2 FLOP) per FP32 lane per
  // clock, and DDR memory (2 transfers per clock) over the bus. Clocks are kHz.
  const double clock_hz = attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE) * 1e3;
  out.peak_fp32_flops = 2.0 * clock_hz * sms * fp32_lanes_per_sm(cc_major_, cc_minor_);
  const double memory_clock_hz = attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE) * 1e3;
  const double bus_bits = attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  out.peak_memory_bandwidth = 2.0 * memory_clock_hz * bus_bits / 8.0;
}

hal_result_t Device::synchronize() {
  const ContextScope bound = bind();
  if (!bound.ok()) return fail(bound.result(), "device_synchronize");
  const CUresult result = api().cuCtxSynchronize();
  if (result != CUDA_SUCCESS) {
    return fail(HAL_ERROR_DEVICE_LOST, result, "device_synchronize: cuCtxSynchronize");
  }
  // A stream lost to a failed collective (SPEC §4.4) fails its device's synchronize too.
  hal_result_t lost = HAL_SUCCESS;
  for_each_stream([&](const std::unique_ptr<Stream>& stream) {
    if (lost == HAL_SUCCESS) lost = stream->report_fault("device_synchronize");
  });
  return lost;
}

}  // namespace hal::cuda
