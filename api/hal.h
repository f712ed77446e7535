/* HAL: the public C API in one include.
 *
 *   hal/result.h   result codes, error detail
 *   hal/init.h     hal_init / hal_shutdown, versions, plugin load reports
 *   hal/device.h   devices, properties, capabilities
 *   hal/stream.h   streams, host functions
 *   hal/event.h    events
 *   hal/memory.h   allocations, stream-ordered copies and fills
 *   hal/kernel.h   modules, kernels, launch
 *   hal/dtype.h    element types
 *   hal/collective.h  communicators and collectives
 *   hal/ops.h      operators: tensors, plans, execution
 *
 * The contract of every function is in SPEC.md. */
#ifndef HAL_H_
#define HAL_H_

#include "hal/result.h"
#include "hal/init.h"
#include "hal/device.h"
#include "hal/stream.h"
#include "hal/event.h"
#include "hal/memory.h"
#include "hal/kernel.h"
#include "hal/collective.h"
#include "hal/ops.h"
#include "hal/moe.h"

#endif /* HAL_H_ */
