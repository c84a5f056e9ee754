// fp32 master copies of a policy whose parameters are kept in a lower precision (bfloat16):
// the forward and backward passes run on the low-precision parameters, gradients are
// accumulated in the reduce dtype (fp32 by default) across micro-batches, the optimizer
// updates the fp32 masters with fp32 state, and the parameters are then the masters rounded
// to their dtype. Without it, AdamW would update bf16 weights in place, and updates smaller
// than a bf16 ulp (lr 1e-6 on weights of order 1e-2) would be lost.
//
// Owned jointly by the actors that train the same policy (the GRPO actor and the warm-up's),
// so they update one set of masters. Not thread-safe: its actors serialize their steps.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace rlmesh::trainer {

class MasterWeights {
 public:
  // Masters of `policy`'s trainable parameters, or null when every one of them is already
  // float32 (nothing to do). `reduce_dtype` is float32 or bfloat16.
  static std::shared_ptr<MasterWeights> Create(torch::nn::Module& policy,
                                               torch::Dtype reduce_dtype);

  // What the optimizer updates: fp32 tensors, one per trainable parameter, in order.
  const std::vector<torch::Tensor>& masters() const { return masters_; }
  torch::Dtype reduce_dtype() const { return reduce_dtype_; }

  // After a backward pass: adds the parameters' gradients to the masters' accumulators (in
  // the reduce dtype) and clears the parameters' gradients.
  void AccumulateGradients();
  // Before the optimizer step: the masters' .grad in fp32 from the accumulators.
  void FinishGradients();
  // Clears the accumulators and the masters' gradients.
  void ZeroGradients();
  // After the optimizer step: each parameter := its master rounded to the parameter's dtype.
  void CopyToParameters();
  // After weights were loaded into the parameters from outside (a checkpoint without masters).
  void CopyFromParameters();

 private:
  MasterWeights(std::vector<torch::Tensor> params, torch::Dtype reduce_dtype);

  std::vector<torch::Tensor> params_;        // the policy's, low precision
  std::vector<torch::Tensor> masters_;       // fp32
  std::vector<torch::Tensor> accumulators_;  // reduce dtype; undefined until a gradient comes
  torch::Dtype reduce_dtype_;
};

}  // namespace rlmesh::trainer
