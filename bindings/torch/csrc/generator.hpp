// The random-number state of a hal device: a Philox-4x32-10 key (the seed)
// and counter offset, as HAL_OP_DROPOUT takes them (SPEC §17.6.3). Each
// random op reserves the counter values it consumes, so two ops never reuse
// one, and torch.hal.manual_seed / get_rng_state / set_rng_state reproduce a
// run. Ops that run on the host (the CPU fallback) draw from a CPU generator
// seeded from a fresh reservation, so they follow the same seed.
#ifndef HAL_TORCH_GENERATOR_HPP_
#define HAL_TORCH_GENERATOR_HPP_

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>
#include <optional>
#include <utility>

namespace hal_torch {

class HalGenerator final : public c10::GeneratorImpl {
 public:
  explicit HalGenerator(c10::DeviceIndex index);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // Reserves |count| counter values: returns the seed and the first offset.
  // The caller holds mutex_ (as torch's own kernels do).
  std::pair<uint64_t, uint64_t> reserve(uint64_t count);

  static c10::DeviceType device_type();

 private:
  HalGenerator* clone_impl() const override;

  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The default generator of device |index| (made on first use).
const at::Generator& default_generator(c10::DeviceIndex index);

// |generator| when given (it must be a hal generator), else the default of |index|.
HalGenerator* generator_or_default(const std::optional<at::Generator>& generator,
                                   c10::DeviceIndex index);

}  // namespace hal_torch

#endif  // HAL_TORCH_GENERATOR_HPP_
