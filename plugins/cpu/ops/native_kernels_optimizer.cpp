// The optimizer family of the native loops: the AdamW step.
#include "native_kernels.hpp"

#include <cmath>
#include <cstddef>

#include "native_kernels_shared.hpp"

namespace hal::cpu::ops::native {

HAL_ISA_CLONES void adamw_update(const AdamwStep& step, ConstRef grad, float* m, float* v,
                                 float* master, Ref param, size_t begin, size_t end) {
  with_type(grad.type, [&]<typename G>() {
    with_type(param.type, [&]<typename P>() {
      const auto* pg = in<G>(grad);
      auto* pp = out<P>(param);
      for (size_t i = begin; i < end; ++i) {
        const float g = G::load(pg[i]) * step.clip;
        const float mi = step.beta1 * m[i] + (1.0f - step.beta1) * g;
        const float vi = step.beta2 * v[i] + (1.0f - step.beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float w = master != nullptr ? master[i] : P::load(pp[i]);
        const float update =
            (mi / step.bias_correction1) / (std::sqrt(vi / step.bias_correction2) + step.epsilon);
        w = w - step.lr * (update + step.weight_decay * w);
        if (master != nullptr) master[i] = w;
        pp[i] = P::store(w);
      }
    });
  });
}

}  // namespace hal::cpu::ops::native
