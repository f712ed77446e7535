// The operators profile: every op of hal/ops.h x dtype x shape set (odd
// sizes, strided views, broadcasting, empty tensors, the op's own edge cases)
// against float64 host references written independently of the
// implementations (reference.hpp and each area's file), backward ops against
// the reference's gradient and, on small shapes, float64 finite differences;
// deterministic plans bit for bit; and the error of every rule.
#include "registry.hpp"

HALCONFORM_PROFILE("operators", 6,
                   "operators (hal/ops.h) vs float64 host references: forward, backward, "
                   "determinism, errors");
