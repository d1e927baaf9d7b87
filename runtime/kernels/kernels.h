// The CUDA kernels' LibTorch faces, one header per kernel family (each
// family: <family>.h/.cc here, its kernels in <family>_cuda.h/.cu, its name
// in CMakeLists.txt's KP_KERNEL_FAMILIES). In a build without them (no CUDA
// Toolkit or a CPU LibTorch) every *Applies function returns false and
// callers keep the torch forms of runtime/model/attention.h and layers.h.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_KERNELS_H_
#define KIMI_PLAN_RUNTIME_KERNELS_KERNELS_H_

#include "runtime/kernels/attn_res.h"
#include "runtime/kernels/batched_gemm.h"
#include "runtime/kernels/cast.h"
#include "runtime/kernels/cross_entropy.h"
#include "runtime/kernels/fp8_gemm.h"
#include "runtime/kernels/fp8_grouped_gemm.h"
#include "runtime/kernels/int4_dequant.h"
#include "runtime/kernels/kda.h"
#include "runtime/kernels/kda_prep.h"
#include "runtime/kernels/moe_combine.h"
#include "runtime/kernels/rms_norm.h"
#include "runtime/kernels/swiglu.h"

namespace kp::runtime {

/// True when this build has the CUDA kernels.
bool CudaKernelsBuilt();

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_KERNELS_KERNELS_H_
