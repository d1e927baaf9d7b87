#include "runtime/model/recompute.h"

namespace kp::runtime {

std::vector<torch::Tensor> DetachedInputs(at::TensorList inputs) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& x : inputs) out.push_back(x.detach().requires_grad_(x.requires_grad()));
  return out;
}

torch::autograd::variable_list BoundaryGradients(const std::vector<torch::Tensor>& outs,
                                                 const torch::autograd::variable_list& grad_outs,
                                                 const std::vector<torch::Tensor>& inputs,
                                                 const std::vector<torch::Tensor>& params, std::size_t trailing) {
  std::vector<torch::Tensor> targets;
  std::vector<std::size_t> slot;  // the gradient slot of each target
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].requires_grad()) {
      targets.push_back(inputs[i]);
      slot.push_back(i);
    }
  for (std::size_t i = 0; i < params.size(); ++i) {
    targets.push_back(params[i]);
    slot.push_back(inputs.size() + i);
  }
  // torch::autograd::grad takes only outputs that have a gradient and a graph.
  std::vector<torch::Tensor> roots, weights;
  for (std::size_t i = 0; i < outs.size(); ++i)
    if (i < grad_outs.size() && grad_outs[i].defined() && outs[i].requires_grad()) {
      roots.push_back(outs[i]);
      weights.push_back(grad_outs[i]);
    }
  torch::autograd::variable_list result(inputs.size() + params.size() + trailing);
  if (!targets.empty() && !roots.empty()) {
    const auto grads = torch::autograd::grad(roots, targets, weights, /*retain_graph=*/false,
                                             /*create_graph=*/false, /*allow_unused=*/true);
    for (std::size_t j = 0; j < grads.size(); ++j) result[slot[j]] = grads[j];
  }
  return result;
}

std::vector<torch::Tensor> TrainableOf(const torch::nn::Module& module) {
  std::vector<torch::Tensor> params;
  for (const torch::Tensor& p : module.parameters())
    if (p.requires_grad()) params.push_back(p);
  return params;
}

namespace {

struct ModuleBody : torch::CustomClassHolder {
  ChannelMixer* module = nullptr;
};

class ModuleBoundary : public torch::autograd::Function<ModuleBoundary> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, at::TensorList params,
                               c10::intrusive_ptr<ModuleBody> body, bool record_load) {
    ctx->saved_data["body"] = c10::IValue::make_capsule(body);
    ctx->saved_data["params"] = params.vec();
    ctx->save_for_backward({x});
    return body->module->Mix(x, record_load);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto body = c10::static_intrusive_pointer_cast<ModuleBody>(ctx->saved_data["body"].toCapsule());
    const std::vector<torch::Tensor> x = DetachedInputs(ctx->get_saved_variables());
    torch::Tensor out;
    {
      torch::AutoGradMode enable(true);
      out = body->module->Mix(x[0], /*record_load=*/false);
    }
    // Two more slots, for the body and the flag.
    return BoundaryGradients({out}, grad_out, x, ctx->saved_data["params"].toTensorVector(), 2);
  }
};

}  // namespace

// The outputs' storages are held, not the outputs: an output's grad_fn is
// the boundary, whose context holds this state, and a tensor here would
// make a cycle that never frees the graph.
struct OutputRecompute::State : torch::CustomClassHolder {
  OutputRecompute::Fn fn;
  std::vector<torch::Tensor> inputs;  // as given (the boundary's saved inputs)
  struct Layout {
    c10::Storage storage;
    std::size_t nbytes = 0;
    std::vector<std::int64_t> sizes, strides;
    std::int64_t offset = 0;
    torch::TensorOptions options;
  };
  std::vector<Layout> outputs;
  bool discarded = false;
  // Set by Recompute: the rerun's inputs and outputs, with their graph.
  std::vector<torch::Tensor> rerun_inputs, rerun_outputs;

  // Runs fn again with a graph; refills the discarded outputs' storage.
  void Recompute() {
    if (!rerun_outputs.empty()) return;
    rerun_inputs = DetachedInputs(inputs);
    {
      torch::AutoGradMode enable(true);
      rerun_outputs = fn(rerun_inputs);
    }
    if (!discarded) return;
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      Layout& o = outputs[i];
      c10::StorageImpl* impl = o.storage.unsafeGetStorageImpl();
      impl->set_data_ptr_noswap(impl->allocator()->allocate(o.nbytes));
      impl->set_nbytes(o.nbytes);
      torch::empty({0}, o.options).set_(o.storage, o.offset, o.sizes, o.strides).copy_(rerun_outputs[i]);
    }
    discarded = false;
  }
};

namespace {

class OutputDiscardingBoundary : public torch::autograd::Function<OutputDiscardingBoundary> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                                                at::TensorList params, c10::intrusive_ptr<OutputRecompute::State> state) {
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    ctx->saved_data["params"] = params.vec();
    return state->fn(inputs.vec());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto state =
        c10::static_intrusive_pointer_cast<OutputRecompute::State>(ctx->saved_data["state"].toCapsule());
    state->Recompute();  // done already when the consumer's hook ran
    torch::autograd::variable_list grads = BoundaryGradients(state->rerun_outputs, grad_out, state->rerun_inputs,
                                                             ctx->saved_data["params"].toTensorVector(), 1);
    state->inputs.clear();
    state->rerun_inputs.clear();
    state->rerun_outputs.clear();
    return grads;
  }
};

}  // namespace

OutputRecompute::OutputRecompute() = default;
OutputRecompute::~OutputRecompute() = default;

std::vector<torch::Tensor> OutputRecompute::Run(Fn fn, const std::vector<torch::Tensor>& inputs,
                                                const std::vector<torch::Tensor>& params) {
  if (!torch::GradMode::is_enabled()) return fn(inputs);
  state_ = c10::make_intrusive<State>();
  state_->fn = std::move(fn);
  state_->inputs = inputs;
  std::vector<torch::Tensor> outs =
      OutputDiscardingBoundary::apply(at::TensorList(inputs), at::TensorList(params), state_);
  for (const torch::Tensor& o : outs)
    state_->outputs.push_back({o.storage(), o.storage().nbytes(), o.sizes().vec(), o.strides().vec(),
                               o.storage_offset(), o.options()});
  return outs;
}

void OutputRecompute::DiscardOutputs(const torch::Tensor& consumer_output) {
  if (!state_ || !consumer_output.requires_grad()) return;
  for (State::Layout& o : state_->outputs) {
    c10::StorageImpl* impl = o.storage.unsafeGetStorageImpl();
    impl->set_data_ptr_noswap(at::DataPtr(nullptr, impl->device()));
    impl->set_nbytes(0);
  }
  state_->discarded = true;
  c10::intrusive_ptr<State> state = state_;
  consumer_output.register_hook([state](const at::TensorBase&) { state->Recompute(); });
}

torch::Tensor MixRecomputed(ChannelMixer& module, const torch::Tensor& x, bool record_load) {
  if (!torch::GradMode::is_enabled()) return module.Mix(x, record_load);
  const std::vector<torch::Tensor> params = TrainableOf(module);
  auto body = c10::make_intrusive<ModuleBody>();
  body->module = &module;
  return ModuleBoundary::apply(x, at::TensorList(params), body, record_load);
}

}  // namespace kp::runtime
