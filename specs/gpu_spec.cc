#include "specs/gpu_spec.h"

namespace kp {

namespace {
Status PositiveRate(const std::string& field, double v) {
  if (v > 0) return Status::Ok();
  return Status::InvalidArgument(field + ": must be > 0, got " + std::to_string(v));
}
}  // namespace

Status GpuSpec::Validate() const {
  KP_RETURN_IF_ERROR(PositiveRate("memory_gb", memory.value()));
  KP_RETURN_IF_ERROR(PositiveRate("bf16_tflops", bf16.value()));
  KP_RETURN_IF_ERROR(PositiveRate("fp16_tflops", fp16.value()));
  if (fp8.value() < 0) return Status::InvalidArgument("fp8_tflops: must be >= 0");
  KP_RETURN_IF_ERROR(PositiveRate("hbm_gbytes_per_s", hbm.value()));
  KP_RETURN_IF_ERROR(PositiveRate("nvlink_gbytes_per_s", nvlink.value()));
  KP_RETURN_IF_ERROR(PositiveRate("nic_gbits_per_s", nic.value()));
  KP_RETURN_IF_ERROR(PositiveRate("frontend_gbits_per_s", frontend.value()));
  if (gpus_per_node <= 0) return Status::InvalidArgument("gpus_per_node: must be a positive integer");
  if (nics_per_node <= 0) return Status::InvalidArgument("nics_per_node: must be a positive integer");
  if (nvlink_domain != 0 && (nvlink_domain < gpus_per_node || nvlink_domain % gpus_per_node != 0))
    return Status::InvalidArgument("nvlink_domain: must be whole nodes of " + std::to_string(gpus_per_node) +
                                   " GPUs (or 0: the node), got " + std::to_string(nvlink_domain));
  return Status::Ok();
}

}  // namespace kp
