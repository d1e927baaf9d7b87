#include "runtime/kernels/kernels.h"

namespace kp::runtime {

#ifdef KIMI_PLAN_CUDA_KERNELS
bool CudaKernelsBuilt() { return true; }
#else
bool CudaKernelsBuilt() { return false; }
#endif

}  // namespace kp::runtime
