// A tiny generation server over HAL's paged KV cache (SPEC.md §17.6.11):
// continuous batching of a one-layer, random-weight transformer. Requests
// wait in a queue; between steps the server admits as many as the batch and
// the free cache blocks allow (each is prefilled on its own, its first token
// timed), runs one decode step for every active request (append the new keys
// and values, RoPE on the way in, then paged attention), and retires those
// that are done, giving their blocks back. It reports tokens/s and time to
// first token (after a warm-up request, so kernel compilation is not
// counted), then checks itself: the tokens each request got in the mixed
// batch are the ones it gets served alone (blocks reused across requests,
// shuffled block tables and batch composition change nothing), and the
// status word of the paged ops stayed 0.
//
//   serve [--requests N] [--max-batch B] [--seed S]
// Runs on the first device of HAL_PLUGINS.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "hal.h"

namespace {

// The model: vocab, width, heads (GQA), one layer.
constexpr int64_t kVocab = 256, kHeads = 8, kKvHeads = 2, kHeadDim = 32;
constexpr int64_t kWidth = kHeads * kHeadDim;
constexpr int64_t kKvWidth = kKvHeads * kHeadDim;
// The cache: blocks of 16 tokens, enough for the longest request.
constexpr int64_t kBlockSize = 16, kNumBlocks = 96, kMaxBlocksPerSeq = 8;
constexpr int64_t kMaxTokens = 64;  // rows of one step: a prompt, or one per active request

[[noreturn]] void fail(const char* what, hal_result_t result) {
  std::fprintf(stderr, "serve: %s failed (%d): %s\n", what, static_cast<int>(result),
               hal_error_last_message());
  std::exit(1);
}
void check(hal_result_t result, const char* what) {
  if (result != HAL_SUCCESS) fail(what, result);
}

hal_tensor_desc_t dense(hal_dtype_t dtype, std::vector<int64_t> shape) {
  hal_tensor_desc_t t{};
  hal_tensor_desc_contiguous(&t, dtype, static_cast<uint32_t>(shape.size()), shape.data());
  return t;
}

struct Request {
  int id = 0;
  std::vector<int32_t> prompt;
  int max_new = 0;
  std::vector<int32_t> generated;
  std::vector<int32_t> blocks;  // its cache blocks, in position order
  double arrival = 0, first_token = -1;
  int64_t length() const {  // tokens in the cache
    return static_cast<int64_t>(prompt.size() + generated.size()) - (generated.empty() ? 0 : 1);
  }
};

class Server {
 public:
  Server(hal_device_t device, uint64_t seed) : device_(device) {
    check(hal_stream_create(device_, 0, &stream_), "hal_stream_create");
    std::mt19937_64 random(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const auto weights = [&](int64_t rows, int64_t cols) {
      std::vector<float> w(static_cast<size_t>(rows * cols));
      const float scale = 1.0f / std::sqrt(static_cast<float>(rows));
      for (float& x : w) x = normal(random) * scale;
      return upload(w);
    };
    embedding_ = weights(kVocab, kWidth);
    wq_ = weights(kWidth, kWidth);
    wk_ = weights(kWidth, kKvWidth);
    wv_ = weights(kWidth, kKvWidth);
    wo_ = weights(kWidth, kWidth);
    k_cache_ = buffer(kNumBlocks * kBlockSize * kKvWidth * 2);  // bf16
    v_cache_ = buffer(kNumBlocks * kBlockSize * kKvWidth * 2);
    ids_ = buffer(kMaxTokens * 4);
    positions_ = buffer(kMaxTokens * 4);
    x_ = buffer(kMaxTokens * kWidth * 4);
    q_ = buffer(kMaxTokens * kWidth * 4);
    k_ = buffer(kMaxTokens * kKvWidth * 4);
    v_ = buffer(kMaxTokens * kKvWidth * 4);
    o_ = buffer(kMaxTokens * kWidth * 4);
    y_ = buffer(kMaxTokens * kWidth * 4);
    logits_ = buffer(kMaxTokens * kVocab * 4);
    lse_ = buffer(kMaxTokens * kHeads * 4);
    table_ = buffer(kMaxTokens * kMaxBlocksPerSeq * 4);
    lens_ = buffer(kMaxTokens * 4);
    status_ = buffer(4);
    check(hal_memset_async(status_, 0, 4, stream_), "hal_memset_async");
    // Free blocks handed out in a shuffled order, so tables are never the
    // identity.
    for (int32_t b = 0; b < kNumBlocks; ++b) free_blocks_.push_back(b);
    std::shuffle(free_blocks_.begin(), free_blocks_.end(), random);
  }
  ~Server() {
    for (auto& [key, plan] : plans_) hal_op_plan_destroy(plan.plan);
    for (void* p : buffers_) hal_mem_free(p);
    hal_stream_destroy(stream_);
  }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Serves |requests| with at most |max_batch| active at once; every request
  // arrives at the start.
  void serve(std::vector<Request>& requests, size_t max_batch) {
    const auto start = std::chrono::steady_clock::now();
    const auto now = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    std::vector<Request*> queue, active;
    for (Request& r : requests) queue.push_back(&r);
    size_t next = 0;
    while (next < queue.size() || !active.empty()) {
      // Admit: a free batch slot and the blocks the whole request will need.
      while (next < queue.size() && active.size() < max_batch) {
        Request& r = *queue[next];
        const auto need = static_cast<size_t>(
            (static_cast<int64_t>(r.prompt.size()) + r.max_new + kBlockSize - 1) / kBlockSize);
        if (need > free_blocks_.size()) break;
        r.blocks.assign(free_blocks_.end() - static_cast<std::ptrdiff_t>(need), free_blocks_.end());
        free_blocks_.resize(free_blocks_.size() - need);
        ++next;
        step({&r}, static_cast<int64_t>(r.prompt.size()));  // prefill: the first token
        r.first_token = now();
        if (static_cast<int>(r.generated.size()) < r.max_new) {
          active.push_back(&r);
        } else {
          retire(r);
        }
      }
      if (active.empty()) continue;
      step(active, 1);
      // Retire: the finished ones give their blocks back.
      std::vector<Request*> still;
      for (Request* r : active) {
        if (static_cast<int>(r->generated.size()) < r->max_new) {
          still.push_back(r);
        } else {
          retire(*r);
        }
      }
      active = std::move(still);
    }
    check(hal_stream_synchronize(stream_), "hal_stream_synchronize");
    seconds_ = now();
  }

  double seconds() const { return seconds_; }
  int32_t status() {
    int32_t word = 0;
    check(hal_memcpy_async(&word, status_, 4, stream_), "hal_memcpy_async");
    check(hal_stream_synchronize(stream_), "hal_stream_synchronize");
    return word;
  }

 private:
  struct Plan {
    hal_op_plan_t plan = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
  };

  void* buffer(int64_t bytes) {
    void* p = nullptr;
    check(hal_mem_alloc(device_, HAL_MEMORY_DEVICE, static_cast<size_t>(bytes), 0, &p),
          "hal_mem_alloc");
    buffers_.push_back(p);
    return p;
  }
  template <typename T>
  void* upload(const std::vector<T>& host) {
    void* p = buffer(static_cast<int64_t>(host.size() * sizeof(T)));
    put(p, host);
    return p;
  }
  template <typename T>
  void put(void* device, const std::vector<T>& host) {
    check(hal_memcpy_async(device, host.data(), host.size() * sizeof(T), stream_),
          "hal_memcpy_async");
    check(hal_stream_synchronize(stream_), "hal_stream_synchronize");
  }

  // Runs |desc| (planned once per shape: |key|) on the stream.
  void run(const std::string& key, const hal_op_header_t* desc, std::vector<void*> operands) {
    Plan& plan = plans_[key];
    if (plan.plan == nullptr) {
      check(hal_op_plan_create(device_, desc, 0, &plan.plan), key.c_str());
      hal_op_plan_info_t info{};
      info.struct_size = sizeof info;
      check(hal_op_plan_get_info(plan.plan, &info), "hal_op_plan_get_info");
      plan.workspace_bytes = info.workspace_bytes;
      if (plan.workspace_bytes > 0)
        plan.workspace = buffer(static_cast<int64_t>(info.workspace_bytes));
    }
    hal_op_exec_args_t args{};
    args.struct_size = sizeof args;
    args.operand_count = static_cast<uint32_t>(operands.size());
    args.operands = operands.data();
    args.workspace = plan.workspace;
    args.workspace_bytes = plan.workspace_bytes;
    check(hal_op_execute(plan.plan, &args, stream_), key.c_str());
  }

  // d [rows, n] = a [rows, k] @ b (b [k, n], or [n, k] with transpose_b) +
  // (residual ? c : 0).
  void matmul(const char* name, int64_t rows, int64_t k, int64_t n, void* a, void* b, void* d,
              bool transpose_b = false, void* residual = nullptr) {
    hal_op_matmul_desc_t desc{};
    desc.header.struct_size = sizeof desc;
    desc.header.kind = HAL_OP_MATMUL;
    desc.flags = transpose_b ? HAL_MATMUL_TRANSPOSE_B : 0;
    desc.activation = HAL_ACTIVATION_NONE;
    desc.alpha = 1.0f;
    desc.beta = residual != nullptr ? 1.0f : 0.0f;
    desc.a = dense(HAL_DTYPE_F32, {rows, k});
    desc.b = transpose_b ? dense(HAL_DTYPE_F32, {n, k}) : dense(HAL_DTYPE_F32, {k, n});
    desc.d = dense(HAL_DTYPE_F32, {rows, n});
    if (residual != nullptr) desc.c = desc.d;
    run(std::string(name) + "/" + std::to_string(rows), &desc.header,
        {a, b, residual, d, nullptr, nullptr});
  }

  // One forward step: |s| new tokens for each of |batch| (a prompt when s >
  // 1, else each one's last token), then the next token of each.
  void step(const std::vector<Request*>& batch, int64_t s) {
    const auto b_count = static_cast<int64_t>(batch.size());
    const int64_t rows = b_count * s;
    std::vector<int32_t> ids, positions, table(static_cast<size_t>(b_count * kMaxBlocksPerSeq), -1),
        before, after;
    for (int64_t b = 0; b < b_count; ++b) {
      const Request& r = *batch[static_cast<size_t>(b)];
      const int64_t start = s > 1 ? 0 : r.length();
      for (int64_t t = 0; t < s; ++t) {
        ids.push_back(s > 1 ? r.prompt[static_cast<size_t>(t)] : r.generated.back());
        positions.push_back(static_cast<int32_t>(start + t));
      }
      std::copy(r.blocks.begin(), r.blocks.end(), table.begin() + b * kMaxBlocksPerSeq);
      before.push_back(static_cast<int32_t>(start));
      after.push_back(static_cast<int32_t>(start + s));
    }
    put(ids_, ids);
    put(positions_, positions);
    put(table_, table);

    hal_op_embedding_desc_t embed{};
    embed.header.struct_size = sizeof embed;
    embed.header.kind = HAL_OP_EMBEDDING;
    embed.ids = dense(HAL_DTYPE_I32, {rows});
    embed.table = dense(HAL_DTYPE_F32, {kVocab, kWidth});
    embed.out = dense(HAL_DTYPE_F32, {rows, kWidth});
    run("embedding/" + std::to_string(rows), &embed.header, {ids_, embedding_, x_});
    matmul("q", rows, kWidth, kWidth, x_, wq_, q_);
    matmul("k", rows, kWidth, kKvWidth, x_, wk_, k_);
    matmul("v", rows, kWidth, kKvWidth, x_, wv_, v_);

    const std::string shape = std::to_string(b_count) + "x" + std::to_string(s);
    hal_op_rope_desc_t rope{};
    rope.header.struct_size = sizeof rope;
    rope.header.kind = HAL_OP_ROPE;
    rope.rotary_dim = kHeadDim;
    rope.has_positions = 1;
    rope.base = 10000.0f;
    rope.x = dense(HAL_DTYPE_F32, {b_count, s, kHeads, kHeadDim});
    rope.positions = dense(HAL_DTYPE_I32, {b_count, s});
    rope.out = rope.x;
    run("rope/" + shape, &rope.header, {q_, positions_, q_});

    // The keys rotated as the queries are, on their way into the cache.
    put(lens_, before);
    hal_op_paged_kv_append_desc_t append{};
    append.header.struct_size = sizeof append;
    append.header.kind = HAL_OP_PAGED_KV_APPEND;
    append.rope_dim = kHeadDim;
    append.rope_base = 10000.0f;
    append.k_new = dense(HAL_DTYPE_F32, {b_count, s, kKvHeads, kHeadDim});
    append.v_new = append.k_new;
    append.block_table = dense(HAL_DTYPE_I32, {b_count, kMaxBlocksPerSeq});
    append.seq_lens = dense(HAL_DTYPE_I32, {b_count});
    append.k_cache = dense(HAL_DTYPE_BF16, {kNumBlocks, kBlockSize, kKvHeads, kHeadDim});
    append.v_cache = append.k_cache;
    run("append/" + shape, &append.header, {k_, v_, table_, lens_, k_cache_, v_cache_, status_});

    put(lens_, after);
    hal_op_paged_attention_desc_t attention{};
    attention.header.struct_size = sizeof attention;
    attention.header.kind = HAL_OP_PAGED_ATTENTION;
    attention.causal = 1;
    attention.q = dense(HAL_DTYPE_F32, {b_count, s, kHeads, kHeadDim});
    attention.k_cache = append.k_cache;
    attention.v_cache = append.v_cache;
    attention.block_table = append.block_table;
    attention.seq_lens = append.seq_lens;
    attention.out = attention.q;
    attention.lse = dense(HAL_DTYPE_F32, {b_count, kHeads, s});
    run("attention/" + shape, &attention.header,
        {q_, k_cache_, v_cache_, table_, lens_, o_, lse_, status_});

    matmul("o", rows, kWidth, kWidth, o_, wo_, y_, false, x_);              // y = o Wo + x
    matmul("logits", rows, kWidth, kVocab, y_, embedding_, logits_, true);  // tied embedding

    std::vector<float> logits(static_cast<size_t>(rows * kVocab));
    check(hal_memcpy_async(logits.data(), logits_, logits.size() * 4, stream_), "hal_memcpy_async");
    check(hal_stream_synchronize(stream_), "hal_stream_synchronize");
    for (int64_t b = 0; b < b_count; ++b) {  // greedy: the last row's argmax
      const float* row = logits.data() + (b * s + s - 1) * kVocab;
      batch[static_cast<size_t>(b)]->generated.push_back(
          static_cast<int32_t>(std::max_element(row, row + kVocab) - row));
    }
  }

  void retire(Request& r) {
    free_blocks_.insert(free_blocks_.end(), r.blocks.begin(), r.blocks.end());
    r.blocks.clear();
  }

  hal_device_t device_;
  hal_stream_t stream_ = nullptr;
  std::vector<void*> buffers_;
  std::map<std::string, Plan> plans_;
  std::vector<int32_t> free_blocks_;
  void *embedding_, *wq_, *wk_, *wv_, *wo_, *k_cache_, *v_cache_;
  void *ids_, *positions_, *x_, *q_, *k_, *v_, *o_, *y_, *logits_, *lse_, *table_, *lens_, *status_;
  double seconds_ = 0;
};

std::vector<Request> make_requests(int count, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int> prompt_len(4, 40), new_tokens(4, 48), token(0, kVocab - 1);
  std::vector<Request> requests(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    Request& r = requests[static_cast<size_t>(i)];
    r.id = i;
    r.prompt.resize(static_cast<size_t>(prompt_len(random)));
    for (int32_t& t : r.prompt) t = token(random);
    r.max_new = new_tokens(random);
  }
  return requests;
}

}  // namespace

int main(int argc, char** argv) {
  int count = 24;
  size_t max_batch = 8;
  uint64_t seed = 38;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--requests") == 0) count = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--max-batch") == 0)
      max_batch = static_cast<size_t>(std::clamp(std::atoi(argv[i + 1]), 1, 64));
    if (std::strcmp(argv[i], "--seed") == 0) seed = std::strtoull(argv[i + 1], nullptr, 10);
  }
  check(hal_init(nullptr), "hal_init");
  hal_device_t device = nullptr;
  check(hal_device_get(0, &device), "hal_device_get");
  int failures = 0;
  {
    Server server(device, seed);
    // A warm-up request first: a device without its own implementation of
    // an op compiles the portable kernels at the first plan (seconds for a
    // C++ compiler), which is no part of serving.
    std::vector<Request> warm_up = make_requests(1, seed + 1);
    server.serve(warm_up, 1);
    std::vector<Request> requests = make_requests(count, seed);
    server.serve(requests, max_batch);
    int64_t tokens = 0;
    double ttft_sum = 0, ttft_max = 0;
    for (const Request& r : requests) {
      tokens += static_cast<int64_t>(r.generated.size());
      ttft_sum += r.first_token;
      ttft_max = std::max(ttft_max, r.first_token);
    }
    std::printf(
        "serve: %d requests, batch up to %zu, %lld tokens in %.3f s: %.1f tokens/s; "
        "time to first token mean %.1f ms, max %.1f ms\n",
        count, max_batch, static_cast<long long>(tokens), server.seconds(),
        static_cast<double>(tokens) / server.seconds(), 1e3 * ttft_sum / count, 1e3 * ttft_max);
    if (server.status() != 0) {
      std::printf("serve: the status word is %d\n", server.status());
      ++failures;
    }
    // Each of the first and last requests alone, on a fresh server.
    for (int id : {0, count - 1}) {
      Server alone_server(device, seed);
      std::vector<Request> alone = make_requests(count, seed);
      std::vector<Request> one{alone[static_cast<size_t>(id)]};
      alone_server.serve(one, 1);
      const bool same = one[0].generated == requests[static_cast<size_t>(id)].generated;
      std::printf("serve: request %d batched == alone: %s\n", id, same ? "yes" : "NO");
      failures += same ? 0 : 1;
    }
  }
  hal_shutdown();
  std::printf("serve: %s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
