// `rlmesh logprobs --model DIR [--temperature T] [--device D] [--dtype T]`: one JSON array of
// token ids per stdin line; prints, per line and in order, the JSON array of the log-probs of
// tokens 2..n under the model (logits divided by T first, as the trainer does). Lines are run in
// padded batches. --device and --dtype run the model as rlmesh.device and rlmesh.dtype do, so
// the same ids give the CPU float32 path and the CUDA or bfloat16 one side by side (the GPU
// script's parity check, tests/gpu/run.sh).
#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "cli/command.h"
#include "cli/model_flags.h"
#include "common/model/causal_lm.h"
#include "common/model/pretrained.h"

namespace rlmesh::cli {
namespace {

constexpr char kUsage[] =
    "usage: rlmesh logprobs --model DIR [--temperature T] [--batch-size N] [--device D]\n"
    "                       [--dtype T] < ids.jsonl\n"
    "  stdin: one JSON array of token ids per line\n"
    "  stdout: per line, the JSON array of log p(token i | tokens < i) for i = 2..n\n"
    "  --temperature T   divide the logits by T first (default 1.0, as in training)\n"
    "  --batch-size N    sequences per forward pass (default 8)\n";

// Log-probs of rows[i][1..] under `model`, one forward over the right-padded batch.
std::vector<std::vector<float>> BatchLogProbs(model::CausalLmImpl& model,
                                              const std::vector<std::vector<int64_t>>& rows,
                                              double temperature) {
  const int64_t b = static_cast<int64_t>(rows.size());
  int64_t t = 1;
  for (const auto& r : rows) t = std::max<int64_t>(t, static_cast<int64_t>(r.size()));
  torch::Tensor ids = torch::zeros({b, t}, torch::kInt64);
  torch::Tensor mask = torch::zeros({b, t}, torch::kInt64);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t n = static_cast<int64_t>(rows[i].size());
    if (n == 0) continue;
    ids[i].narrow(0, 0, n).copy_(torch::tensor(rows[i], torch::kInt64));
    mask[i].narrow(0, 0, n).fill_(1);
  }
  torch::Tensor positions = torch::arange(t, torch::kInt64).unsqueeze(0).expand({b, t});
  const torch::Device device = model.parameters().front().device();
  ids = ids.to(device);
  mask = mask.to(device);
  positions = positions.to(device);
  torch::NoGradGuard no_grad;
  torch::Tensor logits = model.Forward(ids, mask, positions);
  std::vector<std::vector<float>> out(rows.size());
  if (t < 2) return out;
  torch::Tensor lp =
      model::LogProbsFromLogits(logits.narrow(1, 0, t - 1), ids.narrow(1, 1, t - 1), temperature)
          .to(torch::kCPU)
          .contiguous();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t n = static_cast<int64_t>(rows[i].size());
    const float* row = lp[i].data_ptr<float>();
    if (n > 1) out[i].assign(row, row + n - 1);
  }
  return out;
}

int LogProbs(int argc, char** argv) {
  std::string model_dir;
  double temperature = 1.0;
  int64_t batch_size = 8;
  ModelFlags model_flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::fputs(kModelFlagsUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "rlmesh logprobs: %s needs a value\n%s", arg.c_str(), kUsage);
      return 2;
    }
    const std::string value = argv[++i];
    bool ok = true;
    if (arg == "--model") {
      model_dir = value;
    } else if (arg == "--temperature") {
      ok = absl::SimpleAtod(value, &temperature) && temperature > 0;
    } else if (arg == "--batch-size") {
      ok = absl::SimpleAtoi(value, &batch_size) && batch_size >= 1;
    } else if (const int taken = TakeModelFlag("logprobs", arg, value, model_flags); taken != 0) {
      if (taken < 0) return 2;
    } else {
      std::fprintf(stderr, "rlmesh logprobs: unknown flag %s\n%s", arg.c_str(), kUsage);
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "rlmesh logprobs: %s: expected a positive number, got \"%s\"\n",
                   arg.c_str(), value.c_str());
      return 2;
    }
  }
  if (model_dir.empty()) {
    std::fprintf(stderr, "rlmesh logprobs: --model is required\n%s", kUsage);
    return 2;
  }
  model::CausalLmOptions options;
  if (!ModelOptionsOf("logprobs", model_flags, &options)) return 1;
  at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  auto model = model::LoadPretrained(model_dir, options);
  if (!model.ok()) {
    std::fprintf(stderr, "rlmesh logprobs: loading the model: %s\n",
                 std::string(model.status().message()).c_str());
    return 1;
  }
  (*model)->eval();
  const int64_t vocab = (*model)->config().vocab_size;

  std::vector<std::vector<int64_t>> batch;
  auto flush = [&]() -> bool {
    if (batch.empty()) return true;
    std::vector<std::vector<float>> lps;
    try {
      lps = BatchLogProbs(**model, batch, temperature);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rlmesh logprobs: forward pass failed: %s\n", e.what());
      return false;
    }
    for (const auto& row : lps) std::printf("%s\n", nlohmann::json(row).dump().c_str());
    std::fflush(stdout);
    batch.clear();
    return true;
  };
  std::string line;
  int64_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    auto parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    bool valid = parsed.is_array();
    std::vector<int64_t> ids;
    for (const auto& v : valid ? parsed : nlohmann::json::array()) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab) {
        valid = false;
        break;
      }
      ids.push_back(v.get<int64_t>());
    }
    if (!valid) {
      std::fprintf(stderr,
                   "rlmesh logprobs: stdin line %lld: expected a JSON array of token ids in "
                   "[0, %lld), got %s\n",
                   static_cast<long long>(line_no), static_cast<long long>(vocab),
                   line.substr(0, 200).c_str());
      return 1;
    }
    batch.push_back(std::move(ids));
    if (static_cast<int64_t>(batch.size()) == batch_size && !flush()) return 1;
  }
  return flush() ? 0 : 1;
}

}  // namespace

RLMESH_REGISTER_COMMAND("logprobs",
                        "log-probs of token-id sequences under a model (one JSON array a line)",
                        LogProbs);

}  // namespace rlmesh::cli
