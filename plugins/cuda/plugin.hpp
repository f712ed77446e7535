// The cuda plugin's context: the driver (absent when libcuda.so.1 is missing
// or cuInit fails; then 0 devices and the reason in the load report), NVRTC
// when present, and one Device per GPU.
#ifndef HAL_PLUGINS_CUDA_PLUGIN_HPP_
#define HAL_PLUGINS_CUDA_PLUGIN_HPP_

#include <memory>
#include <string>
#include <vector>

#include "hal_plugin_sdk/report.hpp"
#include "collective/nccl.hpp"
#include "driver.hpp"
#include "nvrtc.hpp"
#include "ops/cublaslt.hpp"

namespace hal::cuda {

inline constexpr char kPluginName[] = "cuda";
inline constexpr char kPluginVersion[] = "1.0.0";
inline constexpr char kPluginVendor[] = "HAL project";

class Device;

class Plugin {
 public:
  // Opens the driver and finds the devices; logs a warning (the load
  // report's reason) and never fails when there are none.
  explicit Plugin(const hal_plugin_host_t* host);
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  const plugin::ErrorReporter& report() const { return report_; }
  uint32_t device_count() const { return static_cast<uint32_t>(devices_.size()); }
  Device& device(uint32_t index) { return *devices_[index]; }
  // Whether the plugin serves collectives itself (NCCL was found).
  bool has_collectives() const { return nccl_ != nullptr; }

 private:
  void discover();

  plugin::ErrorReporter report_;
  std::unique_ptr<Driver> driver_;
  std::unique_ptr<Nvrtc> nvrtc_;
  std::unique_ptr<const collective::Nccl> nccl_;  // opened at load, when there are GPUs
  // Opens nothing until the first matmul plan (SPEC §10.7, Operators).
  ops::CublasLtLoader blas_loader_;
  std::vector<std::unique_ptr<Device>> devices_;  // destroyed before the driver
};

inline Plugin* to_plugin(hal_plugin_context_t* context) {
  return reinterpret_cast<Plugin*>(context);
}

void plugin_shutdown(hal_plugin_context_t* context);
hal_result_t device_count(hal_plugin_context_t* context, uint32_t* out_count);
hal_result_t device_open(hal_plugin_context_t* context, uint32_t index,
                         hal_impl_device_t** out_device);

}  // namespace hal::cuda

#endif  // HAL_PLUGINS_CUDA_PLUGIN_HPP_
