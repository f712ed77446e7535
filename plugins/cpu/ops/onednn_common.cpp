#include "onednn_common.hpp"

#include <algorithm>
#include <exception>
#include <thread>

namespace hal::cpu::ops {

const dnnl::engine& onednn_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

std::mutex& onednn_execution_mutex() {
  static std::mutex mutex;
  return mutex;
}

dnnl::stream& onednn_stream() {
  static dnnl::stream stream(onednn_engine());
  return stream;
}

void run_on_planning_thread(const std::function<void()>& body) {
  std::exception_ptr failure;
  std::thread planner([&] {
    try {
      body();
    } catch (...) {
      failure = std::current_exception();
    }
  });
  planner.join();
  if (failure) std::rethrow_exception(failure);
}

std::optional<dnnl::memory::data_type> onednn_dtype(hal_dtype_t dtype) {
  switch (dtype) {
    case HAL_DTYPE_F32:
      return dnnl::memory::data_type::f32;
    case HAL_DTYPE_BF16:
      return dnnl::memory::data_type::bf16;
    case HAL_DTYPE_F16:
      return dnnl::memory::data_type::f16;
    default:
      return std::nullopt;
  }
}

const char* dtype_text(hal_dtype_t dtype) {
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
    case HAL_DTYPE_U8:
      return "u8";
    default:
      return "an unknown dtype";
  }
}

dnnl::memory::desc strided_desc(const dnnl::memory::dims& dims, const dnnl::memory::dims& strides,
                                dnnl::memory::data_type type) {
  dnnl::memory::dims canonical = strides;
  // Inner to outer: a unit dimension takes the span of everything inside it.
  dnnl::memory::dim span = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d] == 1) canonical[d] = span;
    span = std::max(span, canonical[d] * dims[d]);
  }
  return dnnl::memory::desc(dims, type, canonical);
}

}  // namespace hal::cpu::ops
