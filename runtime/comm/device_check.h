// What a launcher checks before it starts any rank: the device and the c10d
// backend every rank would refuse alike, so that the refusal is one line
// from the launcher rather than one per rank. No LibTorch here: the CLI
// includes it.
#ifndef KIMI_PLAN_RUNTIME_COMM_DEVICE_CHECK_H_
#define KIMI_PLAN_RUNTIME_COMM_DEVICE_CHECK_H_

#include "common/status.h"
#include "runtime/comm/rendezvous.h"

namespace kp::runtime {

/// InvalidArgument naming --device for a device this LibTorch cannot use
/// (cuda without a CUDA device, a malformed name) and --backend for a
/// backend that is unknown, missing from this build, or NCCL without CUDA.
Status CheckDeviceAndBackend(const C10dOptions& options);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_COMM_DEVICE_CHECK_H_
