// collectives.moe: MoE dispatch and combine (hal/moe.h) on 1..N ranks of one
// process, against the host reference of moe_case.hpp (shared with
// tests/collectives), and ranks that disagree failing on every rank.
#include <algorithm>
#include <thread>

#include "check.hpp"
#include "collectives_common.hpp"
#include "context.hpp"
#include "moe_case.hpp"

namespace halconform {
namespace {

// Whether |device| plans HAL_OP_EMBEDDING of |dtype| (the gather dispatch
// and combine are built on); |why| gets the declines when it does not.
bool gathers(hal_device_t device, hal_dtype_t dtype, std::string& why) {
  hal_op_embedding_desc_t gather{};
  gather.header = {sizeof(gather), nullptr, HAL_OP_EMBEDDING, 0};
  const int64_t ids[1] = {4}, rows[2] = {4, 8};
  hal_tensor_desc_contiguous(&gather.ids, HAL_DTYPE_I32, 1, ids);
  hal_tensor_desc_contiguous(&gather.table, dtype, 2, rows);
  hal_tensor_desc_contiguous(&gather.out, dtype, 2, rows);
  hal_op_plan_t plan = nullptr;
  const hal_result_t r = hal_op_plan_create(device, &gather.header, 0, &plan);
  if (r == HAL_ERROR_UNSUPPORTED) {
    why = hal_error_last_message();
    return false;
  }
  require_result(r, HAL_SUCCESS, "hal_op_plan_create(HAL_OP_EMBEDDING)");
  hal_op_plan_destroy(plan);
  return true;
}

}  // namespace

HALCONFORM_TEST("collectives.moe.dispatch_combine",
                "MoE dispatch and combine: every float dtype, k = 1 and 2, uneven routing with "
                "experts that receive nothing and a rank with no tokens, weighted and not, "
                "over 1..N ranks",
                {}) {
  const std::vector<hal_device_t> devices = rank_devices(ctx);
  if (!ctx.has(HAL_DEVICE_CAP_ALLTOALLV)) ctx.skip("no HAL_DEVICE_CAP_ALLTOALLV");
  // As the operators profile: a dtype the device does not gather is skipped, with the reason.
  std::vector<hal_dtype_t> served;
  for (const hal_dtype_t dtype : {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16}) {
    std::string why;
    if (gathers(devices[0], dtype, why)) {
      served.push_back(dtype);
    } else {
      ctx.note(strf("%s skipped: the device serves no HAL_OP_EMBEDDING of it: %s",
                    coll_test::dtype_name(dtype), why.c_str()));
    }
  }
  if (served.empty()) ctx.skip("the device serves no HAL_OP_EMBEDDING");
  size_t cases = 0;
  for (uint32_t n = 1; n <= devices.size(); ++n) {
    LocalRanks local(devices, n, 20000);
    for (const coll_test::MoeCase& c : coll_test::moe_matrix(n, 3000 * n)) {
      if (std::find(served.begin(), served.end(), c.dtype) == served.end()) continue;
      const std::string failure = coll_test::run_moe_case(c, local.ranks, n);
      if (!failure.empty()) {
        fail(strf("through %s, %u ranks, %s: %s", collective_path(ctx), n, c.label().c_str(),
                  failure.c_str()));
      }
      ++cases;
    }
  }
  ctx.note(
      strf("%zu cases over 1..%zu ranks through %s", cases, devices.size(), collective_path(ctx)));
}

HALCONFORM_TEST("collectives.moe.mismatch",
                "MoE routing: ranks that disagree on top_k fail on every rank with "
                "HAL_ERROR_ARGUMENT_MISMATCH, never a hang",
                {}) {
  const std::vector<hal_device_t> devices = rank_devices(ctx);
  if (devices.size() < 2) ctx.skip("needs 2 devices of the plugin");
  LocalRanks local(devices, 2, 20000);
  std::vector<hal_result_t> results(2, HAL_SUCCESS);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      hal_moe_routing_desc_t desc = HAL_MOE_ROUTING_DESC_INIT;
      desc.num_experts = 2;
      desc.top_k = r + 1;  // 1 on rank 0, 2 on rank 1
      hal_moe_routing_t routing = nullptr;
      results[r] = hal_moe_routing_create(local.ranks[r].comm, &desc, nullptr,
                                          local.ranks[r].stream, &routing);
      if (routing != nullptr) hal_moe_routing_destroy(routing);
    });
  }
  for (std::thread& t : threads) t.join();
  for (uint32_t r = 0; r < 2; ++r) {
    require_result(results[r], HAL_ERROR_ARGUMENT_MISMATCH,
                   strf("hal_moe_routing_create on rank %u", r).c_str());
  }
}

}  // namespace halconform
