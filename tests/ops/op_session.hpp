// One HAL session for the op tests (tests/ops/*_ops_test.cpp, tests/cuda/cudnn_conv_test.cpp):
// device 0 of whatever plugin the test binary's environment selects, one stream, and the device
// memory and plans a test makes, freed when the session ends.
#ifndef HAL_TESTS_OPS_OP_SESSION_HPP_
#define HAL_TESTS_OPS_OP_SESSION_HPP_

#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "hal.h"

namespace op_test {

class Session {
 public:
  Session() {
    REQUIRE(hal_init(nullptr) == HAL_SUCCESS);
    uint32_t count = 0;
    REQUIRE(hal_device_count(&count) == HAL_SUCCESS);
    REQUIRE(count > 0);
    REQUIRE(hal_device_get(0, &device_) == HAL_SUCCESS);
    REQUIRE(hal_stream_create(device_, 0, &stream_) == HAL_SUCCESS);
  }
  ~Session() {
    for (void* p : allocations_) hal_mem_free(p);
    for (hal_op_plan_t plan : plans_) hal_op_plan_destroy(plan);
    hal_stream_destroy(stream_);
    hal_shutdown();
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  hal_device_t device() const { return device_; }
  hal_stream_t stream() const { return stream_; }

  // |bytes| of device memory (at least one byte), its contents unset: no guard bytes, so an
  // operand can end exactly where its allocation does.
  void* alloc_bytes(size_t bytes) {
    void* p = nullptr;
    REQUIRE(hal_mem_alloc(device_, HAL_MEMORY_DEVICE, bytes == 0 ? 1 : bytes, 0, &p) ==
            HAL_SUCCESS);
    allocations_.push_back(p);
    return p;
  }
  // Copies |bytes| on the session's stream (host to device or back) and waits.
  void copy(void* dst, const void* src, size_t bytes) {
    REQUIRE(hal_memcpy_async(dst, src, bytes, stream_) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream_) == HAL_SUCCESS);
  }

  // Device memory holding |host|'s bytes, then 64 guard bytes of 0xA5.
  template <typename T>
  T* upload(const std::vector<T>& host) {
    const size_t bytes = host.size() * sizeof(T);
    void* p = nullptr;
    REQUIRE(hal_mem_alloc(device_, HAL_MEMORY_DEVICE, bytes + kGuardBytes, 0, &p) == HAL_SUCCESS);
    allocations_.push_back(p);
    std::vector<unsigned char> staging(bytes + kGuardBytes, kGuard);
    if (bytes > 0) std::memcpy(staging.data(), host.data(), bytes);
    REQUIRE(hal_memcpy_async(p, staging.data(), staging.size(), stream_) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream_) == HAL_SUCCESS);
    return static_cast<T*>(p);
  }
  template <typename T>
  T* alloc(size_t count, T fill = T{}) {
    return upload(std::vector<T>(count, fill));
  }

  // |count| elements back, and whether the guard bytes after them are intact.
  template <typename T>
  std::vector<T> download(const T* p, size_t count, bool* guard_intact = nullptr) {
    std::vector<unsigned char> staging(count * sizeof(T) + kGuardBytes);
    REQUIRE(hal_memcpy_async(staging.data(), p, staging.size(), stream_) == HAL_SUCCESS);
    REQUIRE(hal_stream_synchronize(stream_) == HAL_SUCCESS);
    std::vector<T> out(count);
    if (count > 0) std::memcpy(out.data(), staging.data(), count * sizeof(T));
    if (guard_intact != nullptr) {
      *guard_intact = true;
      for (size_t i = count * sizeof(T); i < staging.size(); ++i) {
        *guard_intact = *guard_intact && staging[i] == kGuard;
      }
    }
    return out;
  }
  // The first |bytes| bytes of an upload, whatever its element type.
  std::vector<unsigned char> download_bytes(const void* p, size_t bytes) {
    return download(static_cast<const unsigned char*>(p), bytes);
  }

  hal_result_t try_plan(const hal_op_header_t* desc, hal_op_plan_t* plan) {
    return hal_op_plan_create(device_, desc, 0, plan);
  }
  hal_op_plan_t plan(const hal_op_header_t* desc) {
    hal_op_plan_t plan = nullptr;
    const hal_result_t result = try_plan(desc, &plan);
    INFO(hal_error_last_message());
    REQUIRE(result == HAL_SUCCESS);
    plans_.push_back(plan);
    return plan;
  }
  // Plans and runs |desc| with a workspace of the plan's size, and waits.
  void run(const hal_op_header_t* desc, std::vector<void*> operands,
           std::vector<hal_op_scalar_t> scalars = {}) {
    hal_op_plan_t p = plan(desc);
    hal_op_plan_info_t info{};
    info.struct_size = sizeof info;
    REQUIRE(hal_op_plan_get_info(p, &info) == HAL_SUCCESS);
    void* workspace = nullptr;
    if (info.workspace_bytes > 0) {
      workspace = upload(std::vector<unsigned char>(info.workspace_bytes));
    }
    execute(p, std::move(operands), std::move(scalars), workspace, info.workspace_bytes);
  }
  // Runs |plan| on the session's stream with |workspace_bytes| of workspace at |workspace|, and
  // waits.
  void execute(hal_op_plan_t plan, std::vector<void*> operands,
               std::vector<hal_op_scalar_t> scalars, void* workspace, size_t workspace_bytes) {
    hal_op_exec_args_t args{};
    args.struct_size = sizeof args;
    args.operand_count = static_cast<uint32_t>(operands.size());
    args.operands = operands.data();
    args.scalar_count = static_cast<uint32_t>(scalars.size());
    args.scalars = scalars.data();
    args.workspace = workspace;
    args.workspace_bytes = workspace_bytes;
    const hal_result_t result = hal_op_execute(plan, &args, stream_);
    INFO(hal_error_last_message());
    REQUIRE(result == HAL_SUCCESS);
    const hal_result_t ran = hal_stream_synchronize(stream_);
    INFO(hal_error_last_message());
    REQUIRE(ran == HAL_SUCCESS);
  }

  // The plan is refused with HAL_ERROR_INVALID_ARGUMENT; the message.
  std::string refused(const hal_op_header_t* desc) {
    hal_op_plan_t plan = nullptr;
    const hal_result_t result = try_plan(desc, &plan);
    const std::string message = hal_error_last_message();
    INFO(message);
    CHECK(result == HAL_ERROR_INVALID_ARGUMENT);
    if (result == HAL_SUCCESS) hal_op_plan_destroy(plan);
    return message;
  }

 private:
  static constexpr size_t kGuardBytes = 64;
  static constexpr unsigned char kGuard = 0xA5;
  hal_device_t device_ = nullptr;
  hal_stream_t stream_ = nullptr;
  std::vector<void*> allocations_;
  std::vector<hal_op_plan_t> plans_;
};

}  // namespace op_test

#endif  // HAL_TESTS_OPS_OP_SESSION_HPP_
