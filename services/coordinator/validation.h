// What a validation (trainer.test_freq, trainer.val_before_train) asks the replicas for and
// what it prints; the coordinator runs it between steps through GrpoStep::Validate, whose
// metrics are verl's val-core/<data_source>/reward/mean@<n> and val/reward/mean. Pure
// functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/config/service_settings.h"
#include "rlmesh/v1/common.pb.h"

namespace rlmesh::coordinator {

// actor_rollout_ref.rollout.val_kwargs (n at least 1; greedy unless do_sample, as the settings
// derive it), data.max_response_length new tokens, and the run seed, so that every validation
// of a run, and of its resume, draws the same way.
v1::SamplingParams ValidationSampling(const config::CoordinatorSettings& settings);

// "validation @ step <s>:" (or "validation before warm-up:") and every val-core/* metric to
// three decimals, in name order.
std::string ValidationLine(int64_t global_step, bool before_warmup,
                           const std::map<std::string, double>& metrics);

}  // namespace rlmesh::coordinator
