// Where the core kernel tests get their kernels: the same kernels (same
// names, signatures and behaviour: conformance/kernels/core_kernels.hal) from
// every source the device can load:
//  - the plugin's conformance kernel pack (hal_plugin_<name>.kernels beside
//    the plugin, or --kernel-pack): the kernels in its native formats (PTX,
//    cubin, HSACO, SPIR-V, OpenCL C, a CPU shared object);
//  - the CPU shared object built with the suite (halconform_kernels.so);
//  - the HAL dialect source (core_kernels.hal, embedded in halconform).
// A test runs its body once per source that loads and names the source in
// every failure. A device that declares HAL_DEVICE_CAP_KERNELS and loads none
// is "kernels: not certified" (core.kernels.sources fails, never a pass).
#ifndef HAL_CONFORMANCE_CORE_KERNEL_SOURCES_HPP_
#define HAL_CONFORMANCE_CORE_KERNEL_SOURCES_HPP_

#include <hal.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "context.hpp"
#include "registry.hpp"

namespace halconform {

// What the core kernel tests need of a device: kernels; the source is found at run time.
inline constexpr Requirements kCoreKernels{HAL_DEVICE_CAP_KERNELS, 0, 1};

struct KernelSource {
  std::string name;  // "the conformance kernel pack (HAL_MODULE_FORMAT_PTX sm_80.ptx)"
  hal_module_format_t format = HAL_MODULE_FORMAT_HAL_DIALECT;
  std::string path;         // a file, or "" with |image|
  std::vector<char> image;  // the module in memory
  std::string kind;         // "pack", "cpu_shared_object", "dialect"
};

// Every source whose format the device lists, in the order above; |why_not|
// collects a sentence per source left out (a pack line for another device...).
std::vector<KernelSource> kernel_sources(TestContext& ctx, std::string* why_not = nullptr);

// The conformance kernels of one source, loaded on one device.
class SourceModule {
 public:
  // Loads |source| on |device|; the result is in load_result().
  SourceModule(hal_device_t device, const KernelSource& source);
  ~SourceModule();
  SourceModule(const SourceModule&) = delete;
  SourceModule& operator=(const SourceModule&) = delete;

  hal_result_t load_result() const { return load_result_; }
  const std::string& load_message() const { return load_message_; }
  hal_module_t get() const { return module_; }
  // Gives up ownership (the test unloads it itself).
  hal_module_t release();
  // The kernel |name| with its declared signature (kernel_signature).
  hal_kernel_t kernel(const char* name);

 private:
  hal_module_t module_ = nullptr;
  hal_result_t load_result_ = HAL_SUCCESS;
  std::string load_message_;
  std::map<std::string, hal_kernel_t> kernels_;
};

// The signature every source's |name| has.
std::vector<hal_arg_type_t> kernel_signature(const std::string& name);

// Runs |body| once per kernel source that loads on the test's device; a
// failure names the source. Skips when none loads (core.kernels.sources
// fails then, and says why).
void for_each_kernel_source(TestContext& ctx,
                            const std::function<void(const KernelSource&, SourceModule&)>& body);

// The module formats of the sources the device loads, for notes.
std::string source_names(const std::vector<KernelSource>& sources);

}  // namespace halconform

#endif  // HAL_CONFORMANCE_CORE_KERNEL_SOURCES_HPP_
