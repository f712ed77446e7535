#include "hal_ops/tensor.hpp"

#include "hal_util/names.hpp"

#include <algorithm>
#include <array>
#include <limits>

namespace hal::ops {

std::string describe_tensor(const hal_tensor_desc_t& tensor) {
  std::string text = hal::util::dtype_name(tensor.dtype);
  const uint32_t rank = std::min<uint32_t>(tensor.rank, HAL_TENSOR_MAX_RANK);
  text += '[';
  for (uint32_t d = 0; d < rank; ++d) {
    if (d != 0) text += ',';
    text += std::to_string(tensor.shape[d]);
  }
  text += "]{";
  for (uint32_t d = 0; d < rank; ++d) {
    if (d != 0) text += ',';
    text += std::to_string(tensor.strides[d]);
  }
  text += '}';
  return text;
}

std::string describe_dtypes(DtypeSet dtypes) {
  std::string text;
  for (uint32_t d = 0; d < HAL_DTYPE_COUNT; ++d) {
    if ((dtypes & (1u << d)) == 0) continue;
    if (!text.empty()) text += ", ";
    text += hal::util::dtype_name(static_cast<hal_dtype_t>(d));
  }
  return text;
}

int64_t element_count(const hal_tensor_desc_t& tensor) {
  int64_t count = 1;
  for (uint32_t d = 0; d < tensor.rank && d < HAL_TENSOR_MAX_RANK; ++d) count *= tensor.shape[d];
  return count;
}

bool is_empty(const hal_tensor_desc_t& tensor) {
  return element_count(tensor) == 0;
}

int64_t last_offset(const hal_tensor_desc_t& tensor) {
  if (is_empty(tensor)) return 0;
  int64_t offset = 0;
  for (uint32_t d = 0; d < tensor.rank; ++d) offset += (tensor.shape[d] - 1) * tensor.strides[d];
  return offset;
}

uint64_t extent_bytes(const hal_tensor_desc_t& tensor) {
  if (is_empty(tensor)) return 0;
  return static_cast<uint64_t>(last_offset(tensor) + 1) * HAL_DTYPE_SIZE(tensor.dtype);
}

bool is_contiguous(const hal_tensor_desc_t& tensor) {
  int64_t expected = 1;
  for (uint32_t d = tensor.rank; d-- > 0;) {
    if (tensor.shape[d] != 1 && tensor.strides[d] != expected) return false;
    expected *= tensor.shape[d];
  }
  return true;
}

bool is_last_dim_contiguous(const hal_tensor_desc_t& tensor) {
  return tensor.rank == 0 || tensor.shape[tensor.rank - 1] <= 1 ||
         tensor.strides[tensor.rank - 1] == 1;
}

bool is_non_overlapping(const hal_tensor_desc_t& tensor) {
  if (is_empty(tensor)) return true;
  // Sorted by stride, each dimension must step past everything the smaller
  // ones reach: a sufficient test, exact for every permuted dense layout.
  std::array<uint32_t, HAL_TENSOR_MAX_RANK> order{};
  uint32_t count = 0;
  for (uint32_t d = 0; d < tensor.rank; ++d) {
    if (tensor.shape[d] > 1) order[count++] = d;
  }
  // An insertion sort: at most 8 dimensions (std::sort trips GCC 12's
  // -Warray-bounds at -O3 on the fixed-size array).
  for (uint32_t i = 1; i < count; ++i) {
    const uint32_t d = order[i];
    uint32_t j = i;
    for (; j > 0 && tensor.strides[order[j - 1]] > tensor.strides[d]; --j) order[j] = order[j - 1];
    order[j] = d;
  }
  int64_t reach = 0;  // the largest offset the smaller dimensions reach
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t d = order[i];
    if (tensor.strides[d] <= reach) return false;
    reach += (tensor.shape[d] - 1) * tensor.strides[d];
  }
  return true;
}

bool same_shape(const hal_tensor_desc_t& a, const hal_tensor_desc_t& b) {
  if (a.rank != b.rank) return false;
  for (uint32_t d = 0; d < a.rank && d < HAL_TENSOR_MAX_RANK; ++d) {
    if (a.shape[d] != b.shape[d]) return false;
  }
  return true;
}

bool same_layout(const hal_tensor_desc_t& a, const hal_tensor_desc_t& b) {
  if (!same_shape(a, b) || a.dtype != b.dtype) return false;
  for (uint32_t d = 0; d < a.rank; ++d) {
    if (a.shape[d] > 1 && a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

std::string check_tensor(const char* name, const hal_tensor_desc_t& tensor, DtypeSet allowed,
                         uint32_t min_rank, uint32_t max_rank) {
  if (tensor.rank > HAL_TENSOR_MAX_RANK) {
    return std::string(name) + " has rank " + std::to_string(tensor.rank) + ", above " +
           std::to_string(HAL_TENSOR_MAX_RANK);
  }
  if (static_cast<uint32_t>(tensor.dtype) >= HAL_DTYPE_COUNT ||
      (allowed & dtype_bit(tensor.dtype)) == 0) {
    return std::string(name) + " has dtype " + hal::util::dtype_name(tensor.dtype) +
           "; this op takes " + describe_dtypes(allowed);
  }
  if (tensor.rank < min_rank || tensor.rank > max_rank) {
    return std::string(name) + " has rank " + std::to_string(tensor.rank) + "; this op takes " +
           (min_rank == max_rank ? std::to_string(min_rank)
                                 : std::to_string(min_rank) + ".." + std::to_string(max_rank));
  }
  // Offsets must fit in int64 bytes: bound each term by 2^62 / 8.
  constexpr int64_t kLimit = int64_t{1} << 58;
  int64_t reach = 0;
  int64_t count = 1;
  for (uint32_t d = 0; d < tensor.rank; ++d) {
    if (tensor.shape[d] < 0 || tensor.strides[d] < 0) {
      return std::string(name) + " dimension " + std::to_string(d) + " has shape " +
             std::to_string(tensor.shape[d]) + " and stride " + std::to_string(tensor.strides[d]) +
             "; both must be >= 0";
    }
    if (tensor.shape[d] > kLimit || tensor.strides[d] > kLimit ||
        (tensor.shape[d] > 0 && count > kLimit / tensor.shape[d])) {
      return std::string(name) + " " + describe_tensor(tensor) + " is too large to address";
    }
    count *= tensor.shape[d];
    if (tensor.shape[d] > 0) {
      const int64_t term = tensor.strides[d] == 0 ? 0 : (tensor.shape[d] - 1);
      if (term > 0 && tensor.strides[d] > (kLimit - reach) / term) {
        return std::string(name) + " " + describe_tensor(tensor) + " is too large to address";
      }
      reach += term * tensor.strides[d];
    }
  }
  return {};
}

std::string check_output(const char* name, const hal_tensor_desc_t& tensor, DtypeSet allowed,
                         uint32_t min_rank, uint32_t max_rank) {
  std::string problem = check_tensor(name, tensor, allowed, min_rank, max_rank);
  if (problem.empty() && !is_non_overlapping(tensor)) {
    problem = std::string(name) + " " + describe_tensor(tensor) +
              " reaches one element from two indices (a stride 0 or overlapping strides); an "
              "output must not";
  }
  return problem;
}

std::string check_shape(const char* name, const hal_tensor_desc_t& tensor,
                        std::initializer_list<int64_t> shape) {
  bool same = tensor.rank == shape.size();
  uint32_t d = 0;
  for (int64_t extent : shape) {
    if (!same) break;
    same = tensor.shape[d++] == extent;
  }
  if (same) return {};
  std::string wanted = "[";
  d = 0;
  for (int64_t extent : shape) {
    if (d++ != 0) wanted += ',';
    wanted += std::to_string(extent);
  }
  return std::string(name) + " is " + describe_tensor(tensor) + "; the op needs shape " + wanted +
         "]";
}

std::string check_same_shape(const char* name, const hal_tensor_desc_t& tensor,
                             const char* other_name, const hal_tensor_desc_t& other) {
  if (same_shape(tensor, other)) return {};
  return std::string(name) + " " + describe_tensor(tensor) + " must have the shape of " +
         other_name + " " + describe_tensor(other);
}

std::string check_broadcast(const char* name, const hal_tensor_desc_t& tensor,
                            const hal_tensor_desc_t& out) {
  if (tensor.rank != out.rank) {
    return std::string(name) + " " + describe_tensor(tensor) + " must have out's rank " +
           std::to_string(out.rank) + " (broadcast with size-1 dimensions)";
  }
  for (uint32_t d = 0; d < out.rank; ++d) {
    if (tensor.shape[d] != out.shape[d] && tensor.shape[d] != 1) {
      return std::string(name) + " " + describe_tensor(tensor) + " dimension " + std::to_string(d) +
             " must be out's (" + std::to_string(out.shape[d]) + ") or 1 to broadcast";
    }
  }
  return {};
}

hal_tensor_desc_t broadcast_to(const hal_tensor_desc_t& tensor, const hal_tensor_desc_t& out) {
  hal_tensor_desc_t view = tensor;
  for (uint32_t d = 0; d < out.rank; ++d) {
    view.shape[d] = out.shape[d];
    if (tensor.shape[d] == 1 && out.shape[d] != 1) view.strides[d] = 0;
  }
  return view;
}

}  // namespace hal::ops
