// The status word of the hal ops that read indices from device memory
// (gather, scatter and the index ops): HAL raises it for an index out of
// range instead of touching memory outside a tensor; the next synchronising
// call on the device reads it and raises IndexError (indexing.cpp).
#ifndef HAL_TORCH_INDEX_STATUS_HPP_
#define HAL_TORCH_INDEX_STATUS_HPP_

#include <c10/core/Device.h>

namespace hal_torch {

// The device's status word (i32 [1]), made and zeroed on first use; marks it to be read.
void* index_status_word(c10::DeviceIndex device);

// After the device's current stream was synchronised: raises IndexError when an index op
// since the last check met an index out of range (and clears the word).
void check_index_status(c10::DeviceIndex device);

}  // namespace hal_torch

#endif  // HAL_TORCH_INDEX_STATUS_HPP_
