#include "services/trainer/master_weights.h"

namespace rlmesh::trainer {

std::shared_ptr<MasterWeights> MasterWeights::Create(torch::nn::Module& policy,
                                                     torch::Dtype reduce_dtype) {
  std::vector<torch::Tensor> params;
  bool low_precision = false;
  for (const auto& p : policy.parameters()) {
    if (!p.requires_grad()) continue;
    params.push_back(p);
    low_precision = low_precision || p.scalar_type() != torch::kFloat32;
  }
  if (!low_precision) return nullptr;
  return std::shared_ptr<MasterWeights>(new MasterWeights(std::move(params), reduce_dtype));
}

MasterWeights::MasterWeights(std::vector<torch::Tensor> params, torch::Dtype reduce_dtype)
    : params_(std::move(params)), accumulators_(params_.size()), reduce_dtype_(reduce_dtype) {
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& p : params_) {
    masters_.push_back(p.detach().to(torch::kFloat32).clone());
  }
}

void MasterWeights::AccumulateGradients() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& grad = params_[i].mutable_grad();
    if (!grad.defined()) continue;
    if (accumulators_[i].defined()) {
      accumulators_[i].add_(grad.to(reduce_dtype_));
    } else {
      accumulators_[i] = grad.to(reduce_dtype_, /*non_blocking=*/false, /*copy=*/true);
    }
    grad = torch::Tensor();
  }
}

void MasterWeights::FinishGradients() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < masters_.size(); ++i) {
    masters_[i].mutable_grad() =
        accumulators_[i].defined() ? accumulators_[i].to(torch::kFloat32) : torch::Tensor();
  }
}

void MasterWeights::ZeroGradients() {
  for (size_t i = 0; i < masters_.size(); ++i) {
    accumulators_[i] = torch::Tensor();
    masters_[i].mutable_grad() = torch::Tensor();
    params_[i].mutable_grad() = torch::Tensor();
  }
}

void MasterWeights::CopyToParameters() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_(masters_[i]);
}

void MasterWeights::CopyFromParameters() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) masters_[i].copy_(params_[i]);
}

}  // namespace rlmesh::trainer
