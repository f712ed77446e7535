// The rules every op's scalars are checked by (SPEC.md §17.2). Each op
// computes in f32, f16 and bf16 tensors included (§17.4), so a scalar is
// checked as the f32 the op computes with: a descriptor's float fields are
// f32 already; a run-time scalar (hal_op_scalar_t.f64) is checked as the f32
// it is rounded to, so an f64 that is finite but overflows f32 (AdamW's
// lr = 1e300, which would make every parameter -inf) is refused, as is a
// nonzero one that f32 cannot hold (it would become 0 or a subnormal, which
// devices that flush subnormals read as 0).
//
// Each check returns an empty string when the value passes, else one
// sentence naming the scalar, its value and the rule.
#pragma once

#include "hal_ops/signature.hpp"

#include <cstdint>
#include <string>

namespace hal::ops::definitions {

// A finite f32 (a multiplier: alpha, beta, a softmax scale).
std::string check_finite_scalar(const char* name, float value);
// A finite f32 >= 0 (a weight decay, a clipping norm).
std::string check_non_negative_scalar(const char* name, float value);
// 0 <= value < 1 (a probability, an exponential decay, a label smoothing).
std::string check_unit_interval_scalar(const char* name, float value);
// A finite, normal f32 > 0 (>= FLT_MIN, about 1.2e-38): an epsilon added to
// a denominator, whose 0 (or a subnormal, 0 on devices that flush them)
// divides by zero where the data make the rest of the denominator 0 (a
// constant row in a norm, a zero gradient in AdamW); RoPE's base, whose
// logarithm the frequencies come from. |why| ends the message.
std::string check_positive_normal_scalar(const char* name, float value, const char* why);

enum class Sign { kAny, kNonNegative };
// A run-time f64 scalar the op computes with in f32: finite once rounded to
// f32, 0 or at least FLT_MIN in magnitude (a normal f32), and >= 0 with
// kNonNegative. |op| names the op for the message ("AdamW").
std::string check_f32_run_time_scalar(const char* name, double value, Sign sign, const char* op);

// A run-time scalar that is a value of the op's data rather than a parameter
// of its formula (BINARY_SCALAR's s, WHERE's a and b, CLAMP's bounds,
// FILL's start), converted to |target| as the op converts it. NaN and +-inf
// are values of a float target and pass (masked_fill(-inf), clamp(min=-inf));
// a finite f64 past the float target's range is refused (1e300 in f32, 70000
// in f16: it would become inf), as PyTorch's fill_ refuses it. Integers keep
// HAL_OP_CAST's conversion (saturating to a narrower integer, SPEC §17.6.6),
// and f64 and BOOL targets take every value. |type| names the field the op
// reads.
std::string check_value_scalar(const char* name, const hal_op_scalar_t& scalar, ScalarType type,
                               hal_dtype_t target);

// FILL's start and step over |count| elements of |target|: start as a value
// (above); for a float or f64 target with step != 0 (arange), a finite step
// and a last element start + (count - 1) * step (in f64, as the op computes
// it) that the target holds, so no element of the range silently becomes inf.
// Integer ranges keep their documented i64 arithmetic and conversion.
std::string check_fill_scalars(const hal_op_scalar_t* scalars, ScalarType type, hal_dtype_t target,
                               int64_t count);

}  // namespace hal::ops::definitions
