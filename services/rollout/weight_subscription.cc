#include "services/rollout/weight_subscription.h"

#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/transport/absl_status.h"
#include "common/transport/transport_factory.h"
#include "services/rollout/tensor_codec.h"

namespace rlmesh::rollout {

absl::StatusOr<std::unique_ptr<WeightSubscription>> WeightSubscription::Create(
    const WeightSubscriptionOptions& options) {
  transport::ReceiverOptions receiver_options;
  receiver_options.endpoint = options.endpoint;
  receiver_options.name = options.name;
  receiver_options.transfer_timeout =
      transport::Duration(absl::ToDoubleSeconds(options.transfer_timeout));
  if (options.device.rfind("cuda", 0) == 0) {
    const auto colon = options.device.find(':');
    receiver_options.device =
        colon == std::string::npos ? 0 : std::atoi(options.device.c_str() + colon + 1);
  }
  auto receiver = transport::CreateReceiver(options.transport, receiver_options);
  if (!receiver.ok()) {
    return absl::Status(transport::ToAbsl(receiver.status()).code(),
                        absl::StrCat("subscribing to the trainer's weights (", options.transport,
                                     " at ", options.endpoint, "): ", receiver.status().message()));
  }
  return std::unique_ptr<WeightSubscription>(new WeightSubscription(options, std::move(*receiver)));
}

WeightSubscription::WeightSubscription(const WeightSubscriptionOptions& options,
                                       std::unique_ptr<transport::WeightReceiver> receiver)
    : options_(options), receiver_(std::move(receiver)) {
  thread_ = std::thread([this] { ReceiveLoop(); });
}

WeightSubscription::~WeightSubscription() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

transport::StatusOr<void*> WeightSubscription::Destination(const transport::TensorMeta& meta) {
  auto shape = options_.param_shapes.find(meta.name);
  if (shape == options_.param_shapes.end()) {
    return transport::InvalidArgumentError("tensor \"" + meta.name +
                                           "\": not a parameter of this model");
  }
  if (shape->second != meta.shape) {
    return transport::InvalidArgumentError("tensor \"" + meta.name + "\": expected shape [" +
                                           absl::StrJoin(shape->second, ", ") + "], got [" +
                                           absl::StrJoin(meta.shape, ", ") + "]");
  }
  auto dtype = FromTransportDType(meta.dtype);
  if (!dtype.ok()) return transport::InvalidArgumentError(std::string(dtype.status().message()));
  torch::Tensor& t = staging_[meta.name];
  if (!t.defined() || t.scalar_type() != *dtype) {
    t = torch::empty(meta.shape, torch::TensorOptions().dtype(*dtype).device(options_.device));
  }
  return t.data_ptr();
}

void WeightSubscription::ReceiveLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
    }
    bool held = false;
    auto destination = [&](const transport::TensorMeta& meta) -> transport::StatusOr<void*> {
      if (!held) {
        // From the first byte on, the staging tensors no longer hold the previous version.
        staging_mu_.Lock();
        held = true;
        absl::MutexLock lock(&mu_);
        have_version_ = false;
      }
      staging_mu_.AssertHeld();
      return Destination(meta);
    };
    auto got = receiver_->ReceiveNext(destination, transport::Duration(0.2));
    bool stop = false;
    {
      absl::MutexLock lock(&mu_);
      if (got.ok() && got->tensors != options_.param_shapes.size()) {
        last_error_ = absl::FailedPreconditionError(
            absl::StrCat("weight version ", got->version, ": received ", got->tensors,
                         " tensors, the model has ", options_.param_shapes.size(), " parameters"));
        ++errors_;
      } else if (got.ok()) {
        // Published while the staging lock is still held, so WithStaged never sees a version
        // number that does not match the bytes.
        have_version_ = true;
        staged_version_ = got->version;
        staged_bytes_ = static_cast<int64_t>(got->bytes);
        staged_tensors_ = static_cast<int64_t>(got->tensors);
        staged_path_ = got->path;
      } else if (got.status().code() == transport::Code::kUnavailable) {
        dead_ = transport::ToAbsl(got.status());
        std::fprintf(stderr, "rollout: weight subscription to %s ended: %s\n",
                     options_.endpoint.c_str(), got.status().message().c_str());
        stop = true;
      } else if (got.status().code() != transport::Code::kDeadlineExceeded) {
        last_error_ = transport::ToAbsl(got.status());
        ++errors_;
      }
    }
    if (held) staging_mu_.Unlock();
    if (stop) return;
  }
}

absl::Status WeightSubscription::WaitFor(uint64_t version, absl::Duration timeout,
                                         const std::function<bool()>& abandoned) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  // A failure no caller has heard of yet ends the wait, even one from before it began (the
  // version may have failed before its BEGIN arrived).
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !dead_.ok() || errors_ != errors_reported_ ||
           (have_version_ && staged_version_ >= version);
  };
  while (!mu_.AwaitWithDeadline(
      absl::Condition(&done),
      abandoned ? std::min(deadline, absl::Now() + absl::Milliseconds(100)) : deadline)) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("weight version ", version,
                                                      " did not arrive from ", options_.endpoint,
                                                      " within ", absl::FormatDuration(timeout)));
    }
    if (abandoned()) {
      return absl::CancelledError(absl::StrCat("the caller of BEGIN for weight version ", version,
                                               " went away; the wait for it is given up"));
    }
  }
  // What failed before is answered now, or moot once this version or a newer one is staged.
  errors_reported_ = errors_;
  if (have_version_ && staged_version_ == version) return absl::OkStatus();
  if (have_version_ && staged_version_ > version) {
    return absl::FailedPreconditionError(absl::StrCat("weight version ", version,
                                                      " was requested but version ",
                                                      staged_version_, " is already staged"));
  }
  if (!dead_.ok()) return dead_;
  return last_error_;
}

absl::Status WeightSubscription::WithStaged(
    uint64_t version,
    const std::function<absl::Status(const std::map<std::string, torch::Tensor>&)>& fn) {
  absl::MutexLock staging(&staging_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (!have_version_ || staged_version_ != version) {
      return absl::FailedPreconditionError(absl::StrCat(
          "weight version ", version,
          " is not staged (staged: ", have_version_ ? absl::StrCat(staged_version_) : "none", ")"));
    }
  }
  for (const auto& [name, shape] : options_.param_shapes) {
    if (!staging_.count(name)) {
      return absl::FailedPreconditionError(
          absl::StrCat("weight version ", version, ": no tensor for ", name));
    }
  }
  return fn(staging_);
}

absl::Status WeightSubscription::health() const {
  absl::MutexLock lock(&mu_);
  return dead_;
}

int64_t WeightSubscription::staged_bytes() const {
  absl::MutexLock lock(&mu_);
  return staged_bytes_;
}

std::string WeightSubscription::staged_path() const {
  absl::MutexLock lock(&mu_);
  return staged_path_;
}

int64_t WeightSubscription::staged_tensors() const {
  absl::MutexLock lock(&mu_);
  return staged_tensors_;
}

}  // namespace rlmesh::rollout
