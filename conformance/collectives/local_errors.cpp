// collectives.errors: every local error the collective calls document
// (hal/collective.h, SPEC.md §13.3) on every collective, the communicator
// calls' errors, and the layouts the matrix does not cover: alltoallv with
// packed (NULL) displacements and with gaps between received blocks (left
// as they were), reduce_scatter in place.
#include <algorithm>
#include <iterator>
#include <chrono>
#include <cstring>
#include <thread>

#include "check.hpp"
#include "collectives_common.hpp"
#include "context.hpp"
#include "hal_objects.hpp"

namespace halconform {
namespace {

constexpr hal_dtype_t kBadDtype = static_cast<hal_dtype_t>(99);
constexpr hal_reduce_op_t kBadOp = static_cast<hal_reduce_op_t>(99);

// One collective with the arguments to vary: buffers, count, dtype, op, root.
struct Call {
  const char* name;
  bool reduces;
  bool rooted;
  hal_result_t (*issue)(const void* send, void* recv, size_t count, hal_dtype_t dtype,
                        hal_reduce_op_t op, uint32_t root, hal_comm_t comm, hal_stream_t stream);
};

const Call kCalls[] = {
    {"hal_allreduce", true, false,
     [](const void* s, void* r, size_t c, hal_dtype_t d, hal_reduce_op_t o, uint32_t,
        hal_comm_t comm, hal_stream_t st) { return hal_allreduce(s, r, c, d, o, comm, st); }},
    {"hal_broadcast", false, true,
     [](const void* s, void* r, size_t c, hal_dtype_t d, hal_reduce_op_t, uint32_t root,
        hal_comm_t comm, hal_stream_t st) { return hal_broadcast(s, r, c, d, root, comm, st); }},
    {"hal_reduce", true, true,
     [](const void* s, void* r, size_t c, hal_dtype_t d, hal_reduce_op_t o, uint32_t root,
        hal_comm_t comm, hal_stream_t st) { return hal_reduce(s, r, c, d, o, root, comm, st); }},
    {"hal_allgather", false, false,
     [](const void* s, void* r, size_t c, hal_dtype_t d, hal_reduce_op_t, uint32_t, hal_comm_t comm,
        hal_stream_t st) { return hal_allgather(s, r, c, d, comm, st); }},
    {"hal_reduce_scatter", true, false,
     [](const void* s, void* r, size_t c, hal_dtype_t d, hal_reduce_op_t o, uint32_t,
        hal_comm_t comm, hal_stream_t st) { return hal_reduce_scatter(s, r, c, d, o, comm, st); }},
    {"hal_alltoall", false, false,
     [](const void* s, void* r, size_t c, hal_dtype_t d, hal_reduce_op_t, uint32_t, hal_comm_t comm,
        hal_stream_t st) { return hal_alltoall(s, r, c, d, comm, st); }},
    {"hal_send", false, true,
     [](const void* s, void*, size_t c, hal_dtype_t d, hal_reduce_op_t, uint32_t peer,
        hal_comm_t comm, hal_stream_t st) { return hal_send(s, c, d, peer, comm, st); }},
    {"hal_recv", false, true,
     [](const void*, void* r, size_t c, hal_dtype_t d, hal_reduce_op_t, uint32_t peer,
        hal_comm_t comm, hal_stream_t st) { return hal_recv(r, c, d, peer, comm, st); }},
    {"hal_alltoallv", false, false,
     [](const void* s, void* r, size_t c, hal_dtype_t d, hal_reduce_op_t, uint32_t, hal_comm_t comm,
        hal_stream_t st) {
       // One entry per rank of any communicator this test makes.
       size_t counts[kMaxCollectiveRanks];
       std::fill(std::begin(counts), std::end(counts), c);
       return hal_alltoallv(s, counts, nullptr, r, counts, nullptr, d, comm, st);
     }},
};

void expect(hal_result_t got, hal_result_t want, const Call& call, const char* what) {
  HC_REQUIRE(got == want, strf("%s with %s returned %s, expected %s (hal/collective.h, local "
                               "errors)",
                               call.name, what, hal_result_string(got), hal_result_string(want)));
}

}  // namespace

HALCONFORM_TEST("collectives.errors.local",
                "every collective refuses, itself and at once, NULL and foreign handles, NULL "
                "buffers, unknown dtypes and ops, roots and peers out of range, overflowing "
                "counts, buffers past their allocation, another device's stream, and a "
                "communicator that failed earlier",
                {}) {
  const std::vector<hal_device_t> devices = rank_devices(ctx);
  LocalRanks one(devices, 1, 20000);
  const hal_comm_t comm = one.ranks[0].comm;
  const hal_stream_t stream = one.ranks[0].stream;
  Buffer send(ctx.device(), 4096), recv(ctx.device(), 4096);
  const size_t count = 16;  // 64 bytes of f32
  std::unique_ptr<Stream> peer_stream;
  if (devices.size() > 1) peer_stream = std::make_unique<Stream>(devices[1]);
  const bool alltoallv = ctx.has(HAL_DEVICE_CAP_ALLTOALLV);
  for (const Call& call : kCalls) {
    if (std::strcmp(call.name, "hal_alltoallv") == 0 && !alltoallv) continue;
    void* r = recv.get();
    const void* s = send.get();
    expect(call.issue(s, r, count, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, nullptr, stream),
           HAL_ERROR_INVALID_HANDLE, call, "a NULL communicator");
    expect(call.issue(s, r, count, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, comm, nullptr),
           HAL_ERROR_INVALID_HANDLE, call, "a NULL stream");
    const bool reads = std::strcmp(call.name, "hal_recv") != 0;
    const bool writes = std::strcmp(call.name, "hal_send") != 0;
    if (reads) {
      expect(call.issue(nullptr, r, count, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, comm, stream),
             HAL_ERROR_NULL_POINTER, call, "a NULL send buffer and count 16");
    }
    if (writes) {
      expect(call.issue(s, nullptr, count, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, comm, stream),
             HAL_ERROR_NULL_POINTER, call, "a NULL receive buffer and count 16");
    }
    expect(call.issue(s, r, count, kBadDtype, HAL_REDUCE_SUM, 0, comm, stream),
           HAL_ERROR_INVALID_ARGUMENT, call, "dtype 99");
    if (call.reduces) {
      expect(call.issue(s, r, count, HAL_DTYPE_F32, kBadOp, 0, comm, stream),
             HAL_ERROR_INVALID_ARGUMENT, call, "op 99");
    }
    if (call.rooted) {
      expect(call.issue(s, r, count, HAL_DTYPE_F32, HAL_REDUCE_SUM, 1, comm, stream),
             HAL_ERROR_INVALID_ARGUMENT, call, "root or peer 1 of 1 rank");
    }
    expect(call.issue(s, r, SIZE_MAX / 2, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, comm, stream),
           HAL_ERROR_INVALID_SIZE, call, "a count whose bytes overflow");
    expect(call.issue(s, r, 4096 / 4 + 1, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, comm, stream),
           HAL_ERROR_OUT_OF_BOUNDS, call, "1025 f32 in 4096-byte allocations");
    if (peer_stream) {
      expect(call.issue(s, r, count, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0, comm, *peer_stream),
             HAL_ERROR_DEVICE_MISMATCH, call, "a stream of another device");
    }
  }
  expect(hal_alltoall(send.get(), send.get(), count, HAL_DTYPE_F32, comm, stream),
         HAL_ERROR_INVALID_ARGUMENT, kCalls[5], "send == recv (alltoall is never in place)");
  HC_OK(hal_stream_synchronize(stream));
  // A communicator whose call failed (a peer that never came, at a short
  // deadline) refuses later calls with HAL_ERROR_INVALID_STATE.
  if (devices.size() < 2) {
    ctx.note("one device: the failed-communicator case needs two ranks");
    return;
  }
  LocalRanks two(devices, 2, 200);
  // Not in a group: the loader's blocking path returns at the deadline itself.
  const hal_result_t issued = hal_allreduce(send.get(), send.get(), count, HAL_DTYPE_F32,
                                            HAL_REDUCE_SUM, two.ranks[0].comm, two.ranks[0].stream);
  const hal_result_t synced =
      issued == HAL_SUCCESS ? hal_stream_synchronize(two.ranks[0].stream) : issued;
  HC_REQUIRE(synced != HAL_SUCCESS,
             std::string("hal_allreduce on one of two ranks (the other never calls) succeeded"));
  for (const Call& call : kCalls) {
    if (std::strcmp(call.name, "hal_alltoallv") == 0 && !alltoallv) continue;
    Stream fresh(ctx.device());
    expect(call.issue(send.get(), recv.get(), count, HAL_DTYPE_F32, HAL_REDUCE_SUM, 0,
                      two.ranks[0].comm, fresh),
           HAL_ERROR_INVALID_STATE, call, "a communicator that failed earlier");
  }
  if (alltoallv) {
    Stream fresh(ctx.device());
    hal_moe_routing_desc_t desc = HAL_MOE_ROUTING_DESC_INIT;
    desc.num_experts = 2;
    desc.top_k = 1;
    hal_moe_routing_t routing = nullptr;
    HC_EXPECT_RESULT(hal_moe_routing_create(two.ranks[0].comm, &desc, nullptr, fresh, &routing),
                     HAL_ERROR_INVALID_STATE);
  }
}

HALCONFORM_TEST("collectives.errors.communicators",
                "communicator creation, queries, destroy and abort refuse what hal/collective.h "
                "lists; a group end without a start is HAL_ERROR_INVALID_STATE",
                {}) {
  const std::vector<hal_device_t> devices = rank_devices(ctx);
  hal_comm_t comms[2] = {nullptr, nullptr};
  hal_device_t device = ctx.device();
  HC_EXPECT_RESULT(hal_comm_init_all(1, nullptr, nullptr, comms), HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_comm_init_all(1, &device, nullptr, nullptr), HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_comm_init_all(0, &device, nullptr, comms), HAL_ERROR_INVALID_ARGUMENT);
  const hal_device_t twice[2] = {device, device};
  HC_EXPECT_RESULT(hal_comm_init_all(2, twice, nullptr, comms), HAL_ERROR_INVALID_ARGUMENT);
  const hal_device_t none[1] = {nullptr};
  HC_EXPECT_RESULT(hal_comm_init_all(1, none, nullptr, comms), HAL_ERROR_INVALID_HANDLE);
  // A communicator with the default deadline (timeout_ms 0) and its queries.
  hal_comm_config_t defaults = HAL_COMM_CONFIG_INIT;
  hal_comm_t comm = nullptr;
  HC_OK(hal_comm_init_all(1, &device, &defaults, &comm));
  uint32_t value = 99;
  hal_device_t owner = nullptr;
  hal_result_t error = HAL_ERROR_INTERNAL;
  HC_OK(hal_comm_count(comm, &value));
  HC_REQUIRE(value == 1, strf("hal_comm_count of a one-rank communicator says %u", value));
  HC_OK(hal_comm_rank(comm, &value));
  HC_REQUIRE(value == 0, strf("hal_comm_rank of rank 0 says %u", value));
  HC_OK(hal_comm_get_device(comm, &owner));
  HC_REQUIRE(owner == device, std::string("hal_comm_get_device names another device"));
  HC_OK(hal_comm_get_async_error(comm, &error));
  HC_REQUIRE(error == HAL_SUCCESS,
             strf("a new communicator's async error is %s", hal_result_string(error)));
  HC_EXPECT_RESULT(hal_comm_count(comm, nullptr), HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_comm_rank(comm, nullptr), HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_comm_get_device(comm, nullptr), HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_comm_get_async_error(comm, nullptr), HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_comm_count(nullptr, &value), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_comm_rank(nullptr, &value), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_comm_get_device(nullptr, &owner), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_comm_get_async_error(nullptr, &error), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_comm_destroy(reinterpret_cast<hal_comm_t>(device)),
                   HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_comm_abort(nullptr), HAL_ERROR_INVALID_HANDLE);
  HC_OK(hal_comm_destroy(comm));
  HC_EXPECT_RESULT(hal_comm_destroy(comm), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_comm_abort(comm), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_comm_count(comm, &value), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_comm_rank(comm, &value), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_comm_get_device(comm, &owner), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_comm_get_async_error(comm, &error), HAL_ERROR_DESTROYED_HANDLE);
  HC_OK(hal_comm_destroy(nullptr));
  HC_EXPECT_RESULT(hal_group_end(), HAL_ERROR_INVALID_STATE);
  // hal_comm_init_rank over the unique-id bootstrap: one rank meets itself;
  // its errors: a rank past the count, a NULL id, a NULL device, a bootstrap
  // that is no hal_comm_bootstrap_t, the TCP store without a secret, and a
  // peer that never comes (the deadline).
  hal_comm_unique_id_t id{};
  HC_EXPECT_RESULT(hal_comm_get_unique_id(nullptr), HAL_ERROR_NULL_POINTER);
  HC_OK(hal_comm_get_unique_id(&id));
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.timeout_ms = 300;
  HC_OK(hal_comm_init_rank(device, 1, &id, 0, &config, &comm));
  HC_OK(hal_comm_destroy(comm));
  HC_EXPECT_RESULT(hal_comm_init_rank(device, 1, &id, 1, &config, &comm),
                   HAL_ERROR_INVALID_ARGUMENT);
  HC_EXPECT_RESULT(hal_comm_init_rank(device, 1, nullptr, 0, &config, &comm),
                   HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_comm_init_rank(nullptr, 1, &id, 0, &config, &comm),
                   HAL_ERROR_INVALID_HANDLE);
  hal_comm_config_t bad = config;
  bad.bootstrap = static_cast<hal_comm_bootstrap_t>(77);
  HC_EXPECT_RESULT(hal_comm_init_rank(device, 1, &id, 0, &bad, &comm), HAL_ERROR_INVALID_ARGUMENT);
  hal_comm_config_t store = config;
  store.bootstrap = HAL_COMM_BOOTSTRAP_TCP_STORE;
  store.store_address = "127.0.0.1:1";
  const hal_result_t tcp = hal_comm_init_rank(device, 1, &id, 0, &store, &comm);
  HC_REQUIRE(tcp != HAL_SUCCESS,
             std::string("hal_comm_init_rank over HAL_COMM_BOOTSTRAP_TCP_STORE without "
                         "HAL_COMM_STORE_SECRET succeeded"));
  hal_comm_config_t mpi = config;
  mpi.bootstrap = HAL_COMM_BOOTSTRAP_MPI;
  const hal_result_t over_mpi = hal_comm_init_rank(device, 1, &id, 0, &mpi, &comm);
  if (over_mpi == HAL_SUCCESS) HC_OK(hal_comm_destroy(comm));
  ctx.note(std::string("HAL_COMM_BOOTSTRAP_MPI outside mpirun: ") + hal_result_string(over_mpi) +
           "; HAL_COMM_BOOTSTRAP_TCP_STORE without a secret: " + hal_result_string(tcp));
  hal_comm_unique_id_t lonely{};
  HC_OK(hal_comm_get_unique_id(&lonely));
  HC_EXPECT_RESULT(hal_comm_init_rank(device, 2, &lonely, 0, &config, &comm), HAL_ERROR_TIMEOUT);
  // Two ranks that disagree on the rank count: both fail, neither hangs.
  hal_comm_unique_id_t shared{};
  HC_OK(hal_comm_get_unique_id(&shared));
  hal_comm_config_t slow = HAL_COMM_CONFIG_INIT;
  slow.timeout_ms = 1500;
  hal_result_t results[2] = {HAL_SUCCESS, HAL_SUCCESS};
  hal_comm_t made[2] = {nullptr, nullptr};
  std::thread other(
      [&] { results[1] = hal_comm_init_rank(devices.back(), 3, &shared, 1, &slow, &made[1]); });
  results[0] = hal_comm_init_rank(device, 2, &shared, 0, &slow, &made[0]);
  other.join();
  for (hal_comm_t c : made) {
    if (c != nullptr) hal_comm_destroy(c);
  }
  HC_REQUIRE(results[0] == HAL_ERROR_ARGUMENT_MISMATCH || results[1] == HAL_ERROR_ARGUMENT_MISMATCH,
             strf("hal_comm_init_rank of two ranks that disagree on nranks (2 and 3) returned %s "
                  "and %s; expected HAL_ERROR_ARGUMENT_MISMATCH",
                  hal_result_string(results[0]), hal_result_string(results[1])));
}

HALCONFORM_TEST("collectives.errors.moe",
                "MoE routing, dispatch and combine refuse NULL and destroyed handles, NULL "
                "pointers, bad descriptors and another device's stream",
                {.capabilities = HAL_DEVICE_CAP_ALLTOALLV}) {
  const std::vector<hal_device_t> devices = rank_devices(ctx);
  LocalRanks one(devices, 1, 20000);
  const hal_comm_t comm = one.ranks[0].comm;
  const hal_stream_t stream = one.ranks[0].stream;
  hal_moe_routing_desc_t desc = HAL_MOE_ROUTING_DESC_INIT;
  desc.num_experts = 2;
  desc.top_k = 1;
  desc.num_tokens = 4;
  desc.recv_capacity = 4;
  const int32_t indices[4] = {0, 1, 1, 0};
  hal_moe_routing_t routing = nullptr;
  HC_EXPECT_RESULT(hal_moe_routing_create(nullptr, &desc, indices, stream, &routing),
                   HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_moe_routing_create(comm, nullptr, indices, stream, &routing),
                   HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_moe_routing_create(comm, &desc, nullptr, stream, &routing),
                   HAL_ERROR_NULL_POINTER);
  hal_moe_routing_desc_t bad = desc;
  bad.num_experts = 0;
  HC_EXPECT_RESULT(hal_moe_routing_create(comm, &bad, indices, stream, &routing),
                   HAL_ERROR_INVALID_ARGUMENT);
  bad = desc;
  bad.top_k = 0;
  HC_EXPECT_RESULT(hal_moe_routing_create(comm, &bad, indices, stream, &routing),
                   HAL_ERROR_INVALID_ARGUMENT);
  bad = desc;
  bad.recv_capacity = 1;  // four rows arrive
  HC_EXPECT_RESULT(hal_moe_routing_create(comm, &bad, indices, stream, &routing),
                   HAL_ERROR_OUT_OF_BOUNDS);
  const int32_t outside[4] = {0, 1, 2, 0};  // expert 2 of 2
  HC_EXPECT_RESULT(hal_moe_routing_create(comm, &desc, outside, stream, &routing),
                   HAL_ERROR_INVALID_ARGUMENT);
  if (devices.size() > 1) {
    Stream other(devices[1]);
    HC_EXPECT_RESULT(hal_moe_routing_create(comm, &desc, indices, other, &routing),
                     HAL_ERROR_DEVICE_MISMATCH);
  }
  const hal_result_t made = hal_moe_routing_create(comm, &desc, indices, stream, &routing);
  if (made == HAL_ERROR_UNSUPPORTED)
    ctx.skip(std::string("no MoE routing: ") + hal_error_last_message());
  HC_OK(made);
  hal_moe_routing_info_t info{};
  info.struct_size = sizeof(info);
  HC_OK(hal_moe_routing_get_info(routing, &info));
  HC_EXPECT_RESULT(hal_moe_routing_get_info(routing, nullptr), HAL_ERROR_NULL_POINTER);
  hal_moe_routing_info_t small{};
  small.struct_size = 8;
  HC_EXPECT_RESULT(hal_moe_routing_get_info(routing, &small), HAL_ERROR_INVALID_ARGUMENT);
  size_t counts[4] = {};
  HC_OK(hal_moe_routing_get_expert_counts(routing, info.num_local_experts, counts));
  HC_EXPECT_RESULT(hal_moe_routing_get_expert_counts(routing, info.num_local_experts + 1, counts),
                   HAL_ERROR_INVALID_ARGUMENT);
  HC_EXPECT_RESULT(hal_moe_routing_get_expert_counts(routing, info.num_local_experts, nullptr),
                   HAL_ERROR_NULL_POINTER);
  Buffer tokens(ctx.device(), 4 * 8 * 4), rows(ctx.device(), 4 * 8 * 4);
  HC_EXPECT_RESULT(
      hal_moe_dispatch(nullptr, tokens.get(), nullptr, 8, HAL_DTYPE_F32, rows.get(), stream),
      HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(
      hal_moe_dispatch(routing, tokens.get(), nullptr, 0, HAL_DTYPE_F32, rows.get(), stream),
      HAL_ERROR_INVALID_ARGUMENT);
  HC_EXPECT_RESULT(
      hal_moe_dispatch(routing, tokens.get(), nullptr, 8, HAL_DTYPE_I32, rows.get(), stream),
      HAL_ERROR_INVALID_ARGUMENT);
  HC_EXPECT_RESULT(
      hal_moe_dispatch(routing, nullptr, nullptr, 8, HAL_DTYPE_F32, rows.get(), stream),
      HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(
      hal_moe_combine(nullptr, rows.get(), nullptr, 8, HAL_DTYPE_F32, tokens.get(), stream),
      HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(
      hal_moe_combine(routing, rows.get(), nullptr, 0, HAL_DTYPE_F32, tokens.get(), stream),
      HAL_ERROR_INVALID_ARGUMENT);
  HC_EXPECT_RESULT(hal_moe_combine(routing, rows.get(), nullptr, 8, HAL_DTYPE_F32, nullptr, stream),
                   HAL_ERROR_NULL_POINTER);
  if (devices.size() > 1) {
    Stream other(devices[1]);
    HC_EXPECT_RESULT(
        hal_moe_dispatch(routing, tokens.get(), nullptr, 8, HAL_DTYPE_F32, rows.get(), other),
        HAL_ERROR_DEVICE_MISMATCH);
    HC_EXPECT_RESULT(
        hal_moe_combine(routing, rows.get(), nullptr, 8, HAL_DTYPE_F32, tokens.get(), other),
        HAL_ERROR_DEVICE_MISMATCH);
  }
  Buffer small_rows(ctx.device(), 16);
  HC_EXPECT_RESULT(
      hal_moe_dispatch(routing, tokens.get(), nullptr, 8, HAL_DTYPE_F32, small_rows.get(), stream),
      HAL_ERROR_OUT_OF_BOUNDS);
  HC_EXPECT_RESULT(
      hal_moe_combine(routing, small_rows.get(), nullptr, 8, HAL_DTYPE_F32, tokens.get(), stream),
      HAL_ERROR_OUT_OF_BOUNDS);
  HC_EXPECT_RESULT(hal_moe_dispatch(routing, tokens.get(), nullptr, SIZE_MAX / 4, HAL_DTYPE_F32,
                                    rows.get(), stream),
                   HAL_ERROR_INVALID_SIZE);
  HC_EXPECT_RESULT(hal_moe_combine(routing, rows.get(), nullptr, SIZE_MAX / 4, HAL_DTYPE_F32,
                                   tokens.get(), stream),
                   HAL_ERROR_INVALID_SIZE);
  HC_EXPECT_RESULT(hal_moe_routing_get_info(nullptr, &info), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_moe_routing_get_expert_counts(nullptr, 1, counts), HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_moe_routing_destroy(reinterpret_cast<hal_moe_routing_t>(comm)),
                   HAL_ERROR_INVALID_HANDLE);
  HC_OK(hal_moe_routing_destroy(routing));
  HC_EXPECT_RESULT(hal_moe_routing_destroy(routing), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_moe_routing_get_info(routing, &info), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_moe_routing_get_expert_counts(routing, 1, counts),
                   HAL_ERROR_DESTROYED_HANDLE);
  HC_OK(hal_moe_routing_destroy(nullptr));
}

HALCONFORM_TEST("collectives.layouts",
                "alltoallv with packed (NULL) displacements and with gaps between the received "
                "blocks (left untouched), and reduce_scatter in place, over the plugin's devices",
                {.capabilities = HAL_DEVICE_CAP_ALLTOALLV}) {
  const std::vector<hal_device_t> devices = rank_devices(ctx);
  const auto n = static_cast<uint32_t>(devices.size());
  LocalRanks local(devices, n, 20000);
  constexpr size_t kBlock = 5;  // elements each rank sends each other rank
  constexpr size_t kGap = 3;    // elements between received blocks
  const size_t packed = kBlock * n, spread = (kBlock + kGap) * n;
  std::vector<std::unique_ptr<Buffer>> sends, recvs, gapped;
  for (uint32_t r = 0; r < n; ++r) {
    sends.push_back(std::make_unique<Buffer>(devices[r], packed * 4));
    recvs.push_back(std::make_unique<Buffer>(devices[r], packed * 4));
    gapped.push_back(std::make_unique<Buffer>(devices[r], spread * 4));
    std::vector<float> values(packed);
    for (size_t i = 0; i < packed; ++i) values[i] = static_cast<float>(1000 * r + i);
    HC_OK(hal_memcpy_async(sends[r]->get(), values.data(), packed * 4, local.ranks[r].stream));
    HC_OK(hal_memset_async(gapped[r]->get(), 0xa5, spread * 4, local.ranks[r].stream));
    HC_OK(hal_stream_synchronize(local.ranks[r].stream));
  }
  const std::vector<size_t> counts(n, kBlock);
  std::vector<size_t> gapped_displs(n);
  for (uint32_t r = 0; r < n; ++r) gapped_displs[r] = r * (kBlock + kGap) + kGap;
  HC_OK(hal_group_start());
  for (uint32_t r = 0; r < n; ++r) {
    hal_alltoallv(sends[r]->get(), counts.data(), nullptr, recvs[r]->get(), counts.data(), nullptr,
                  HAL_DTYPE_F32, local.ranks[r].comm, local.ranks[r].stream);
  }
  HC_OK(hal_group_end());
  HC_OK(hal_group_start());
  for (uint32_t r = 0; r < n; ++r) {
    hal_alltoallv(sends[r]->get(), counts.data(), nullptr, gapped[r]->get(), counts.data(),
                  gapped_displs.data(), HAL_DTYPE_F32, local.ranks[r].comm, local.ranks[r].stream);
  }
  HC_OK(hal_group_end());
  for (uint32_t r = 0; r < n; ++r) {
    const std::vector<uint8_t> got = read_back(local.ranks[r].stream, recvs[r]->get(), packed * 4);
    const std::vector<uint8_t> spaced =
        read_back(local.ranks[r].stream, gapped[r]->get(), spread * 4);
    for (uint32_t from = 0; from < n; ++from) {
      for (size_t i = 0; i < kBlock; ++i) {
        const float want = static_cast<float>(1000 * from + r * kBlock + i);
        float a = 0, b = 0;
        std::memcpy(&a, got.data() + (from * kBlock + i) * 4, 4);
        std::memcpy(&b, spaced.data() + (gapped_displs[from] + i) * 4, 4);
        HC_REQUIRE(a == want && b == want,
                   strf("through %s: hal_alltoallv rank %u, element %zu of the block from rank "
                        "%u: %g packed (NULL displacements), %g at displacement %zu, want %g",
                        collective_path(ctx), r, i, from, a, b, gapped_displs[from] + i, want));
      }
      const size_t gap_start = gapped_displs[from] - kGap;
      for (size_t b = gap_start * 4; b < gapped_displs[from] * 4; ++b) {
        HC_REQUIRE(spaced[b] == 0xa5,
                   strf("through %s: hal_alltoallv rank %u wrote byte %zu of the gap before the "
                        "block from rank %u (0x%02x, the fill was 0xa5): gaps between "
                        "displacements keep their contents (SPEC.md §13.2)",
                        collective_path(ctx), r, b, from, spaced[b]));
      }
    }
  }
  // reduce_scatter in place: recvbuf is sendbuf + rank * recvcount.
  HC_OK(hal_group_start());
  for (uint32_t r = 0; r < n; ++r) {
    auto* base = static_cast<float*>(sends[r]->get());
    hal_reduce_scatter(base, base + r * kBlock, kBlock, HAL_DTYPE_F32, HAL_REDUCE_SUM,
                       local.ranks[r].comm, local.ranks[r].stream);
  }
  HC_OK(hal_group_end());
  for (uint32_t r = 0; r < n; ++r) {
    const std::vector<uint8_t> got = read_back(
        local.ranks[r].stream, static_cast<float*>(sends[r]->get()) + r * kBlock, kBlock * 4);
    for (size_t i = 0; i < kBlock; ++i) {
      double want = 0;
      for (uint32_t q = 0; q < n; ++q) want += 1000.0 * q + r * kBlock + i;
      float value = 0;
      std::memcpy(&value, got.data() + i * 4, 4);
      HC_REQUIRE(value == static_cast<float>(want),
                 strf("through %s: hal_reduce_scatter in place, rank %u element %zu (block %u of "
                      "every rank): %g, want %g",
                      collective_path(ctx), r, i, r, value, want));
    }
  }
}

}  // namespace halconform
