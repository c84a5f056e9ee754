// `rlmesh generate --model DIR --prompt TEXT [...]`: samples continuations of one prompt with
// the generation engine and prints each sample (text, ids, finish reason, mean log-prob).
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "cli/command.h"
#include "cli/model_flags.h"
#include "common/generation/generation_engine.h"
#include "common/model/pretrained.h"
#include "common/tokenizer/tokenizer.h"

namespace rlmesh::cli {
namespace {

constexpr char kUsage[] =
    "usage: rlmesh generate --model DIR --prompt TEXT [options]\n"
    "  --chat               the prompt is a user message: apply the model's chat template\n"
    "  --n N                samples (default 1)\n"
    "  --temperature T      0 = greedy (default 1.0)\n"
    "  --top-p P            nucleus sampling mass, 1 = off (default 1.0)\n"
    "  --top-k K            keep the K most likely tokens, -1 = off (default -1)\n"
    "  --max-new-tokens N   (default 64)\n"
    "  --seed S             sample i uses a generator seeded from (S, i) (default: random)\n"
    "  --stop-id ID         stop token id; repeatable (default: the eos ids of config.json\n"
    "                       and tokenizer_config.json)\n"
    "  --json               one JSON object per sample instead of text\n";

struct Flags {
  std::string model, prompt;
  ModelFlags placement;
  bool chat = false, json = false;
  generation::SamplingParams params;
  bool stop_given = false;
};

bool ParseFlags(int argc, char** argv, Flags& f) {
  f.params.max_new_tokens = 64;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::fputs(kModelFlagsUsage, stdout);
      std::exit(0);
    }
    if (arg == "--chat") {
      f.chat = true;
      continue;
    }
    if (arg == "--json") {
      f.json = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "rlmesh generate: %s needs a value\n%s", arg.c_str(), kUsage);
      return false;
    }
    const std::string value = argv[++i];
    bool ok = true;
    int64_t integer = 0;
    if (arg == "--model") {
      f.model = value;
    } else if (arg == "--prompt") {
      f.prompt = value;
    } else if (arg == "--n") {
      ok = absl::SimpleAtoi(value, &f.params.n);
    } else if (arg == "--temperature") {
      ok = absl::SimpleAtod(value, &f.params.temperature);
    } else if (arg == "--top-p") {
      ok = absl::SimpleAtod(value, &f.params.top_p);
    } else if (arg == "--top-k") {
      ok = absl::SimpleAtoi(value, &f.params.top_k);
    } else if (arg == "--max-new-tokens") {
      ok = absl::SimpleAtoi(value, &f.params.max_new_tokens);
    } else if (arg == "--seed") {
      uint64_t seed = 0;
      ok = absl::SimpleAtoi(value, &seed);
      f.params.seed = seed;
    } else if (const int taken = TakeModelFlag("generate", arg, value, f.placement); taken != 0) {
      if (taken < 0) return false;
    } else if (arg == "--stop-id") {
      ok = absl::SimpleAtoi(value, &integer);
      f.params.stop_token_ids.push_back(integer);
      f.stop_given = true;
    } else {
      std::fprintf(stderr, "rlmesh generate: unknown flag %s\n%s", arg.c_str(), kUsage);
      return false;
    }
    if (!ok) {
      std::fprintf(stderr, "rlmesh generate: %s: expected a number, got \"%s\"\n", arg.c_str(),
                   value.c_str());
      return false;
    }
  }
  if (f.model.empty() || f.prompt.empty()) {
    std::fprintf(stderr, "rlmesh generate: --model and --prompt are required\n%s", kUsage);
    return false;
  }
  return true;
}

int Fail(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "rlmesh generate: %s: %s\n", what.c_str(),
               std::string(status.message()).c_str());
  return 1;
}

int Generate(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, flags)) return 2;
  at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));

  auto tok = tokenizer::Tokenizer::FromDirectory(flags.model);
  if (!tok.ok()) return Fail("loading the tokenizer", tok.status());
  model::CausalLmOptions model_options;
  if (!ModelOptionsOf("generate", flags.placement, &model_options)) return 1;
  auto model = model::LoadPretrained(flags.model, model_options);
  if (!model.ok()) return Fail("loading the model", model.status());
  (*model)->eval();

  absl::StatusOr<std::vector<int32_t>> ids =
      flags.chat ? (*tok)->EncodeChat({{"user", flags.prompt, std::nullopt}}, {})
                 : (*tok)->Encode(flags.prompt);
  if (!ids.ok()) return Fail("encoding the prompt", ids.status());
  if (!flags.stop_given) {
    flags.params.stop_token_ids = (*model)->config().eos_token_ids;
    if (auto eos = (*tok)->eos_token_id(); eos.has_value()) {
      flags.params.stop_token_ids.push_back(*eos);
    }
  }

  generation::GenerationEngineOptions options;
  options.max_num_seqs = std::min<int64_t>(flags.params.n, 64);
  const int64_t needed = static_cast<int64_t>(ids->size()) + flags.params.max_new_tokens;
  const int64_t max_pos = (*model)->config().max_position_embeddings;
  options.max_model_len = max_pos > 0 ? std::min(needed, max_pos) : needed;
  auto engine = generation::GenerationEngine::Create(*model, options);
  if (!engine.ok()) return Fail("creating the engine", engine.status());

  generation::GenerationRequest request;
  request.request_id = "cli";
  request.prompt_ids.assign(ids->begin(), ids->end());
  request.params = flags.params;
  const auto start = std::chrono::steady_clock::now();
  auto samples = (*engine)->Generate({std::move(request)});
  if (!samples.ok()) return Fail("generating", samples.status());
  // Decode speed on stderr, stdout keeping the samples only: tokens of every sample over the
  // wall time of the whole generation, prefill included.
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  size_t tokens = 0;
  for (const generation::Sample& s : *samples) tokens += s.token_ids.size();
  std::fprintf(stderr, "rlmesh generate: %zu samples, %zu tokens in %.3f s: %.1f tokens/s\n",
               samples->size(), tokens, seconds,
               seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0);

  for (const generation::Sample& s : *samples) {
    std::vector<int32_t> out(s.token_ids.begin(), s.token_ids.end());
    auto text = (*tok)->Decode(out);
    double sum = 0;
    for (float lp : s.logprobs) sum += lp;
    const double mean = s.logprobs.empty() ? 0.0 : sum / static_cast<double>(s.logprobs.size());
    const std::string decoded =
        text.ok() ? *text : "<" + std::string(text.status().message()) + ">";
    if (flags.json) {
      nlohmann::json j = {{"index", s.index},
                          {"text", decoded},
                          {"token_ids", s.token_ids},
                          {"logprobs", s.logprobs},
                          {"finish_reason", generation::FinishReasonName(s.finish_reason)},
                          {"mean_logprob", mean}};
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("--- sample %d: finish %s, %zu tokens, mean logprob %.4f\n", s.index,
                  generation::FinishReasonName(s.finish_reason), s.token_ids.size(), mean);
      std::printf("ids: %s\n", nlohmann::json(s.token_ids).dump().c_str());
      std::printf("text: %s\n", decoded.c_str());
    }
    if (!s.error.ok()) return Fail("sample " + std::to_string(s.index), s.error);
  }
  return 0;
}

}  // namespace

RLMESH_REGISTER_COMMAND("generate",
                        "sample continuations of a prompt (temperature, top-p, top-k, n, seed)",
                        Generate);

}  // namespace rlmesh::cli
