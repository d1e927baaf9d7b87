#include "planner/recipe.h"

#include <algorithm>
#include <sstream>

#include "common/text.h"

namespace kp {

namespace {

template <typename T, std::size_t N>
struct Names {
  std::pair<T, const char*> items[N];
  const char* Of(T v) const {
    for (const auto& [value, name] : items)
      if (value == v) return name;
    return "?";
  }
  Result<T> Parse(const std::string& name, const std::string& field) const {
    std::string allowed;
    for (const auto& [value, n] : items) {
      if (name == n) return value;
      allowed += (allowed.empty() ? "" : ", ") + std::string(n);
    }
    return Status::InvalidArgument(field + ": must be one of " + allowed + ", got \"" + QuoteBounded(name) + "\"");
  }
};

constexpr Names<Fp8Recipe, 4> kFp8Names{{{Fp8Recipe::kNone, "none"},
                                         {Fp8Recipe::kTensorwise, "fp8-tensorwise"},
                                         {Fp8Recipe::kBlockwise, "fp8-blockwise"},
                                         {Fp8Recipe::kMxfp8, "mxfp8"}}};
constexpr Names<MomentsDtype, 2> kMomentNames{{{MomentsDtype::kFp32, "fp32"}, {MomentsDtype::kBf16, "bf16"}}};
constexpr Names<Dispatcher, 3> kDispatcherNames{
    {{Dispatcher::kAllToAll, "alltoall"}, {Dispatcher::kDeepEp, "deepep"}, {Dispatcher::kHybridEp, "hybridep"}}};
constexpr Names<RecomputeModule, 7> kModuleNames{{{RecomputeModule::kCoreAttn, "core_attn"},
                                                  {RecomputeModule::kMoeAct, "moe_act"},
                                                  {RecomputeModule::kLayernorm, "layernorm"},
                                                  {RecomputeModule::kMlaUpProj, "mla_up_proj"},
                                                  {RecomputeModule::kMlp, "mlp"},
                                                  {RecomputeModule::kMoe, "moe"},
                                                  {RecomputeModule::kSharedExperts, "shared_experts"}}};
constexpr Names<CudaGraphs, 2> kCudaGraphNames{{{CudaGraphs::kNone, "none"}, {CudaGraphs::kModules, "modules"}}};
constexpr Names<ExpertActivations, 2> kExpertActivationNames{
    {{ExpertActivations::kNative, "native"}, {ExpertActivations::kMegatron, "megatron"}}};

}  // namespace

bool RecipeOptions::recomputes(RecomputeModule m) const {
  return std::find(recompute_modules.begin(), recompute_modules.end(), m) != recompute_modules.end();
}

const char* Fp8RecipeName(Fp8Recipe r) { return kFp8Names.Of(r); }
const char* MomentsDtypeName(MomentsDtype m) { return kMomentNames.Of(m); }
const char* DispatcherName(Dispatcher d) { return kDispatcherNames.Of(d); }
const char* RecomputeModuleName(RecomputeModule m) { return kModuleNames.Of(m); }
const char* ExpertActivationsName(ExpertActivations e) { return kExpertActivationNames.Of(e); }
const char* CudaGraphsName(CudaGraphs g) { return kCudaGraphNames.Of(g); }

Result<CudaGraphs> ParseCudaGraphs(const std::string& text, const std::string& field) {
  return kCudaGraphNames.Parse(text, field);
}

Result<ExpertActivations> ParseExpertActivations(const std::string& text, const std::string& field) {
  return kExpertActivationNames.Parse(text, field);
}

std::string PrecisionName(bool bf16, Fp8Recipe fp8) {
  if (fp8 != Fp8Recipe::kNone) return Fp8RecipeName(fp8);
  return bf16 ? "bf16" : "fp16";
}

Result<PrecisionChoice> ParsePrecision(const std::string& name, const GpuSpec& gpu, const std::string& field) {
  PrecisionChoice c;
  if (name == "bf16") return c;
  if (name == "fp16") {
    c.bf16 = false;
    return c;
  }
  if (name == "none")
    return Status::InvalidArgument(field + ": must be bf16, fp16, fp8-tensorwise, fp8-blockwise or mxfp8, got \"none\"");
  Result<Fp8Recipe> recipe = kFp8Names.Parse(name, field);
  if (!recipe.ok())
    return Status::InvalidArgument(field + ": must be bf16, fp16, fp8-tensorwise, fp8-blockwise or mxfp8, got \"" +
                                   QuoteBounded(name) + "\"");
  if (!(gpu.fp8.value() > 0))
    return Status::InvalidArgument(field + ": " + name + " needs a GPU with FP8 tensor cores; " + gpu.name +
                                   " has none (fp8_tflops 0)");
  if (*recipe == Fp8Recipe::kMxfp8 && gpu.arch != "blackwell")
    return Status::InvalidArgument(field + ": mxfp8 needs Blackwell (b200, b300, gb200, gb300); " + gpu.name + " is " +
                                   (gpu.arch.empty() ? std::string("not") : gpu.arch) +
                                   " (give fp8-tensorwise or fp8-blockwise)");
  c.fp8 = *recipe;
  return c;
}

Result<MomentsDtype> ParseMomentsDtype(const std::string& name, const std::string& field) {
  return kMomentNames.Parse(name, field);
}

Result<Dispatcher> ParseDispatcher(const std::string& name, const std::string& field) {
  return kDispatcherNames.Parse(name, field);
}

Result<std::vector<RecomputeModule>> ParseRecomputeModules(const std::string& list, const std::string& field) {
  std::vector<RecomputeModule> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    KP_ASSIGN_OR_RETURN(const RecomputeModule m, kModuleNames.Parse(item, field));
    if (std::find(out.begin(), out.end(), m) != out.end())
      return Status::InvalidArgument(field + ": " + item + " is named twice");
    out.push_back(m);
  }
  if (out.empty() || list.back() == ',')
    return Status::InvalidArgument(field + ": give one or more of core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, "
                                   "shared_experts, comma separated");
  return out;
}

std::string RecomputeModulesList(const std::vector<RecomputeModule>& modules) {
  std::string out;
  for (RecomputeModule m : modules) out += (out.empty() ? "" : ",") + std::string(RecomputeModuleName(m));
  return out;
}

}  // namespace kp
