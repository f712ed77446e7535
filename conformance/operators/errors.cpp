// The rules every execution is checked against (SPEC.md §17.2), shown on a
// unary plan: each broken rule gives its result code and writes nothing.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "api_model.hpp"
#include "op_harness.hpp"

using namespace halconform;
using namespace halconform::ops;

namespace {

struct UnaryFixture {
  hal_op_unary_desc_t desc{};
  Plan plan;
  explicit UnaryFixture(TestContext& ctx, int64_t n = 64) {
    desc.header.struct_size = sizeof(desc);
    desc.header.kind = HAL_OP_UNARY;
    desc.activation = HAL_ACTIVATION_RELU;
    desc.alpha = 1.0f;
    desc.x = dense(HAL_DTYPE_F32, {n});
    desc.out = dense(HAL_DTYPE_F32, {n});
    plan_or_skip(ctx, &desc.header, plan);
  }
};

}  // namespace

HALCONFORM_TEST("operators.errors.descriptor", "bad descriptors are refused with the rule", {}) {
  hal_op_unary_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = HAL_OP_UNARY;
  desc.x = dense(HAL_DTYPE_F32, {4, 5});
  desc.out = dense(HAL_DTYPE_F32, {4, 6});
  hal_op_plan_t plan = nullptr;
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);  // shapes differ
  desc.out = dense(HAL_DTYPE_I32, {4, 5});
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);  // dtype
  desc.out = dense(HAL_DTYPE_F32, {4, 5});
  desc.out.strides[0] = 0;  // an output reaching one element twice
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);
  desc.out = dense(HAL_DTYPE_F32, {4, 5});
  desc.x.rank = 9;
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);
  desc.x = dense(HAL_DTYPE_F32, {4, 5});
  desc.x.shape[1] = -1;
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);
  desc.x = dense(HAL_DTYPE_F32, {4, 5});
  desc.header.struct_size = sizeof(desc) - 8;
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);
  desc.header.struct_size = sizeof(desc);
  // Values outside each enum, the negative ones included: a C caller may
  // pass any 32-bit value where the ABI takes an enum.
  for (const int32_t raw : {999, -1, INT32_MIN}) {
    desc.header.kind = static_cast<hal_op_kind_t>(raw);
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    desc.header.kind = HAL_OP_UNARY;
    desc.x.dtype = static_cast<hal_dtype_t>(raw);
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    desc.x.dtype = HAL_DTYPE_F32;
    desc.activation = static_cast<hal_activation_t>(raw);
    HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, &plan),
                     HAL_ERROR_INVALID_ARGUMENT);
    desc.activation = HAL_ACTIVATION_NONE;
  }
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0x80, &plan),
                   HAL_ERROR_INVALID_ARGUMENT);  // unknown flag
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), nullptr, 0, &plan), HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), &desc.header, 0, nullptr),
                   HAL_ERROR_NULL_POINTER);
  HC_REQUIRE(plan == nullptr, std::string("a refused plan was still written"));
}

HALCONFORM_TEST("operators.errors.operands", "counts, NULLs, overlap and bounds are checked", {}) {
  UnaryFixture fixture(ctx);
  const auto x = random_values(ctx.random(), 64, HAL_DTYPE_F32);
  DeviceTensor dx(ctx.device(), fixture.desc.x, x);
  DeviceTensor dout(ctx.device(), fixture.desc.out, std::vector<double>(64, 7.0));
  DeviceTensor small(ctx.device(), dense(HAL_DTYPE_F32, {8}));
  const auto untouched = [&](const char* what) {
    const auto values = dout.download();
    for (double v : values) HC_REQUIRE(v == 7.0, std::string(what) + ": out was written");
  };
  HC_EXPECT_RESULT(try_execute(ctx, fixture.plan, {dx.data()}), HAL_ERROR_INVALID_ARGUMENT);
  untouched("one operand missing");
  HC_EXPECT_RESULT(try_execute(ctx, fixture.plan, {dx.data(), nullptr}), HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(try_execute(ctx, fixture.plan, {dx.data(), dout.data()}, {{1.0, 0, 0}}),
                   HAL_ERROR_INVALID_ARGUMENT);  // a scalar the op does not take
  untouched("an extra scalar");
  // out overlapping x by one element, not exactly it
  HC_EXPECT_RESULT(try_execute(ctx, fixture.plan, {dx.data(), static_cast<float*>(dx.data()) + 1}),
                   HAL_ERROR_INVALID_ARGUMENT);
  // an operand running past its allocation
  HC_EXPECT_RESULT(try_execute(ctx, fixture.plan, {small.data(), dout.data()}),
                   HAL_ERROR_INVALID_ARGUMENT);
  untouched("x past its allocation");
  // host memory is not an operand
  std::vector<float> host(64);
  HC_EXPECT_RESULT(try_execute(ctx, fixture.plan, {host.data(), dout.data()}),
                   HAL_ERROR_INVALID_ARGUMENT);
  untouched("host memory as x");
}

HALCONFORM_TEST("operators.errors.other_device", "a plan runs only on its device's streams",
                {.min_devices = 2}) {
  UnaryFixture fixture(ctx);
  hal_device_t other = ctx.peer_device();
  DeviceTensor dx(other, fixture.desc.x, std::vector<double>(64, 1.0));
  DeviceTensor dout(other, fixture.desc.out);
  hal_stream_t stream = nullptr;
  HC_OK(hal_stream_create(other, 0, &stream));
  void* operands[2] = {dx.data(), dout.data()};
  hal_op_exec_args_t args{};
  args.struct_size = sizeof(args);
  args.operand_count = 2;
  args.operands = operands;
  const hal_result_t result = hal_op_execute(fixture.plan.get(), &args, stream);
  hal_stream_destroy(stream);
  HC_EXPECT_RESULT(result, HAL_ERROR_DEVICE_MISMATCH);
  // the plan's own stream with the other device's memory
  DeviceTensor mine(ctx.device(), fixture.desc.out);
  HC_EXPECT_RESULT(try_execute(ctx, fixture.plan, {dx.data(), mine.data()}),
                   HAL_ERROR_DEVICE_MISMATCH);
}

HALCONFORM_TEST("operators.errors.handles", "destroyed and foreign plan handles", {}) {
  hal_op_plan_t stale = nullptr;
  {
    UnaryFixture fixture(ctx);
    stale = fixture.plan.get();
  }
  hal_op_plan_info_t info{};
  info.struct_size = sizeof(info);
  HC_EXPECT_RESULT(hal_op_plan_get_info(stale, &info), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_op_plan_destroy(stale), HAL_ERROR_DESTROYED_HANDLE);
  HC_EXPECT_RESULT(hal_op_plan_get_info(nullptr, &info), HAL_ERROR_INVALID_HANDLE);
  HC_OK(hal_op_plan_destroy(nullptr));
}

HALCONFORM_TEST("operators.plan.info", "a plan names its implementation and the declines", {}) {
  UnaryFixture fixture(ctx);
  const hal_op_plan_info_t info = fixture.plan.info();
  HC_REQUIRE(info.kind == HAL_OP_UNARY, std::string("kind"));
  HC_REQUIRE(info.operand_count == 2, "operand_count " + std::to_string(info.operand_count));
  HC_REQUIRE(info.implementation[0] != '\0', std::string("no implementation name"));
  ctx.note(std::string("implementation: ") + info.implementation);
}

// hal_op_query_implementations (SPEC.md §11.8, §17.3): the list a plan walks,
// and what each implementation says of the plan's descriptor, are the plan's
// own: the one that accepts is the one that serves it, the ones before it
// declined with the reasons the plan's info lists. Without a descriptor, every
// op kind's list names its implementations and none accepts.
HALCONFORM_TEST("operators.plan.implementations",
                "the implementation list and each one's verdict agree with the plan", {}) {
  UnaryFixture fixture(ctx);
  const hal_op_plan_info_t info = fixture.plan.info();
  hal_op_implementations_info_t list{};
  list.struct_size = sizeof(list);
  HC_OK(hal_op_query_implementations(ctx.device(), HAL_OP_UNARY, &fixture.desc.header, 0, &list));
  HC_REQUIRE(list.kind == HAL_OP_UNARY && list.count >= 1 && list.count <= HAL_OP_MAX_CANDIDATES,
             "kind " + std::to_string(list.kind) + ", count " + std::to_string(list.count));
  std::string declines;
  std::string accepted;
  for (uint32_t i = 0; i < list.count; ++i) {
    const hal_op_candidate_t& candidate = list.candidates[i];
    const std::string name = candidate.name;
    HC_REQUIRE(!name.empty(), "candidate " + std::to_string(i) + " has no name");
    if (!accepted.empty()) {
      HC_REQUIRE(candidate.verdict == HAL_OP_VERDICT_NOT_ASKED ||
                     (candidate.verdict == HAL_OP_VERDICT_DECLINES && candidate.reason[0] != '\0'),
                 name + " after " + accepted + ": verdict " + std::to_string(candidate.verdict));
    } else if (candidate.verdict == HAL_OP_VERDICT_ACCEPTS) {
      accepted = name;
    } else {
      HC_REQUIRE(candidate.verdict == HAL_OP_VERDICT_DECLINES,
                 name + " before any accepts: verdict " + std::to_string(candidate.verdict));
      declines += name + ": " + candidate.reason + "\n";
    }
  }
  HC_REQUIRE(
      accepted == info.implementation,
      "the query accepts '" + accepted + "', the plan is served by '" + info.implementation + "'");
  HC_REQUIRE(declines == info.declines,
             "the query's declines '" + declines + "' are not the plan's '" + info.declines + "'");

  // Without a descriptor: the names, no verdict but the declines known unasked.
  for (const model::OpDescriptor& op : model::op_descriptors()) {
    const auto kind = static_cast<hal_op_kind_t>(op.kind);
    hal_op_implementations_info_t names{};
    names.struct_size = sizeof(names);
    HC_OK(hal_op_query_implementations(ctx.device(), kind, nullptr, 0, &names));
    HC_REQUIRE(names.kind == kind, std::string(op.kind_name) + ": kind");
    for (uint32_t i = 0; i < names.count; ++i) {
      const hal_op_candidate_t& candidate = names.candidates[i];
      const bool declines_with_reason =
          candidate.verdict == HAL_OP_VERDICT_DECLINES && candidate.reason[0] != '\0';
      HC_REQUIRE(candidate.name[0] != '\0' &&
                     (candidate.verdict == HAL_OP_VERDICT_NOT_ASKED || declines_with_reason),
                 std::string(op.kind_name) + ": candidate " + std::to_string(i) + " '" +
                     candidate.name + "' verdict " + std::to_string(candidate.verdict));
    }
  }

  // Refused calls write nothing.
  hal_op_implementations_info_t untouched{};
  untouched.struct_size = sizeof(untouched);
  untouched.count = 77;
  HC_EXPECT_RESULT(
      hal_op_query_implementations(ctx.device(), HAL_OP_UNARY, &fixture.desc.header, 0, nullptr),
      HAL_ERROR_NULL_POINTER);
  HC_EXPECT_RESULT(
      hal_op_query_implementations(nullptr, HAL_OP_UNARY, &fixture.desc.header, 0, &untouched),
      HAL_ERROR_INVALID_HANDLE);
  HC_EXPECT_RESULT(hal_op_query_implementations(ctx.device(), HAL_OP_SOFTMAX, &fixture.desc.header,
                                                0, &untouched),
                   HAL_ERROR_INVALID_ARGUMENT);  // desc->kind is not the kind asked about
  HC_EXPECT_RESULT(hal_op_query_implementations(ctx.device(), static_cast<hal_op_kind_t>(999),
                                                nullptr, 0, &untouched),
                   HAL_ERROR_INVALID_ARGUMENT);
  HC_REQUIRE(untouched.count == 77, std::string("a refused query wrote its info"));
}

// Every op descriptor the headers define (the API model, read from them at
// build time, so a new op is in this test without naming it here): a
// descriptor left zero but for its header, and one with an unknown bit in
// each of its flag fields, are refused with HAL_ERROR_INVALID_ARGUMENT and
// a message, or planned; never a crash, never a plan from an unknown bit.
HALCONFORM_TEST("operators.errors.zero_descriptor",
                "every op's descriptor left zero, or with an unknown flag bit, is refused", {}) {
  for (const model::OpDescriptor& op : model::op_descriptors()) {
    const model::StructType* type = model::find_struct(op.descriptor);
    HC_REQUIRE(type != nullptr, std::string("the API model has no struct ") + op.descriptor);
    // Zero-initialised storage aligned for any field the descriptor holds.
    std::vector<uint64_t> storage((type->size + 7) / 8, 0);
    auto* header = reinterpret_cast<hal_op_header_t*>(storage.data());
    auto reset = [&] {
      std::fill(storage.begin(), storage.end(), 0);
      header->struct_size = type->size;
      header->kind = static_cast<hal_op_kind_t>(op.kind);
    };
    reset();
    hal_op_plan_t plan = nullptr;
    const hal_result_t zero = hal_op_plan_create(ctx.device(), header, 0, &plan);
    if (zero == HAL_SUCCESS) {
      HC_REQUIRE(plan != nullptr, std::string(op.kind_name) + ": HAL_SUCCESS without a plan");
      HC_OK(hal_op_plan_destroy(plan));
      plan = nullptr;
    } else {
      HC_REQUIRE(zero == HAL_ERROR_INVALID_ARGUMENT || zero == HAL_ERROR_UNSUPPORTED,
                 std::string(op.kind_name) + ": a zero descriptor gave " + hal_result_string(zero));
      HC_REQUIRE(plan == nullptr, std::string(op.kind_name) + ": a refused plan was written");
    }
    for (const model::Field& field : type->fields) {
      if (field.kind != model::FieldKind::kFlags || field.size != sizeof(uint32_t)) continue;
      reset();
      const uint32_t unknown = 0x80000000u;
      std::memcpy(reinterpret_cast<uint8_t*>(storage.data()) + field.offset, &unknown,
                  sizeof(unknown));
      HC_EXPECT_RESULT(hal_op_plan_create(ctx.device(), header, 0, &plan),
                       HAL_ERROR_INVALID_ARGUMENT);
      HC_REQUIRE(plan == nullptr, std::string(op.kind_name) + "." + field.name +
                                      ": a plan with an unknown flag bit was written");
    }
  }
}
