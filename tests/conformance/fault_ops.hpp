// The fault plugin's planted operator faults (fault_ops.cpp).
#ifndef HAL_TESTS_CONFORMANCE_FAULT_OPS_HPP_
#define HAL_TESTS_CONFORMANCE_FAULT_OPS_HPP_

#include <hal_plugin.h>

namespace fault_ops {

enum class OpFault {
  kConvPaddingSwapped,         // the convolution pads pad_end first and pad_begin last
  kConvFilterFlipped,          // the filter is used back to front along W
  kBatchNormUnbiased,          // training batch norm normalises with var * m / (m - 1)
  kPoolingIndicesOffByOne,     // max pooling indices one past the chosen element
  kCountIncludePadInverted,    // average pooling's COUNT_INCLUDE_PAD read inverted
  kPagedBlockTableOffByOne,    // paged attention reads the block after the one the table names
  kPagedLastBlockIgnored,      // paged attention drops the keys of a sequence's last partial block
  kPagedMergeWithoutMax,       // split-KV chunks merged without rescaling to the largest max
  kPagedRopeWrongFrequencies,  // the append rotates with the frequencies of the whole head
};

// Replaces |table|'s operator entries with wrappers of |real|'s that plant
// |fault|.
void plant(hal_plugin_table_v1_t& table, const hal_plugin_table_v1_t* real, OpFault fault);

}  // namespace fault_ops

#endif  // HAL_TESTS_CONFORMANCE_FAULT_OPS_HPP_
