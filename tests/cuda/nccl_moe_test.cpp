// MoE routing, dispatch and combine (hal/moe.h) on cuda devices whose
// collectives run on NCCL, over the stand-in driver and the stand-in NCCL:
// the routing (its counts allgathered over NCCL) against the host reference
// of conformance/collectives/moe_case.hpp, and dispatch and combine, whose
// rows travel by hal_alltoallv, through NCCL's sends and receives. The rows'
// values are not checked here: the stand-in driver records kernel launches
// without running them, so the gathers and scalings MoE composes
// (HAL_OP_EMBEDDING, HAL_OP_BINARY) move nothing; on a GPU halconform's
// collectives.moe.dispatch_combine checks them (scripts/gpu_check.sh).
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <string>
#include <thread>
#include <vector>

#include "fake_nccl.h"
#include "local_ranks.hpp"
#include "moe_case.hpp"

using namespace coll_test;

namespace {

constexpr uint32_t kMoeRanks = 2;  // the stand-in driver's devices

// What the cuda plugin opens: the stand-ins.
[[maybe_unused]] const bool kMoeEnvironment = [] {
  setenv("HAL_CUDA_DRIVER_PATH", HAL_TEST_FAKE_CUDA, 1);
  setenv("HAL_CUDA_NCCL_PATH", HAL_TEST_FAKE_NCCL, 1);
  return true;
}();

long nccl_calls(const char* function) {
  void* handle = dlopen(HAL_TEST_FAKE_NCCL, RTLD_NOW);  // the plugin's: the same handle
  REQUIRE(handle != nullptr);
  const auto count =
      reinterpret_cast<fake_nccl_call_count_fn>(dlsym(handle, "fake_nccl_call_count"));
  REQUIRE(count != nullptr);
  const long calls = count(function);
  dlclose(handle);
  return calls;
}

// One rank's routing, dispatch and combine for |c|; "" or what went wrong.
std::string run_rank(const MoeCase& c, const Rank& rank, const std::vector<MoeInputs>& all) {
  const MoeInputs& in = all[rank.rank];
  const MoeReceived want = moe_received(c, all, rank.rank);
  const size_t elem = elem_size(c.dtype);
  const size_t received = want.rows.size();
  Buffer indices(rank.device, in.indices.size() * sizeof(int32_t));
  Buffer tokens(rank.device, in.values.size() * elem),
      weights(rank.device, in.weights.size() * elem);
  Buffer recv(rank.device, received * c.hidden * elem);
  Buffer out(rank.device, in.values.size() * elem);
  const std::string where = "rank " + std::to_string(rank.rank) + ": ";
  if (!in.indices.empty() &&
      hal_memcpy_async(indices.get(), in.indices.data(), in.indices.size() * sizeof(int32_t),
                       rank.stream) != HAL_SUCCESS) {
    return where + "staging the indices: " + hal_error_last_message();
  }
  hal_moe_routing_desc_t desc = HAL_MOE_ROUTING_DESC_INIT;
  desc.num_experts = c.num_experts;
  desc.top_k = c.top_k;
  desc.num_tokens = in.tokens;
  desc.recv_capacity = received;
  hal_moe_routing_t routing = nullptr;
  if (hal_moe_routing_create(rank.comm, &desc, static_cast<const int32_t*>(indices.get()),
                             rank.stream, &routing) != HAL_SUCCESS) {
    return where + "hal_moe_routing_create: " + hal_error_last_message();
  }
  struct Destroy {
    hal_moe_routing_t routing;
    ~Destroy() { hal_moe_routing_destroy(routing); }
  } destroy{routing};
  hal_moe_routing_info_t info{};
  info.struct_size = sizeof(info);
  if (hal_moe_routing_get_info(routing, &info) != HAL_SUCCESS) {
    return where + "get_info: " + hal_error_last_message();
  }
  if (info.num_send_rows != in.indices.size() || info.num_recv_rows != received) {
    return where + std::to_string(info.num_recv_rows) + " rows received, want " +
           std::to_string(received);
  }
  std::vector<size_t> counts(want.expert_counts.size());
  if (hal_moe_routing_get_expert_counts(routing, static_cast<uint32_t>(counts.size()),
                                        counts.data()) != HAL_SUCCESS) {
    return where + "get_expert_counts: " + hal_error_last_message();
  }
  if (counts != want.expert_counts) return where + "expert counts differ from the reference";
  if (hal_moe_dispatch(routing, tokens.get(), weights.get(), c.hidden, c.dtype, recv.get(),
                       rank.stream) != HAL_SUCCESS) {
    return where + "hal_moe_dispatch: " + hal_error_last_message();
  }
  if (hal_moe_combine(routing, recv.get(), weights.get(), c.hidden, c.dtype, out.get(),
                      rank.stream) != HAL_SUCCESS) {
    return where + "hal_moe_combine: " + hal_error_last_message();
  }
  if (hal_stream_synchronize(rank.stream) != HAL_SUCCESS) {
    return where + "hal_stream_synchronize: " + hal_error_last_message();
  }
  return {};
}

}  // namespace

TEST_CASE("moe on NCCL: the routing matches the reference, dispatch and combine go over NCCL",
          "[nccl][moe]") {
  Session session(HAL_TEST_PLUGIN_DIR, "cuda");
  LocalRanks local(kMoeRanks);
  for (const MoeCase& c : moe_matrix(kMoeRanks, 4200)) {
    INFO(c.label());
    std::vector<MoeInputs> all;
    for (uint32_t r = 0; r < kMoeRanks; ++r) all.push_back(moe_inputs(c, r, kMoeRanks));
    const long sends_before = nccl_calls("ncclSend");
    std::vector<std::string> failures(kMoeRanks);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < kMoeRanks; ++r) {
      threads.emplace_back([&, r] { failures[r] = run_rank(c, local.ranks[r], all); });
    }
    for (std::thread& t : threads) t.join();
    for (const std::string& failure : failures) CHECK(failure == "");
    // Rank 0 has tokens for both ranks' experts: its dispatch and combine sent them on NCCL.
    CHECK(nccl_calls("ncclSend") > sends_before);
  }
}
