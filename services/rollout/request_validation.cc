#include "services/rollout/request_validation.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace rlmesh::rollout {

absl::Status ValidateGenerateRequest(const v1::GenerateRequest& request,
                                     const GenerateLimits& limits) {
  if (request.request_id().empty())
    return absl::InvalidArgumentError("request_id: must not be empty");
  if (request.prompts_size() == 0) {
    return absl::InvalidArgumentError("prompts: expected at least one prompt, got none");
  }
  const v1::SamplingParams& p = request.sampling_params();
  if (p.n() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling_params.n: expected an integer >= 1, got ", p.n()));
  }
  if (!std::isfinite(p.temperature()) || p.temperature() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling_params.temperature: expected a finite number >= 0, got ", p.temperature()));
  }
  if (!std::isfinite(p.top_p())) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling_params.top_p: expected a finite number, got ", p.top_p()));
  }
  if (p.max_new_tokens() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling_params.max_new_tokens: expected >= 0 (0 = the configured maximum), got ",
        p.max_new_tokens()));
  }
  if (limits.max_new_tokens > 0 && p.max_new_tokens() > limits.max_new_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling_params.max_new_tokens: ", p.max_new_tokens(),
                     " is over this replica's maximum of ", limits.max_new_tokens,
                     " (data.max_response_length; 0 asks for the maximum)"));
  }
  for (int i = 0; i < p.stop_token_ids_size(); ++i) {
    const int32_t id = p.stop_token_ids(i);
    if (id < 0 || id >= limits.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("sampling_params.stop_token_ids[", i,
                                                     "]: ", id, " is outside the vocabulary [0, ",
                                                     limits.vocab_size, ")"));
    }
  }
  const int64_t samples = static_cast<int64_t>(request.prompts_size()) * p.n();
  if (limits.max_samples_per_request > 0 && samples > limits.max_samples_per_request) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompts: ", request.prompts_size(), " prompts x sampling_params.n ", p.n(),
                     " = ", samples, " samples, over this replica's limit of ",
                     limits.max_samples_per_request, " per request (rlmesh.rollout.max_queue)"));
  }
  // prompt_id -> (first sample index, prompts[] index) of the prompts seen so far.
  std::map<std::string, std::vector<std::pair<int64_t, int>>> ranges;
  for (int i = 0; i < request.prompts_size(); ++i) {
    const v1::GeneratePrompt& prompt = request.prompts(i);
    if (prompt.token_ids_size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat("prompts[", i, "].token_ids: empty prompt"));
    }
    if (limits.max_model_len > 0 && prompt.token_ids_size() >= limits.max_model_len) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompts[", i, "].token_ids: ", prompt.token_ids_size(),
          " tokens leave no room for a response within max_model_len ", limits.max_model_len,
          " (at most ", limits.max_model_len - 1, " prompt tokens)"));
    }
    if (prompt.first_sample_index() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompts[", i, "].first_sample_index: expected >= 0, got ", prompt.first_sample_index()));
    }
    const int64_t first = prompt.first_sample_index();
    if (first + p.n() - 1 > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompts[", i, "].first_sample_index: ", first, " + n ", p.n(),
          " goes past the largest sample index, ", std::numeric_limits<int32_t>::max()));
    }
    for (const auto& [other_first, other] : ranges[prompt.prompt_id()]) {
      if (first < other_first + p.n() && other_first < first + p.n()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "prompts[", i, "].prompt_id: \"", prompt.prompt_id(), "\" repeats prompts[", other,
            "] with overlapping sample indices (first_sample_index ", first, " and ", other_first,
            ", n ", p.n(), "): their samples could not be told apart"));
      }
    }
    ranges[prompt.prompt_id()].emplace_back(first, i);
    for (int t = 0; t < prompt.token_ids_size(); ++t) {
      const int32_t id = prompt.token_ids(t);
      if (id < 0 || id >= limits.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("prompts[", i, "].token_ids[", t, "]: ", id,
                                                       " is outside the vocabulary [0, ",
                                                       limits.vocab_size, ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace rlmesh::rollout
