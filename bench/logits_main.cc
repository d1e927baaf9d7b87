// kimi-plan-logits: `kimi-plan logits` without Boost and SQLite, for the GPU
// machine (the runtime-only tree): a Hugging Face checkpoint's logits for
// given tokens through the runtime (runtime/model/hf_forward.h), printed as
// one line of JSON. scripts/hf_logits_check.py runs it beside transformers.
//
//   kimi-plan-logits --model-file DIR/config.json --init-from DIR --tokens 1,2,3
//       [--dtype fp32|bf16] [--device cpu|cuda|cuda:N]
//
// Exit codes: 0 success, 2 bad arguments, model or checkpoint.
#include <iostream>
#include <map>
#include <string>

#include "bench/bench_options.h"
#include "common/file_system.h"
#include "runtime/model/hf_forward.h"
#include "specs/presets.h"

namespace {

kp::Status Run(int argc, char** argv) {
  bool unused = false;
  KP_ASSIGN_OR_RETURN(auto kv, kp::bench::OptionPairs(argc, argv, "", &unused));
  for (const char* required : {"model-file", "init-from", "tokens"})
    if (!kv.count(required)) return kp::Status::InvalidArgument(std::string("--") + required + ": required");
  for (const auto& [name, value] : kv)
    if (name != "model-file" && name != "init-from" && name != "tokens" && name != "dtype" && name != "device")
      return kp::Status::InvalidArgument("--" + name + ": unknown option (model-file, init-from, tokens, dtype, device)");
  kp::RealFileSystem fs;
  const kp::PresetCatalog catalog(fs, kp::DefaultPresetDir());
  KP_ASSIGN_OR_RETURN(const kp::ModelSpec model, catalog.ModelFile(kv["model-file"]));
  KP_RETURN_IF_ERROR(kp::runtime::ValidateForRuntime(model));
  KP_ASSIGN_OR_RETURN(const auto tokens, kp::runtime::ParseTokenList(kv["tokens"]));
  kp::runtime::ModelOptions options;
  KP_ASSIGN_OR_RETURN(options.dtype, kp::runtime::ParseDType(kv.count("dtype") ? kv["dtype"] : "fp32"));
  options.weight_dtype = options.dtype;
  KP_ASSIGN_OR_RETURN(const kp::runtime::Logits logits,
                      kp::runtime::ForwardLogits(model, options, fs, kv["init-from"], tokens,
                                                 kv.count("device") ? kv["device"] : "cpu"));
  std::cout << kp::runtime::LogitsJson(model.name, tokens, logits);
  return kp::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  const kp::Status s = Run(argc, argv);
  if (s.ok()) return 0;
  std::cerr << "kimi-plan-logits: " << s.message() << "\n";
  return 2;
}
