// `kimi-plan logits`: a released checkpoint's logits for given tokens, the
// runtime's forward of it (runtime/model/hf_forward.h), so that the runtime
// can be checked against the architecture's reference implementation
// (scripts/hf_logits_check.py against transformers' DeepseekV3ForCausalLM).
#include <algorithm>
#include <cmath>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/runtime_options.h"
#include "common/table.h"
#include "runtime/model/hf_forward.h"
#include "runtime/model/runtime_config.h"

namespace kp {

namespace {

po::options_description LogitsOptions() {
  po::options_description desc(
      "kimi-plan logits --init-from DIR --tokens 1,2,3 [options]\n\n"
      "Loads the Hugging Face checkpoint folder DIR into the model (--model, --model-file: a preset-format file\n"
      "or DIR/config.json itself) and prints the logits of the tokens, read as one sequence.\n"
      "Options");
  desc.add_options()("help,h", "this text")
      ("init-from", po::value<std::string>(), "the checkpoint folder (safetensors, an index, config.json) (required)")
      ("tokens", po::value<std::string>(), "comma-separated token ids, one sequence (required)")
      ("dtype", po::value<std::string>()->default_value("fp32"),
       "fp32 | bf16 (bf16: weights and activations in bf16; norms, softmaxes and routers in fp32)")
      ("device", po::value<std::string>()->default_value("cpu"), "cpu, cuda or cuda:N")
      ("json", "print {\"tokens\", \"logits\": [T][vocab]} instead of a table");
  AddScaledModelOptions(desc);
  return desc;
}

void PrintTable(const std::vector<std::int64_t>& tokens, const runtime::Logits& logits, const CliEnv& env) {
  Table table({"position", "token", "argmax", "max logit", "log-sum-exp"});
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const std::vector<float>& row = logits[t];
    const auto best = std::max_element(row.begin(), row.end());
    double sum = 0;
    for (float v : row) sum += std::exp(static_cast<double>(v) - *best);
    table.AddRow({std::to_string(t), std::to_string(tokens[t]), std::to_string(best - row.begin()),
                  FormatFixed(*best, 6), FormatFixed(*best + std::log(sum), 6)});
  }
  env.out << table.Render();
}

}  // namespace

Status LogitsCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = LogitsOptions();
  po::variables_map vm;
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out));
  if (!proceed) return Status::Ok();
  if (!vm.count("init-from")) return Status::InvalidArgument("--init-from: required (a checkpoint folder)");
  if (!vm.count("tokens")) return Status::InvalidArgument("--tokens: required (comma-separated token ids)");
  KP_ASSIGN_OR_RETURN(const std::vector<std::int64_t> tokens, runtime::ParseTokenList(vm["tokens"].as<std::string>()));
  KP_ASSIGN_OR_RETURN(const ModelSpec model, ResolveScaledModel(vm, env));
  runtime::ModelOptions options;
  KP_ASSIGN_OR_RETURN(options.dtype, runtime::ParseDType(vm["dtype"].as<std::string>()));
  options.weight_dtype = options.dtype;
  KP_ASSIGN_OR_RETURN(const runtime::Logits logits,
                      runtime::ForwardLogits(model, options, env.fs, vm["init-from"].as<std::string>(), tokens,
                                             vm["device"].as<std::string>()));
  if (vm.count("json")) {
    env.out << runtime::LogitsJson(model.name, tokens, logits);
  } else {
    PrintTable(tokens, logits, env);
  }
  return Status::Ok();
}

}  // namespace kp
