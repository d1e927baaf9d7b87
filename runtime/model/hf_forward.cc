#include "runtime/model/hf_forward.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "runtime/comm/device.h"
#include "runtime/model/hf_checkpoint.h"
#include "runtime/model/model.h"
#include "weights/checkpoint_dir.h"

namespace kp::runtime {

namespace {
constexpr std::size_t kMaxTokens = 65536;
}  // namespace

Result<std::vector<std::int64_t>> ParseTokenList(const std::string& text) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    if (item.empty() || item.size() > 9 || !std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return Status::InvalidArgument("--tokens: \"" + item + "\" is not a token id (comma-separated integers >= 0)");
    out.push_back(std::stoll(item));
    if (out.size() > kMaxTokens)
      return Status::InvalidArgument("--tokens: at most " + std::to_string(kMaxTokens) + " tokens");
    start = end + 1;
  }
  return out;
}

std::string LogitsJson(const std::string& model, const std::vector<std::int64_t>& tokens, const Logits& logits) {
  return nlohmann::json{{"model", model}, {"tokens", tokens}, {"logits", logits}}.dump() + "\n";
}

Result<Logits> ForwardLogits(const ModelSpec& spec, const ModelOptions& options, const FileSystem& fs,
                             const std::string& init_from, const std::vector<std::int64_t>& tokens,
                             const std::string& device_name) {
  if (tokens.empty()) return Status::InvalidArgument("--tokens: give at least one token id");
  for (std::int64_t t : tokens)
    if (t < 0 || t >= spec.vocab)
      return Status::InvalidArgument("--tokens: " + std::to_string(t) + " is outside the vocabulary [0, " +
                                     std::to_string(spec.vocab) + ")");
  KP_ASSIGN_OR_RETURN(const torch::Device device, ParseDevice(device_name));
  KP_RETURN_IF_ERROR(CheckCheckpointArchitecture(fs, init_from, spec).WithContext("--init-from"));
  Result<CheckpointDir> checkpoint = CheckpointDir::Open(fs, init_from);
  if (!checkpoint.ok()) return checkpoint.status().WithContext("--init-from");
  KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> model, BuildModel(spec, options));
  KP_RETURN_IF_ERROR(LoadHfCheckpoint(*model, *checkpoint).WithContext("--init-from"));
  model->to(device);
  model->eval();
  torch::NoGradGuard no_grad;
  const std::int64_t n = static_cast<std::int64_t>(tokens.size());
  const torch::Tensor input = torch::tensor(tokens, torch::kLong).view({1, n}).to(device);
  const torch::Tensor logits = model->forward(input).to(torch::kFloat).cpu().contiguous().view({n, -1});
  Logits out(static_cast<std::size_t>(n));
  const float* data = logits.data_ptr<float>();
  const std::int64_t vocab = logits.size(1);
  for (std::int64_t t = 0; t < n; ++t) out[t].assign(data + t * vocab, data + (t + 1) * vocab);
  return out;
}

}  // namespace kp::runtime
