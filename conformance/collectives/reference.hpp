// The host reference of the collective tests: seeded inputs that every dtype
// holds exactly (small integers), the expected output of each collective
// computed in double, and the comparison. Independent of the library: its
// own 16-bit float codecs, its own arithmetic.
#pragma once

#include <hal.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace coll_test {

inline const hal_dtype_t kDtypes[] = {HAL_DTYPE_F32, HAL_DTYPE_F16, HAL_DTYPE_BF16, HAL_DTYPE_F64,
                                      HAL_DTYPE_I32, HAL_DTYPE_I64, HAL_DTYPE_I8,   HAL_DTYPE_U8};
inline const hal_reduce_op_t kOps[] = {HAL_REDUCE_SUM, HAL_REDUCE_PROD, HAL_REDUCE_MIN,
                                       HAL_REDUCE_MAX, HAL_REDUCE_AVG};
// 0, 1, odd, and large enough to cross the engines' 16 KiB chunks and the
// small-message threshold for every dtype.
inline const size_t kCounts[] = {0, 1, 7, 40000};

enum class Kind {
  kAllreduce,
  kBroadcast,
  kReduce,
  kAllgather,
  kReduceScatter,
  kAlltoall,
  kSendRecv,
  kAlltoallv
};
inline const Kind kKinds[] = {Kind::kAllreduce, Kind::kBroadcast,     Kind::kReduce,
                              Kind::kAllgather, Kind::kReduceScatter, Kind::kAlltoall,
                              Kind::kSendRecv,  Kind::kAlltoallv};
inline bool reduces(Kind k) {
  return k == Kind::kAllreduce || k == Kind::kReduce || k == Kind::kReduceScatter;
}
inline const char* kind_label(Kind k) {
  const char* names[] = {"allreduce",      "broadcast", "reduce",   "allgather",
                         "reduce_scatter", "alltoall",  "sendrecv", "alltoallv"};
  return names[static_cast<int>(k)];
}

// Enumerator names, for messages in the API's terms (the reference keeps
// its own table: it is independent of the library).
inline const char* dtype_name(hal_dtype_t d) {
  switch (d) {
    case HAL_DTYPE_F32:
      return "HAL_DTYPE_F32";
    case HAL_DTYPE_F16:
      return "HAL_DTYPE_F16";
    case HAL_DTYPE_BF16:
      return "HAL_DTYPE_BF16";
    case HAL_DTYPE_F64:
      return "HAL_DTYPE_F64";
    case HAL_DTYPE_I32:
      return "HAL_DTYPE_I32";
    case HAL_DTYPE_I64:
      return "HAL_DTYPE_I64";
    case HAL_DTYPE_I8:
      return "HAL_DTYPE_I8";
    case HAL_DTYPE_U8:
      return "HAL_DTYPE_U8";
    default:
      return "an unknown dtype";
  }
}
inline const char* op_name(hal_reduce_op_t op) {
  switch (op) {
    case HAL_REDUCE_SUM:
      return "HAL_REDUCE_SUM";
    case HAL_REDUCE_PROD:
      return "HAL_REDUCE_PROD";
    case HAL_REDUCE_MIN:
      return "HAL_REDUCE_MIN";
    case HAL_REDUCE_MAX:
      return "HAL_REDUCE_MAX";
    case HAL_REDUCE_AVG:
      return "HAL_REDUCE_AVG";
    default:
      return "an unknown op";
  }
}

inline size_t elem_size(hal_dtype_t d) {
  return HAL_DTYPE_SIZE(d);
}
inline bool is_float(hal_dtype_t d) {
  return d == HAL_DTYPE_F32 || d == HAL_DTYPE_F16 || d == HAL_DTYPE_BF16 || d == HAL_DTYPE_F64;
}

// binary16 of a value it holds exactly (|v| < 2048 integers here).
inline uint16_t encode_f16(double v) {
  if (v == 0) return 0;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  int e = 0;
  const double f = std::frexp(std::fabs(v), &e);  // |v| = f * 2^e, f in [0.5, 1)
  const auto mantissa = static_cast<uint16_t>(std::lround((f * 2 - 1) * 1024));
  return static_cast<uint16_t>(sign | ((e - 1 + 15) << 10) | mantissa);
}
inline double decode_f16(uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -mag : mag;
}

inline void store(hal_dtype_t d, void* base, size_t i, double v) {
  auto* p = static_cast<uint8_t*>(base) + i * elem_size(d);
  switch (d) {
    case HAL_DTYPE_F32: {
      const float x = static_cast<float>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case HAL_DTYPE_F64:
      std::memcpy(p, &v, 8);
      break;
    case HAL_DTYPE_F16: {
      const uint16_t x = encode_f16(v);
      std::memcpy(p, &x, 2);
      break;
    }
    case HAL_DTYPE_BF16: {
      const float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      const auto x = static_cast<uint16_t>(bits >> 16);  // exact for small integers
      std::memcpy(p, &x, 2);
      break;
    }
    case HAL_DTYPE_I32: {
      const auto x = static_cast<int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case HAL_DTYPE_I64: {
      const auto x = static_cast<int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case HAL_DTYPE_I8: {
      const auto x = static_cast<int8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case HAL_DTYPE_U8: {
      const auto x = static_cast<uint8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    default:
      break;
  }
}

inline double load(hal_dtype_t d, const void* base, size_t i) {
  const auto* p = static_cast<const uint8_t*>(base) + i * elem_size(d);
  switch (d) {
    case HAL_DTYPE_F32: {
      float x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case HAL_DTYPE_F64: {
      double x;
      std::memcpy(&x, p, 8);
      return x;
    }
    case HAL_DTYPE_F16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      return decode_f16(x);
    }
    case HAL_DTYPE_BF16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      const uint32_t bits = static_cast<uint32_t>(x) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case HAL_DTYPE_I32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case HAL_DTYPE_I64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
    case HAL_DTYPE_I8: {
      int8_t x;
      std::memcpy(&x, p, 1);
      return x;
    }
    case HAL_DTYPE_U8: {
      uint8_t x;
      std::memcpy(&x, p, 1);
      return x;
    }
    default:
      return 0;
  }
}

// Seeded inputs: rank r's |elements| values, small integers (unsigned for u8)
// so products of 4 ranks and sums stay exact in every dtype.
inline std::vector<double> inputs(uint64_t seed, uint32_t rank, size_t elements, hal_dtype_t d) {
  std::mt19937_64 rng(seed * 1000003u + rank);
  std::uniform_int_distribution<int> pick(d == HAL_DTYPE_U8 ? 0 : -3, 3);
  std::vector<double> v(elements);
  for (double& x : v) x = pick(rng);
  return v;
}

inline double combine(hal_reduce_op_t op, double a, double b) {
  switch (op) {
    case HAL_REDUCE_PROD:
      return a * b;
    case HAL_REDUCE_MIN:
      return std::min(a, b);
    case HAL_REDUCE_MAX:
      return std::max(a, b);
    default:
      return a + b;
  }
}

// op over ranks of |values[r][index(r)]|, AVG finished like the dtype does.
template <class Index>
double reduce_over(const std::vector<std::vector<double>>& values, hal_reduce_op_t op,
                   hal_dtype_t d, Index index) {
  double acc = values[0][index(0)];
  for (size_t r = 1; r < values.size(); ++r) acc = combine(op, acc, values[r][index(r)]);
  if (op == HAL_REDUCE_AVG) {
    acc /= static_cast<double>(values.size());
    if (!is_float(d)) acc = std::trunc(acc);
  }
  return acc;
}

inline bool close_enough(hal_dtype_t d, double got, double want) {
  if (!is_float(d)) return got == want;
  const double tolerance = d == HAL_DTYPE_F16 || d == HAL_DTYPE_BF16 ? 1e-2 : 1e-6;
  return std::fabs(got - want) <= tolerance * std::max(1.0, std::fabs(want));
}

// The uneven traffic of an alltoallv case of |count|: rank |from| sends
// uneven_count(...) elements to rank |to|, between 0 and 2·count, zeros
// included, and the last of several ranks sends nothing at all.
inline size_t uneven_count(size_t count, uint32_t from, uint32_t to, uint32_t n) {
  if (count == 0 || (n > 1 && from == n - 1)) return 0;
  return count * (from + 2 * to + 1) % (2 * count + 1);
}

// One rank's alltoallv arrays: sends packed; each received block followed by
// a one-element gap, which the call must leave as it was.
struct UnevenLayout {
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;
  size_t send_total = 0;
  size_t recv_extent = 0;
};
inline UnevenLayout uneven_layout(size_t count, uint32_t rank, uint32_t n) {
  UnevenLayout l;
  for (uint32_t r = 0; r < n; ++r) {
    l.send_counts.push_back(uneven_count(count, rank, r, n));
    l.send_displs.push_back(l.send_total);
    l.send_total += l.send_counts.back();
    l.recv_counts.push_back(uneven_count(count, r, rank, n));
    l.recv_displs.push_back(l.recv_extent);
    l.recv_extent += l.recv_counts.back() + 1;
  }
  return l;
}

// The element counts of a call's send and receive buffers on any rank.
struct Shape {
  size_t send = 0;
  size_t recv = 0;
};
inline Shape shape_of(Kind k, size_t count, uint32_t n) {
  switch (k) {
    case Kind::kAlltoallv: {
      Shape widest;
      for (uint32_t r = 0; r < n; ++r) {
        const UnevenLayout l = uneven_layout(count, r, n);
        widest.send = std::max(widest.send, l.send_total);
        widest.recv = std::max(widest.recv, l.recv_extent);
      }
      return widest;
    }
    case Kind::kAllgather:
      return {count, count * n};
    case Kind::kReduceScatter:
      return {count * n, count};
    case Kind::kAlltoall:
      return {count * n, count * n};
    default:
      return {count, count};
  }
}

// The byte every receive buffer is filled with before a call.
constexpr uint8_t kUntouchedByte = 0xA5;

// Where element |e| of rank |rank|'s receive buffer comes from, for a
// message: the peer and the block it sends, and the element in the block.
inline std::string element_origin(Kind k, size_t count, uint32_t rank, uint32_t n, size_t e) {
  auto from = [&](uint32_t peer, size_t block, size_t i) {
    return " (from rank " + std::to_string(peer) + ", block " + std::to_string(block) +
           ", element " + std::to_string(i) + " of the block)";
  };
  switch (k) {
    case Kind::kAllgather:
      return count == 0 ? "" : from(static_cast<uint32_t>(e / count), e / count, e % count);
    case Kind::kAlltoall:
      return count == 0 ? "" : from(static_cast<uint32_t>(e / count), rank, e % count);
    case Kind::kReduceScatter:
      return " (block " + std::to_string(rank) + " of every rank, element " + std::to_string(e) +
             ")";
    case Kind::kSendRecv:
      return " (sent by rank " + std::to_string((rank + n - 1) % n) + ")";
    case Kind::kAlltoallv: {
      const UnevenLayout mine = uneven_layout(count, rank, n);
      for (uint32_t peer = 0; peer < n; ++peer) {
        if (e >= mine.recv_displs[peer] && e < mine.recv_displs[peer] + mine.recv_counts[peer]) {
          return from(peer, rank, e - mine.recv_displs[peer]);
        }
      }
      return " (a gap between received blocks, which the call must leave untouched)";
    }
    default:
      return "";
  }
}

// What rank |rank| must hold after the call, or empty when its output is unspecified.
inline std::vector<double> expected(Kind k, hal_reduce_op_t op, hal_dtype_t d, size_t count,
                                    uint32_t root, uint32_t rank,
                                    const std::vector<std::vector<double>>& in) {
  const auto n = static_cast<uint32_t>(in.size());
  std::vector<double> out(shape_of(k, count, n).recv);
  if (k == Kind::kAlltoallv) {
    // Gaps and the slack past this rank's extent keep the fill.
    const uint8_t fill[8] = {kUntouchedByte, kUntouchedByte, kUntouchedByte, kUntouchedByte,
                             kUntouchedByte, kUntouchedByte, kUntouchedByte, kUntouchedByte};
    std::fill(out.begin(), out.end(), load(d, fill, 0));
    const UnevenLayout mine = uneven_layout(count, rank, n);
    for (uint32_t from = 0; from < n; ++from) {
      const UnevenLayout theirs = uneven_layout(count, from, n);
      for (size_t i = 0; i < mine.recv_counts[from]; ++i) {
        out[mine.recv_displs[from] + i] = in[from][theirs.send_displs[rank] + i];
      }
    }
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    switch (k) {
      case Kind::kAllreduce:
      case Kind::kReduce:
        out[i] = reduce_over(in, op, d, [&](size_t) { return i; });
        break;
      case Kind::kBroadcast:
        out[i] = in[root][i];
        break;
      case Kind::kAllgather:
        out[i] = in[i / count][i % count];
        break;
      case Kind::kReduceScatter:
        out[i] = reduce_over(in, op, d, [&](size_t) { return rank * count + i; });
        break;
      case Kind::kAlltoall:
        out[i] = in[i / count][rank * count + i % count];
        break;
      case Kind::kSendRecv:
        out[i] = in[(rank + n - 1) % n][i];
        break;
      case Kind::kAlltoallv:
        break;  // above
    }
  }
  if (k == Kind::kReduce && rank != root) out.clear();
  return out;
}

// Enqueues rank |rank|'s part of the case. |send| and |recv| are device buffers.
inline hal_result_t issue(Kind k, const void* send, void* recv, size_t count, hal_dtype_t d,
                          hal_reduce_op_t op, uint32_t root, uint32_t rank, uint32_t n,
                          hal_comm_t comm, hal_stream_t stream) {
  switch (k) {
    case Kind::kAllreduce:
      return hal_allreduce(send, recv, count, d, op, comm, stream);
    case Kind::kBroadcast:
      return hal_broadcast(send, recv, count, d, root, comm, stream);
    case Kind::kReduce:
      return hal_reduce(send, recv, count, d, op, root, comm, stream);
    case Kind::kAllgather:
      return hal_allgather(send, recv, count, d, comm, stream);
    case Kind::kReduceScatter:
      return hal_reduce_scatter(send, recv, count, d, op, comm, stream);
    case Kind::kAlltoall:
      return hal_alltoall(send, recv, count, d, comm, stream);
    case Kind::kSendRecv: {
      hal_group_start();
      hal_result_t r = hal_send(send, count, d, (rank + 1) % n, comm, stream);
      const hal_result_t r2 = hal_recv(recv, count, d, (rank + n - 1) % n, comm, stream);
      const hal_result_t r3 = hal_group_end();
      if (r == HAL_SUCCESS) r = r2;
      return r == HAL_SUCCESS ? r3 : r;
    }
    case Kind::kAlltoallv: {
      const UnevenLayout l = uneven_layout(count, rank, n);
      return hal_alltoallv(send, l.send_counts.data(), l.send_displs.data(), recv,
                           l.recv_counts.data(), l.recv_displs.data(), d, comm, stream);
    }
  }
  return HAL_ERROR_INVALID_ARGUMENT;
}

}  // namespace coll_test
