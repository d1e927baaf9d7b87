#include "runtime/train/pipeline_stage.h"


namespace kp::runtime {

namespace {

// The model's own pieces: the same modules, names and initial values as the
// single-process model, so a split changes where they run, not what they are.
class ModelStage : public PipelineStageModule {
 public:
  explicit ModelStage(std::shared_ptr<StageModelImpl> model) : model_(std::move(model)) {}

  ResidualStream Embed(const torch::Tensor& tokens) override { return model_->Embed(tokens); }

  ResidualStream RunLayers(ResidualStream in, bool record_load) override {
    ForwardContext ctx;
    ctx.record_router_load = record_load;
    return model_->RunLayers(std::move(in), ctx);
  }

  torch::Tensor Loss(const ResidualStream& in, const torch::Tensor& targets) override {
    return model_->HeadLoss(in, targets);
  }

  torch::Tensor Logits(const ResidualStream& in) override { return model_->Head(in); }

  std::vector<torch::Tensor> TrainableParameters() override { return model_->TrainableParameters(); }

  void AfterStep(double rate) override {
    if (rate > 0) model_->UpdateRouterBiases(rate);
  }

  StageModelImpl* model() { return model_.get(); }

 private:
  std::shared_ptr<StageModelImpl> model_;
};

}  // namespace

torch::Tensor PipelineStageModule::Logits(const ResidualStream&) {
  TORCH_CHECK(false, "this stage module has no head logits (a stand-in: it has Loss only)");
  return {};
}

Result<std::shared_ptr<PipelineStageModule>> MakeModelStage(const ModelSpec& spec, const ModelOptions& options,
                                                            const StageLayers& layers) {
  KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> model, BuildStage(spec, options, layers));
  model->train();
  return std::shared_ptr<PipelineStageModule>(std::make_shared<ModelStage>(std::move(model)));
}

StageModelImpl* ModelOfStage(PipelineStageModule& module) {
  auto* stage = dynamic_cast<ModelStage*>(&module);
  return stage ? stage->model() : nullptr;
}

// One norm kernel per gradient, in its own dtype (no fp64 copy of every
// gradient), the norms brought over in one copy and squared in fp64 here.
std::vector<double> GradSquares(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  grads.reserve(params.size());
  for (const torch::Tensor& p : params) grads.push_back(p.grad());
  return SquaredNorms(grads);
}

std::vector<double> SquaredNorms(const std::vector<torch::Tensor>& tensors) {
  if (tensors.empty()) return {};
  std::vector<torch::Tensor> norms;
  norms.reserve(tensors.size());
  for (const torch::Tensor& t : tensors)
    norms.push_back(t.defined() ? t.norm().to(torch::kFloat) : torch::zeros({}, torch::kFloat));
  const torch::Tensor host = torch::stack(norms).to(torch::kDouble).cpu().contiguous();
  const double* d = host.data_ptr<double>();
  std::vector<double> squares(d, d + host.numel());
  for (double& x : squares) x *= x;
  return squares;
}

double SumInOrder(const std::vector<double>& squares) {
  double total = 0;
  for (double s : squares) total += s;
  return total;
}

double ClipScale(double total_norm, double max_norm) {
  const double coef = max_norm / (total_norm + 1e-6);
  return coef < 1 ? coef : 1;
}

torch::Tensor MicroBatchRows(const torch::Tensor& tokens, int m, int M) {
  const std::int64_t rows = tokens.size(0) / M;
  return tokens.narrow(0, m * rows, rows);
}

}  // namespace kp::runtime
