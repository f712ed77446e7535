#include "launch.hpp"

#include "hal_ops/device_state.hpp"
#include "sources.hpp"

#include <algorithm>

namespace hal::ops::portable {

KernelArgs& KernelArgs::push(const void* value, size_t size) {
  std::array<unsigned char, 8> bytes{};
  std::memcpy(bytes.data(), value, size);
  storage_.push_back(bytes);
  sizes_.push_back(size);
  return *this;
}

hal_result_t KernelArgs::launch(hal_kernel_t kernel, hal_stream_t stream,
                                const hal_launch_config_t& config) const {
  std::vector<hal_kernel_arg_t> args(storage_.size());
  for (size_t i = 0; i < storage_.size(); ++i) args[i] = {storage_[i].data(), sizes_[i]};
  return hal_launch_kernel(kernel, &config, static_cast<uint32_t>(args.size()), args.data(),
                           stream);
}

hal_launch_config_t linear_config(int64_t count, uint32_t block) {
  hal_launch_config_t config{};
  config.struct_size = sizeof(config);
  const int64_t blocks = std::max<int64_t>(1, (count + block - 1) / block);
  constexpr int64_t kMaxX = 65535;
  config.grid[0] = static_cast<uint32_t>(std::min(blocks, kMaxX));
  config.grid[1] = static_cast<uint32_t>((blocks + config.grid[0] - 1) / config.grid[0]);
  config.grid[2] = 1;
  config.block[0] = block;
  config.block[1] = 1;
  config.block[2] = 1;
  return config;
}

bool merge_views(const hal_tensor_desc_t& shape,
                 std::initializer_list<const hal_tensor_desc_t*> views, MergedViews* out) {
  // Dimensions innermost first: (size, stride per view).
  struct Dim {
    int64_t size;
    std::vector<int64_t> strides;
  };
  std::vector<Dim> dims;
  for (uint32_t d = shape.rank; d-- > 0;) {
    if (shape.shape[d] == 1) continue;
    Dim dim{shape.shape[d], {}};
    for (const hal_tensor_desc_t* view : views) dim.strides.push_back(view->strides[d]);
    if (!dims.empty()) {
      Dim& inner = dims.back();
      bool dense = true;
      for (size_t v = 0; v < dim.strides.size(); ++v) {
        dense = dense && dim.strides[v] == inner.strides[v] * inner.size;
      }
      if (dense) {
        inner.size *= dim.size;
        continue;
      }
    }
    dims.push_back(std::move(dim));
  }
  if (dims.size() > 4) return false;
  out->shape = {1, 1, 1, 1};
  out->strides.assign(views.size(), {0, 0, 0, 0});
  for (size_t i = 0; i < dims.size(); ++i) {
    const size_t slot = 3 - i;
    out->shape[slot] = dims[i].size;
    for (size_t v = 0; v < views.size(); ++v) out->strides[v][slot] = dims[i].strides[v];
  }
  return true;
}

bool device_runs_dialect(const PlanRequest& request, std::string* decline) {
  const hal_device_properties_t& properties = *request.properties;
  if ((properties.capabilities & HAL_DEVICE_CAP_KERNELS) == 0 ||
      (properties.module_formats & (1u << HAL_MODULE_FORMAT_HAL_DIALECT)) == 0) {
    *decline = "the device does not compile HAL dialect kernels";
    return false;
  }
  return true;
}

hal_kernel_t portable_kernel(const PlanRequest& request, const char* source_name, const char* name,
                             std::string* decline) {
  if (!device_runs_dialect(request, decline)) return nullptr;
  const std::string_view source = portable_source(source_name);
  hal_kernel_t kernel = nullptr;
  if (request.state->kernel(source_name, source, name, &kernel, decline) != HAL_SUCCESS) {
    return nullptr;
  }
  return kernel;
}

}  // namespace hal::ops::portable
