#include "services/trainer/trainer_service.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics/families.h"
#include "common/metrics/process_metrics.h"
#include "common/status/grpc_status.h"

namespace rlmesh::trainer {

namespace {

using Buckets = prometheus::Histogram::BucketBoundaries;
const Buckets kShort = {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};

constexpr auto& G = metrics::NewGauge;
constexpr auto& C = metrics::NewCounter;
constexpr auto& H = metrics::NewHistogram;

double Since(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

}  // namespace

TrainerServiceImpl::TrainerServiceImpl(prometheus::Registry& r)
    : global_step_(G(r, "rlmesh_trainer_global_step", "Last completed optimizer step.")),
      step_duration_(H(r, "rlmesh_trainer_step_duration_seconds", "Wall time of one update call.",
                       {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200})),
      old_log_prob_duration_(H(r, "rlmesh_trainer_old_log_prob_duration_seconds",
                               "Wall time of one old-log-prob call.", kShort)),
      tokens_(C(r, "rlmesh_trainer_tokens_total", "Tokens trained on, once per epoch pass.")),
      grad_norm_(G(r, "rlmesh_trainer_grad_norm", "Gradient norm before clipping.")),
      optimizer_steps_(C(r, "rlmesh_trainer_optimizer_steps_total", "Optimizer steps taken.")),
      skipped_steps_(C(r, "rlmesh_trainer_skipped_steps_total",
                       "Optimizer steps skipped because the gradient norm was not finite.")),
      checkpoint_duration_(H(r, "rlmesh_trainer_checkpoint_save_duration_seconds",
                             "Wall time to write one checkpoint.",
                             {0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800})),
      checkpoint_failures_(C(r, "rlmesh_trainer_checkpoint_failures_total",
                             "Checkpoint writes that failed.")),
      weight_version_(G(r, "rlmesh_trainer_weight_version", "Latest weight version published.")),
      publish_duration_(H(r, "rlmesh_trainer_weight_publish_duration_seconds",
                          "Time to publish one version to every subscribed replica.", kShort)),
      publish_bytes_(C(r, "rlmesh_trainer_weight_publish_bytes_total", "Weight bytes sent.")),
      publish_failures_(C(r, "rlmesh_trainer_weight_publish_failures_total",
                          "Publishes where at least one receiver failed.")),
      inline_fallbacks_(C(r, "rlmesh_trainer_weight_inline_fallbacks_total",
                          "Replica-versions sent inline over gRPC because the data plane did "
                          "not reach the replica.")) {}

grpc::Status TrainerServiceImpl::NotReady() const {
  const int rank = rank_.load();
  if (rank > 0) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("this is trainer rank ", rank,
                                     " of a group, which takes no requests: rank 0 serves them"));
  }
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the model is loading");
}

grpc::Status TrainerServiceImpl::ComputeOldLogProbs(grpc::ServerContext*,
                                                    const v1::ComputeOldLogProbsRequest* request,
                                                    v1::ComputeOldLogProbsResponse* response) try {
  Trainer* trainer = trainer_.load();
  if (trainer == nullptr) return NotReady();
  const absl::Time start = absl::Now();
  auto result = trainer->ComputeOldLogProbs(*request);
  old_log_prob_duration_.Observe(Since(start));
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = std::move(result).value();
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("TrainerService.ComputeOldLogProbs");
}

grpc::Status TrainerServiceImpl::TrainStep(grpc::ServerContext*,
                                           const v1::TrainStepRequest* request,
                                           v1::TrainStepResponse* response) try {
  Trainer* trainer = trainer_.load();
  if (trainer == nullptr) return NotReady();
  const absl::Time start = absl::Now();
  auto result = trainer->TrainStep(*request);
  if (!result.ok()) return ToGrpcStatus(result.status());
  step_duration_.Observe(Since(start));
  auto status = trainer->Status();
  tokens_.Increment(static_cast<double>(result->tokens()));
  global_step_.Set(static_cast<double>(status.global_step()));
  auto grad = result->metrics().find("actor/grad_norm");
  if (grad != result->metrics().end()) grad_norm_.Set(grad->second);
  optimizer_steps_.Increment(result->optimizer_steps() - result->skipped_optimizer_steps());
  skipped_steps_.Increment(result->skipped_optimizer_steps());
  *response = std::move(result).value();
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("TrainerService.TrainStep");
}

grpc::Status TrainerServiceImpl::SftStep(grpc::ServerContext*, const v1::SftStepRequest* request,
                                         v1::SftStepResponse* response) try {
  Trainer* trainer = trainer_.load();
  if (trainer == nullptr) return NotReady();
  auto result = trainer->SftStep(*request);
  if (!result.ok()) return ToGrpcStatus(result.status());
  optimizer_steps_.Increment();
  *response = std::move(result).value();
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("TrainerService.SftStep");
}

grpc::Status TrainerServiceImpl::SaveCheckpoint(grpc::ServerContext*,
                                                const v1::SaveCheckpointRequest* request,
                                                v1::SaveCheckpointResponse* response) try {
  Trainer* trainer = trainer_.load();
  if (trainer == nullptr) return NotReady();
  if (request->global_step() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "global_step: expected >= 0");
  }
  auto result = trainer->SaveCheckpoint(*request);
  if (!result.ok()) {
    checkpoint_failures_.Increment();
    return ToGrpcStatus(result.status());
  }
  checkpoint_duration_.Observe(result->seconds());
  *response = std::move(result).value();
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("TrainerService.SaveCheckpoint");
}

grpc::Status TrainerServiceImpl::LoadCheckpoint(grpc::ServerContext*,
                                                const v1::LoadCheckpointRequest* request,
                                                v1::LoadCheckpointResponse* response) try {
  Trainer* trainer = trainer_.load();
  if (trainer == nullptr) return NotReady();
  auto result = trainer->LoadCheckpoint(*request);
  if (!result.ok()) return ToGrpcStatus(result.status());
  global_step_.Set(static_cast<double>(result->checkpoint().global_step()));
  *response = std::move(result).value();
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("TrainerService.LoadCheckpoint");
}

grpc::Status TrainerServiceImpl::PublishWeights(grpc::ServerContext*,
                                                const v1::PublishWeightsRequest* request,
                                                v1::PublishWeightsResponse* response) try {
  Trainer* trainer = trainer_.load();
  if (trainer == nullptr) return NotReady();
  for (int i = 0; i < request->targets_size(); ++i) {
    if (request->targets(i).address().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "targets[" + std::to_string(i) + "].address: must not be empty");
    }
  }
  auto result = trainer->PublishWeights(*request);
  if (!result.ok()) return ToGrpcStatus(result.status());
  publish_duration_.Observe(result->seconds());
  if (request->targets_size() > 0) publish_bytes_.Increment(static_cast<double>(result->bytes()));
  for (const auto& r : result->results()) {
    if (!r.ok()) {
      publish_failures_.Increment();
      break;
    }
  }
  weight_version_.Set(static_cast<double>(result->weight_version().version()));
  // Publishes may overlap (a re-anchor during a step): the counter catches up with the
  // trainer's total, each fallback counted once.
  const int64_t fallbacks = trainer->inline_fallbacks();
  int64_t counted = inline_fallbacks_counted_.load();
  while (fallbacks > counted &&
         !inline_fallbacks_counted_.compare_exchange_weak(counted, fallbacks)) {
  }
  if (fallbacks > counted) inline_fallbacks_.Increment(static_cast<double>(fallbacks - counted));
  *response = std::move(result).value();
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("TrainerService.PublishWeights");
}

grpc::Status TrainerServiceImpl::GetStatus(grpc::ServerContext*, const v1::GetTrainerStatusRequest*,
                                           v1::GetTrainerStatusResponse* response) try {
  Trainer* trainer = trainer_.load();
  if (trainer == nullptr) return NotReady();
  *response = trainer->Status();
  return grpc::Status::OK;
} catch (...) {
  return StatusFromCurrentException("TrainerService.GetStatus");
}

}  // namespace rlmesh::trainer
