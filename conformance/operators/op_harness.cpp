#include "op_harness.hpp"

#include "fp8.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

namespace halconform::ops {

namespace {

constexpr unsigned char kCanary = 0xA5;

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// Round to nearest even from a double (exact for the float reached first:
// double -> float is itself RNE, and float -> bf16/f16 below rounds again
// from the float; the double rounding matters only at exact ties of the
// second rounding, which random data in tests does not produce).
uint16_t to_bf16(double value) {
  const uint32_t bits = float_bits(static_cast<float>(value));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

double from_bf16(uint16_t h) {
  return bits_float(static_cast<uint32_t>(h) << 16);
}

uint16_t to_f16(double value) {
  const float f = static_cast<float>(value);
  if (std::isnan(f)) return 0x7e00;
  const uint32_t bits = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  double magnitude = std::fabs(static_cast<double>(f));
  if (magnitude >= 65520.0) return sign | 0x7c00;  // overflows to infinity
  if (magnitude < std::ldexp(1.0, -14)) {
    // subnormal: units of 2^-24, round to nearest even
    const double units = magnitude / std::ldexp(1.0, -24);
    double rounded = std::nearbyint(units);
    return sign | static_cast<uint16_t>(rounded);
  }
  int exponent = 0;
  const double mantissa = std::frexp(magnitude, &exponent);  // [0.5, 1)
  double scaled = std::nearbyint(mantissa * 2048.0);         // 11 bits
  if (scaled >= 2048.0) {
    scaled /= 2.0;
    ++exponent;
  }
  const int biased = exponent - 1 + 15;
  if (biased >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>((biased << 10) | (static_cast<int>(scaled) - 1024));
}

double from_f16(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) {
    return mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                         : sign * std::numeric_limits<double>::infinity();
  }
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

}  // namespace

double round_to(hal_dtype_t dtype, double value) {
  unsigned char bytes[8];
  store_element(dtype, value, bytes);
  return load_element(dtype, bytes);
}

void store_element(hal_dtype_t dtype, double value, void* out) {
  switch (dtype) {
    case HAL_DTYPE_F32: {
      const float f = static_cast<float>(value);
      std::memcpy(out, &f, 4);
      break;
    }
    case HAL_DTYPE_F64:
      std::memcpy(out, &value, 8);
      break;
    case HAL_DTYPE_F16: {
      const uint16_t h = to_f16(value);
      std::memcpy(out, &h, 2);
      break;
    }
    case HAL_DTYPE_BF16: {
      const uint16_t h = to_bf16(value);
      std::memcpy(out, &h, 2);
      break;
    }
    case HAL_DTYPE_I32: {
      const auto v = static_cast<int32_t>(value);
      std::memcpy(out, &v, 4);
      break;
    }
    case HAL_DTYPE_I64: {
      const auto v = static_cast<int64_t>(value);
      std::memcpy(out, &v, 8);
      break;
    }
    case HAL_DTYPE_I8: {
      const auto v = static_cast<int8_t>(value);
      std::memcpy(out, &v, 1);
      break;
    }
    case HAL_DTYPE_F8_E4M3:
    case HAL_DTYPE_F8_E5M2: {
      const uint8_t v = fp8_encode(value, dtype, false);
      std::memcpy(out, &v, 1);
      break;
    }
    default: {
      const auto v = static_cast<uint8_t>(value);
      std::memcpy(out, &v, 1);
      break;
    }
  }
}

double load_element(hal_dtype_t dtype, const void* in) {
  switch (dtype) {
    case HAL_DTYPE_F32: {
      float f;
      std::memcpy(&f, in, 4);
      return f;
    }
    case HAL_DTYPE_F64: {
      double d;
      std::memcpy(&d, in, 8);
      return d;
    }
    case HAL_DTYPE_F16: {
      uint16_t h;
      std::memcpy(&h, in, 2);
      return from_f16(h);
    }
    case HAL_DTYPE_BF16: {
      uint16_t h;
      std::memcpy(&h, in, 2);
      return from_bf16(h);
    }
    case HAL_DTYPE_I32: {
      int32_t v;
      std::memcpy(&v, in, 4);
      return v;
    }
    case HAL_DTYPE_I64: {
      int64_t v;
      std::memcpy(&v, in, 8);
      return static_cast<double>(v);
    }
    case HAL_DTYPE_I8: {
      int8_t v;
      std::memcpy(&v, in, 1);
      return v;
    }
    case HAL_DTYPE_F8_E4M3:
    case HAL_DTYPE_F8_E5M2: {
      uint8_t v;
      std::memcpy(&v, in, 1);
      return fp8_decode(v, dtype);
    }
    default: {
      uint8_t v;
      std::memcpy(&v, in, 1);
      return v;
    }
  }
}

const char* dtype_label(hal_dtype_t dtype) {
  switch (dtype) {
    case HAL_DTYPE_F32:
      return "f32";
    case HAL_DTYPE_F16:
      return "f16";
    case HAL_DTYPE_BF16:
      return "bf16";
    case HAL_DTYPE_F64:
      return "f64";
    case HAL_DTYPE_I32:
      return "i32";
    case HAL_DTYPE_I64:
      return "i64";
    case HAL_DTYPE_I8:
      return "i8";
    case HAL_DTYPE_BOOL:
      return "bool";
    case HAL_DTYPE_F8_E4M3:
      return "f8_e4m3";
    case HAL_DTYPE_F8_E5M2:
      return "f8_e5m2";
    default:
      return "u8";
  }
}

hal_tensor_desc_t dense(hal_dtype_t dtype, std::initializer_list<int64_t> shape) {
  return dense(dtype, std::vector<int64_t>(shape));
}

hal_tensor_desc_t dense(hal_dtype_t dtype, const std::vector<int64_t>& shape) {
  hal_tensor_desc_t tensor{};
  hal_tensor_desc_contiguous(&tensor, dtype, static_cast<uint32_t>(shape.size()), shape.data());
  return tensor;
}

hal_tensor_desc_t padded(hal_dtype_t dtype, std::initializer_list<int64_t> shape, int64_t pad) {
  hal_tensor_desc_t tensor = dense(dtype, shape);
  if (tensor.rank < 2) return tensor;
  int64_t stride = 1;
  for (uint32_t d = tensor.rank; d-- > 0;) {
    tensor.strides[d] = stride;
    stride *= tensor.shape[d] + (d == tensor.rank - 1 ? pad : 0);
  }
  return tensor;
}

hal_tensor_desc_t transposed(hal_tensor_desc_t tensor, uint32_t d0, uint32_t d1) {
  std::swap(tensor.shape[d0], tensor.shape[d1]);
  std::swap(tensor.strides[d0], tensor.strides[d1]);
  return tensor;
}

int64_t numel(const hal_tensor_desc_t& tensor) {
  int64_t count = 1;
  for (uint32_t d = 0; d < tensor.rank; ++d) count *= tensor.shape[d];
  return count;
}

std::vector<int64_t> shape_of(const hal_tensor_desc_t& tensor) {
  return std::vector<int64_t>(tensor.shape, tensor.shape + tensor.rank);
}

int64_t offset_of(const hal_tensor_desc_t& tensor, int64_t i) {
  int64_t offset = 0;
  for (uint32_t d = tensor.rank; d-- > 0;) {
    const int64_t extent = tensor.shape[d];
    offset += (i % extent) * tensor.strides[d];
    i /= extent;
  }
  return offset;
}

std::string label(const hal_tensor_desc_t& tensor) {
  std::string text = std::string(dtype_label(tensor.dtype)) + "[";
  for (uint32_t d = 0; d < tensor.rank; ++d)
    text += (d ? "," : "") + std::to_string(tensor.shape[d]);
  text += "]{";
  for (uint32_t d = 0; d < tensor.rank; ++d)
    text += (d ? "," : "") + std::to_string(tensor.strides[d]);
  return text + "}";
}

std::vector<double> random_values(std::mt19937_64& random, int64_t count, hal_dtype_t dtype,
                                  double low, double high) {
  std::uniform_real_distribution<double> distribution(low, high);
  std::vector<double> values(static_cast<size_t>(count));
  for (double& v : values) v = round_to(dtype, distribution(random));
  return values;
}

std::vector<double> random_ints(std::mt19937_64& random, int64_t count, int64_t low, int64_t high) {
  std::uniform_int_distribution<int64_t> distribution(low, high);
  std::vector<double> values(static_cast<size_t>(count));
  for (double& v : values) v = static_cast<double>(distribution(random));
  return values;
}

namespace {
size_t extent_of(const hal_tensor_desc_t& layout) {
  const int64_t count = numel(layout);
  if (count == 0) return 0;
  int64_t last = 0;
  for (uint32_t d = 0; d < layout.rank; ++d) last += (layout.shape[d] - 1) * layout.strides[d];
  return static_cast<size_t>(last + 1) * HAL_DTYPE_SIZE(layout.dtype);
}

// Copies between host and device through a temporary stream.
void copy(hal_device_t device, void* dst, const void* src, size_t bytes) {
  hal_stream_t stream = nullptr;
  HC_OK(hal_stream_create(device, 0, &stream));
  const hal_result_t copied = hal_memcpy_async(dst, src, bytes, stream);
  const hal_result_t synced = hal_stream_synchronize(stream);
  hal_stream_destroy(stream);
  HC_OK(copied);
  HC_OK(synced);
}
}  // namespace

DeviceTensor::DeviceTensor(hal_device_t device, const hal_tensor_desc_t& layout,
                           const std::vector<double>& values)
    : device_(device), layout_(layout) {
  // A guard of 64 bytes past the view catches writes beyond it.
  bytes_ = extent_of(layout) + 64;
  HC_OK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes_, 0, &pointer_));
  std::vector<unsigned char> host(bytes_, kCanary);
  const size_t element = HAL_DTYPE_SIZE(layout.dtype);
  const int64_t count = numel(layout);
  if (!values.empty()) {
    HC_REQUIRE(static_cast<int64_t>(values.size()) == count,
               "DeviceTensor: " + std::to_string(values.size()) + " values for " + label(layout));
    for (int64_t i = 0; i < count; ++i) {
      store_element(layout.dtype, values[static_cast<size_t>(i)],
                    host.data() + offset_of(layout, i) * element);
    }
  }
  copy(device, pointer_, host.data(), bytes_);
}

DeviceTensor::~DeviceTensor() {
  if (pointer_ != nullptr) hal_mem_free(pointer_);
}

void DeviceTensor::upload_integers(const std::vector<int64_t>& values) {
  HC_REQUIRE(static_cast<int64_t>(values.size()) == numel(layout_),
             "DeviceTensor: " + std::to_string(values.size()) + " integers for " + label(layout_));
  std::vector<unsigned char> host(bytes_);
  copy(device_, host.data(), pointer_, bytes_);
  const size_t element = HAL_DTYPE_SIZE(layout_.dtype);
  for (size_t i = 0; i < values.size(); ++i) {
    // Little-endian: the low bytes of the two's complement value (the
    // element's own bits for every integer width).
    const auto bits = static_cast<uint64_t>(values[i]);
    std::memcpy(host.data() + offset_of(layout_, static_cast<int64_t>(i)) * element, &bits,
                element);
  }
  copy(device_, pointer_, host.data(), bytes_);
}

std::vector<int64_t> DeviceTensor::download_integers() const {
  std::vector<unsigned char> host(bytes_);
  copy(device_, host.data(), pointer_, bytes_);
  const size_t element = HAL_DTYPE_SIZE(layout_.dtype);
  std::vector<int64_t> values(static_cast<size_t>(numel(layout_)));
  for (size_t i = 0; i < values.size(); ++i) {
    const unsigned char* at = host.data() + offset_of(layout_, static_cast<int64_t>(i)) * element;
    switch (layout_.dtype) {
      case HAL_DTYPE_I64: {
        int64_t v;
        std::memcpy(&v, at, 8);
        values[i] = v;
        break;
      }
      case HAL_DTYPE_I32: {
        int32_t v;
        std::memcpy(&v, at, 4);
        values[i] = v;
        break;
      }
      case HAL_DTYPE_I8:
        values[i] = static_cast<int8_t>(*at);
        break;
      default:  // u8, bool: the raw byte
        values[i] = *at;
        break;
    }
  }
  return values;
}

void expect_equal_integers(const std::vector<int64_t>& got, const std::vector<int64_t>& expected,
                           const std::string& what) {
  HC_REQUIRE(got.size() == expected.size(), what + ": " + std::to_string(got.size()) +
                                                " elements, expected " +
                                                std::to_string(expected.size()));
  for (size_t i = 0; i < got.size(); ++i) {
    HC_REQUIRE(got[i] == expected[i], what + ": element " + std::to_string(i) + " is " +
                                          std::to_string(got[i]) + ", expected " +
                                          std::to_string(expected[i]));
  }
}

std::vector<double> DeviceTensor::download() const {
  std::vector<unsigned char> host(bytes_);
  copy(device_, host.data(), pointer_, bytes_);
  const size_t element = HAL_DTYPE_SIZE(layout_.dtype);
  const int64_t count = numel(layout_);
  std::vector<double> values(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    values[static_cast<size_t>(i)] =
        load_element(layout_.dtype, host.data() + offset_of(layout_, i) * element);
  }
  return values;
}

void DeviceTensor::check_untouched(const std::string& what) const {
  std::vector<unsigned char> host(bytes_);
  copy(device_, host.data(), pointer_, bytes_);
  std::vector<bool> covered(bytes_, false);
  const size_t element = HAL_DTYPE_SIZE(layout_.dtype);
  const int64_t count = numel(layout_);
  for (int64_t i = 0; i < count; ++i) {
    const size_t at = static_cast<size_t>(offset_of(layout_, i)) * element;
    for (size_t b = 0; b < element; ++b) covered[at + b] = true;
  }
  for (size_t b = 0; b < bytes_; ++b) {
    HC_REQUIRE(covered[b] || host[b] == kCanary, what + ": byte " + std::to_string(b) +
                                                     " outside the view of " + label(layout_) +
                                                     " was written");
  }
}

Plan::~Plan() {
  if (plan_ != nullptr) hal_op_plan_destroy(plan_);
}

hal_op_plan_info_t Plan::info() const {
  hal_op_plan_info_t info{};
  info.struct_size = sizeof(info);
  HC_OK(hal_op_plan_get_info(plan_, &info));
  return info;
}

bool Acceptance::expect(const hal_op_header_t* desc, const char* what) {
  hal_op_plan_t plan = nullptr;
  const hal_result_t result = hal_op_plan_create(ctx_.device(), desc, 0, &plan);
  if (plan != nullptr) hal_op_plan_destroy(plan);
  if (result == HAL_ERROR_UNSUPPORTED) {
    if (declined_.empty()) declined_ = hal_error_last_message();
    return false;
  }
  HC_REQUIRE(result == HAL_SUCCESS,
             strf("%s: hal_op_plan_create returned %s, expected HAL_SUCCESS (or "
                  "HAL_ERROR_UNSUPPORTED from a device without an implementation): %s",
                  what, hal_result_string(result), hal_error_last_message()));
  return true;
}

void Acceptance::finish() {
  if (!declined_.empty()) {
    ctx_.skip(
        "every descriptor rule was refused as documented, but the device accepts no plan "
        "of the op (SPEC.md §17.3): " +
        declined_);
  }
}

void expect_refused(TestContext& ctx, const hal_op_header_t* desc, const char* what) {
  hal_op_plan_t plan = nullptr;
  const hal_result_t result = hal_op_plan_create(ctx.device(), desc, 0, &plan);
  if (plan != nullptr) hal_op_plan_destroy(plan);
  HC_REQUIRE(result == HAL_ERROR_INVALID_ARGUMENT,
             strf("%s: hal_op_plan_create returned %s, expected HAL_ERROR_INVALID_ARGUMENT", what,
                  hal_result_string(result)));
}

void expect_refused_naming(TestContext& ctx, const hal_op_header_t* desc, const char* words) {
  hal_op_plan_t plan = nullptr;
  const hal_result_t result = hal_op_plan_create(ctx.device(), desc, 0, &plan);
  const std::string message = hal_error_last_message();
  if (plan != nullptr) hal_op_plan_destroy(plan);
  HC_REQUIRE(result == HAL_ERROR_INVALID_ARGUMENT, std::string("a descriptor breaking '") + words +
                                                       "' gave " + hal_result_string(result) +
                                                       ": " + message);
  HC_REQUIRE(message.find(words) != std::string::npos,
             std::string("the message '") + message + "' does not name '" + words + "'");
}

void plan_or_skip(TestContext& ctx, const hal_op_header_t* desc, Plan& plan,
                  hal_op_plan_flags_t flags) {
  const hal_result_t result = hal_op_plan_create(ctx.device(), desc, flags, plan.out());
  if (result == HAL_ERROR_UNSUPPORTED) ctx.skip(hal_error_last_message());
  HC_REQUIRE(result == HAL_SUCCESS,
             std::string("hal_op_plan_create failed: ") + hal_error_last_message());
}

namespace {

// What one execution on a fresh stream gave: hal_op_execute's result (with
// its message) and the stream synchronisation's.
struct Execution {
  hal_result_t executed = HAL_SUCCESS;
  std::string message;
  hal_result_t synced = HAL_SUCCESS;
};

Execution execute_on_fresh_stream(TestContext& ctx, const Plan& plan,
                                  const std::vector<void*>& operands,
                                  const std::vector<hal_op_scalar_t>& scalars, void* workspace,
                                  size_t workspace_bytes) {
  hal_stream_t stream = nullptr;
  HC_OK(hal_stream_create(ctx.device(), 0, &stream));
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = static_cast<uint32_t>(operands.size());
  args.operands = operands.data();
  args.scalar_count = static_cast<uint32_t>(scalars.size());
  args.scalars = scalars.data();
  args.workspace = workspace;
  args.workspace_bytes = workspace_bytes;
  Execution execution;
  execution.executed = hal_op_execute(plan.get(), &args, stream);
  if (execution.executed != HAL_SUCCESS) execution.message = hal_error_last_message();
  execution.synced = hal_stream_synchronize(stream);
  hal_stream_destroy(stream);
  return execution;
}

}  // namespace

hal_result_t try_execute(TestContext& ctx, const Plan& plan, const std::vector<void*>& operands,
                         const std::vector<hal_op_scalar_t>& scalars, void* workspace,
                         size_t workspace_bytes) {
  const Execution execution =
      execute_on_fresh_stream(ctx, plan, operands, scalars, workspace, workspace_bytes);
  if (!execution.message.empty()) ctx.note("hal_op_execute: " + execution.message);
  return execution.executed != HAL_SUCCESS ? execution.executed : execution.synced;
}

void execute(TestContext& ctx, const Plan& plan, const std::vector<void*>& operands,
             const std::vector<hal_op_scalar_t>& scalars) {
  const size_t workspace_bytes = plan.info().workspace_bytes;
  std::optional<DeviceTensor> workspace;  // freed however the checks below end
  if (workspace_bytes > 0) {
    workspace.emplace(ctx.device(), dense(HAL_DTYPE_U8, {static_cast<int64_t>(workspace_bytes)}));
  }
  const Execution execution = execute_on_fresh_stream(
      ctx, plan, operands, scalars, workspace ? workspace->data() : nullptr, workspace_bytes);
  HC_REQUIRE(execution.executed == HAL_SUCCESS, "hal_op_execute failed: " + execution.message);
  HC_OK(execution.synced);
}

Tolerance tolerance_for(hal_dtype_t dtype, double terms) {
  const double growth = std::sqrt(std::max(1.0, terms));
  switch (dtype) {
    case HAL_DTYPE_F16:
      return {2e-3 * growth, 2e-3};
    case HAL_DTYPE_BF16:
      return {1.6e-2 * growth, 1.6e-2};
    default:
      return {1e-5 * growth, 1e-5};
  }
}

void expect_close(const std::vector<double>& got, const std::vector<double>& expected,
                  Tolerance tolerance, const std::string& what) {
  HC_REQUIRE(got.size() == expected.size(), what + ": " + std::to_string(got.size()) +
                                                " values, expected " +
                                                std::to_string(expected.size()));
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i];
    const double e = expected[i];
    bool ok;
    if (std::isnan(e)) {
      ok = std::isnan(g);
    } else if (std::isinf(e)) {
      ok = g == e;
    } else {
      ok = std::fabs(g - e) <= tolerance.atol + tolerance.rtol * std::fabs(e);
    }
    if (!ok) {
      char text[256];
      std::snprintf(text, sizeof(text),
                    ": element %zu is %.9g, expected %.9g (tolerance %.3g + %.3g * |expected|)", i,
                    g, e, tolerance.atol, tolerance.rtol);
      HC_REQUIRE(ok, what + text);
    }
  }
}

void expect_identical(const std::vector<double>& a, const std::vector<double>& b,
                      const std::string& what) {
  HC_REQUIRE(a.size() == b.size(), what + ": sizes differ");
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = std::memcmp(&a[i], &b[i], sizeof(double)) == 0;
    if (!same) {
      char text[200];
      std::snprintf(text, sizeof(text), ": element %zu differs between runs (%.17g vs %.17g)", i,
                    a[i], b[i]);
      HC_REQUIRE(same, what + text);
    }
  }
}

}  // namespace halconform::ops
