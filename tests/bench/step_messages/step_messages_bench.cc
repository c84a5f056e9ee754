// step_messages_bench: the bytes of one GRPO step's messages on the wire (protobuf
// ByteSizeLong of the real rlmesh.v1 messages), in the form the coordinator sends today
// (compact: the trainer keeps the sequences and old log-probs of ComputeOldLogProbs, the
// update names each sequence by id with one advantage) against the earlier full form (the
// update carried every sequence again, a per-token advantage, the old log-probs the trainer had
// computed itself and the rollout's log-probs, which nothing read), built in the same run.
// The batch is shaped as verl's GSM8K GRPO recipe (train_batch_size 1024, rollout.n 5, KL
// loss on); prompt and response lengths are flags (the recipe's limits are 512 and 1024).
// Token ids are drawn uniformly from the vocabulary with a fixed seed (varints of 1-3 bytes).
//
//   build/bin/step_messages_bench [--prompts 1024] [--n 5] [--prompt-tokens 128]
//       [--response-tokens 256] [--vocab 151936] [--kl-loss 1]
#include <google/protobuf/unknown_field_set.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rlmesh/v1/reference.pb.h"
#include "rlmesh/v1/trainer.pb.h"

namespace {

struct Shape {
  int prompts = 1024;
  int n = 5;
  int prompt_tokens = 128;
  int response_tokens = 256;
  int vocab = 151936;
  bool kl_loss = true;
};

Shape ParseArgs(int argc, char** argv) {
  Shape s;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--prompts") {
      s.prompts = value;
    } else if (flag == "--n") {
      s.n = value;
    } else if (flag == "--prompt-tokens") {
      s.prompt_tokens = value;
    } else if (flag == "--response-tokens") {
      s.response_tokens = value;
    } else if (flag == "--vocab") {
      s.vocab = value;
    } else if (flag == "--kl-loss") {
      s.kl_loss = value != 0;
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      std::exit(2);
    }
  }
  return s;
}

std::string MiB(size_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

}  // namespace

int main(int argc, char** argv) {
  const Shape s = ParseArgs(argc, argv);
  std::mt19937 rng(20261202);
  std::uniform_int_distribution<int32_t> token(0, s.vocab - 1);
  std::uniform_real_distribution<float> logprob(-8.0f, 0.0f);

  rlmesh::v1::ComputeOldLogProbsRequest old_request;  // the sequences, kept by the trainer
  rlmesh::v1::ComputeLogProbsRequest ref_request;
  rlmesh::v1::TrainStepRequest full, compact;
  rlmesh::v1::ComputeOldLogProbsResponse old_response;
  rlmesh::v1::ComputeLogProbsResponse ref_response;
  full.set_global_step(1);
  compact.set_global_step(1);
  for (int p = 0; p < s.prompts; ++p) {
    std::vector<int32_t> prompt(s.prompt_tokens);
    for (auto& t : prompt) t = token(rng);
    for (int i = 0; i < s.n; ++i) {
      rlmesh::v1::TokenSequence seq;
      seq.set_id(absl::StrCat("train-", p, "/", i));
      seq.mutable_token_ids()->Add(prompt.begin(), prompt.end());
      for (int t = 0; t < s.response_tokens; ++t) seq.add_token_ids(token(rng));
      seq.set_prompt_length(s.prompt_tokens);
      *old_request.add_sequences() = seq;
      *ref_request.add_sequences() = seq;
      // The answers: one log-prob per response token from the trainer and the reference.
      auto* old_result = old_response.add_results();
      old_result->set_id(seq.id());
      for (int t = 0; t < s.response_tokens; ++t) old_result->add_logprobs(logprob(rng));
      if (s.kl_loss) *ref_response.add_results() = *old_result;
      const float advantage = logprob(rng) / 4.0f + 1.0f;
      // The full form, as the coordinator sent it before the compact step.
      auto* f = full.add_samples();
      *f->mutable_sequence() = seq;
      std::string rollout_logprobs;  // field 7, packed floats, now reserved
      for (int t = 0; t < s.response_tokens; ++t) {
        f->add_advantages(advantage);
        f->add_old_logprobs(logprob(rng));
        if (s.kl_loss) f->add_ref_logprobs(logprob(rng));
        const float v = logprob(rng);
        rollout_logprobs.append(reinterpret_cast<const char*>(&v), sizeof v);
      }
      f->set_group_id(absl::StrCat("train-", p));
      f->set_weight_version(1);
      f->GetReflection()->MutableUnknownFields(f)->AddLengthDelimited(7, rollout_logprobs);
      // The compact form.
      auto* c = compact.add_samples();
      c->mutable_sequence()->set_id(seq.id());
      c->set_advantage(advantage);
      if (s.kl_loss) *c->mutable_ref_logprobs() = f->ref_logprobs();
      c->set_group_id(f->group_id());
      c->set_weight_version(1);
    }
  }
  old_request.set_temperature(1.0);
  ref_request.set_temperature(1.0);
  const size_t old_full = old_request.ByteSizeLong();
  old_request.set_keep(true);
  const size_t old_keep = old_request.ByteSizeLong();
  const size_t ref = s.kl_loss ? ref_request.ByteSizeLong() : 0;
  const size_t update_full = full.ByteSizeLong();
  const size_t update_compact = compact.ByteSizeLong();
  const size_t answers = old_response.ByteSizeLong() + ref_response.ByteSizeLong();
  const size_t before = old_full + ref + update_full + answers;
  const size_t after = old_keep + ref + update_compact + answers;

  std::printf(
      "GRPO step requests, %d prompts x n = %d, prompt %d + response %d tokens, "
      "vocab %d, KL loss %s\n",
      s.prompts, s.n, s.prompt_tokens, s.response_tokens, s.vocab, s.kl_loss ? "on" : "off");
  std::printf("%-42s %14s %14s %8s\n", "request", "before", "after", "ratio");
  auto row = [](const char* name, size_t b, size_t a) {
    std::printf("%-42s %14s %14s %8.3f\n", name, MiB(b).c_str(), MiB(a).c_str(),
                b > 0 ? static_cast<double>(a) / b : 0.0);
  };
  row("TrainerService.ComputeOldLogProbs", old_full, old_keep);
  row("ReferenceService.ComputeLogProbs", ref, ref);
  row("TrainerService.TrainStep", update_full, update_compact);
  row("the two log-prob responses", answers, answers);
  row("the step's messages (weights aside)", before, after);
  return 0;
}
