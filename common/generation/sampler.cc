#include "common/generation/sampler.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace rlmesh::generation {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Orders token ids most likely first, ties by lower id (a strict weak order).
struct MoreLikely {
  const float* probs;
  bool operator()(int64_t a, int64_t b) const {
    return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
  }
};

// Keeps the smallest most-likely-first prefix of `ids` whose mass is >= top_p of the mass of
// `ids`, and leaves `ids` sorted. Sorts only as much as needed: the kept set is usually a small
// part of a large vocabulary, so it partially sorts 64, 256, ... candidates until the prefix
// mass suffices.
void TruncateToMass(const float* probs, double top_p, std::vector<int64_t>* ids) {
  double total = 0.0;
  for (int64_t id : *ids) total += probs[id];
  const double need = top_p * total;
  const MoreLikely more_likely{probs};
  size_t m = std::min<size_t>(ids->size(), 64);
  while (true) {
    std::partial_sort(ids->begin(), ids->begin() + m, ids->end(), more_likely);
    if (top_p < 1.0) {
      double cumulative = 0.0;
      for (size_t i = 0; i < m; ++i) {
        cumulative += probs[(*ids)[i]];
        if (cumulative >= need) {
          ids->resize(i + 1);
          return;
        }
      }
    }
    if (m == ids->size()) return;  // everything kept (top_p = 1, or rounding at the end)
    m = std::min(ids->size(), m * 4);
  }
}

}  // namespace

torch::Generator MakeSequenceGenerator(uint64_t seed, int64_t index) {
  const uint64_t mixed = SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(index)));
  return at::make_generator<at::CPUGeneratorImpl>(mixed);
}

double NextUniform(torch::Generator& generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  const uint64_t bits = generator.get<at::CPUGeneratorImpl>()->random64();
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

std::vector<int64_t> TopKTopPSupport(const float* probs, int64_t vocab, int64_t top_k,
                                     double top_p) {
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    if (probs[i] > 0.0f) ids.push_back(i);
  }
  if (ids.empty()) {  // every token banned or underflowed: keep the first most likely one
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i) {
      if (probs[i] > probs[best]) best = i;
    }
    return {best};
  }
  const MoreLikely more_likely{probs};
  if (top_k > 0 && static_cast<size_t>(top_k) < ids.size()) {
    std::nth_element(ids.begin(), ids.begin() + (top_k - 1), ids.end(), more_likely);
    const float kth = probs[ids[top_k - 1]];
    // Ties of the k-th value stay, as in Hugging Face's and vLLM's `logits < kth` masking.
    std::vector<int64_t> kept;
    for (int64_t id : ids) {
      if (probs[id] >= kth) kept.push_back(id);
    }
    ids = std::move(kept);
  }
  TruncateToMass(probs, top_p, &ids);
  return ids;
}

int64_t DrawFromSupport(const float* probs, const std::vector<int64_t>& support, double u) {
  double mass = 0.0;
  for (int64_t id : support) mass += probs[id];
  const double target = u * mass;
  double cumulative = 0.0;
  for (int64_t id : support) {
    cumulative += probs[id];
    if (cumulative > target) return id;
  }
  return support.back();  // u * mass rounded up to the full mass
}

absl::StatusOr<std::unique_ptr<Sampler>> Sampler::Create(const SamplerOptions& options) {
  for (int64_t id : options.banned_token_ids) {
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampler banned_token_ids: expected ids >= 0, got ", id));
    }
  }
  return std::unique_ptr<Sampler>(new Sampler(options));
}

absl::StatusOr<Sampler::Result> Sampler::Sample(const torch::Tensor& logits,
                                                const std::vector<Row>& rows) const {
  if (logits.dim() != 2 || logits.size(0) != static_cast<int64_t>(rows.size())) {
    return absl::InvalidArgumentError(absl::StrCat("sampler logits: expected shape [",
                                                   rows.size(), ", V], got ",
                                                   c10::str(logits.sizes())));
  }
  const int64_t batch = logits.size(0);
  const int64_t vocab = logits.size(1);
  std::vector<char> banned(static_cast<size_t>(vocab), 0);
  for (int64_t id : options_.banned_token_ids) {
    if (id >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sampler banned_token_ids: id ", id, " is outside the vocabulary of ", vocab));
    }
    banned[id] = 1;
  }
  Result result;
  result.tokens.resize(batch);
  result.logprobs.resize(batch);
  if (batch == 0) return result;

  torch::NoGradGuard no_grad;
  const torch::Tensor x = logits.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  std::vector<float> temperatures(batch);
  bool all_one = true;
  bool any_sampled = false;
  for (int64_t b = 0; b < batch; ++b) {
    temperatures[b] = static_cast<float>(rows[b].params->logprob_temperature());
    all_one = all_one && temperatures[b] == 1.0f;
    any_sampled = any_sampled || !rows[b].params->greedy();
  }
  torch::Tensor scaled = x;
  if (!all_one) {
    scaled = x / torch::from_blob(temperatures.data(), {batch, 1}, torch::kFloat32);
  }
  const torch::Tensor logprobs = torch::log_softmax(scaled, 1).contiguous();
  torch::Tensor probs;
  if (any_sampled) {
    probs = logprobs.exp();
    if (!options_.banned_token_ids.empty()) {
      probs.index_fill_(1, torch::tensor(options_.banned_token_ids, torch::kInt64), 0.0);
    }
  }

  const float* x_data = x.data_ptr<float>();
  const float* lp_data = logprobs.data_ptr<float>();
  for (int64_t b = 0; b < batch; ++b) {
    const SamplingParams& params = *rows[b].params;
    int64_t token = -1;
    if (params.greedy()) {
      const float* row = x_data + b * vocab;
      for (int64_t i = 0; i < vocab; ++i) {
        if (!banned[i] && (token < 0 || row[i] > row[token])) token = i;
      }
      if (token < 0) token = 0;  // the whole vocabulary banned: nothing sensible to choose
    } else {
      const float* row = probs.data_ptr<float>() + b * vocab;
      const double u = NextUniform(*rows[b].generator);
      const bool truncate =
          (params.top_k > 0 && params.top_k < vocab) || params.top_p < 1.0;
      if (truncate) {
        token = DrawFromSupport(row, TopKTopPSupport(row, vocab, params.top_k, params.top_p), u);
      } else {
        // Whole-vocabulary inverse CDF in id order: no sort needed.
        double mass = 0.0;
        for (int64_t i = 0; i < vocab; ++i) mass += row[i];
        const double target = u * mass;
        double cumulative = 0.0;
        for (int64_t i = 0; i < vocab; ++i) {
          if (row[i] <= 0.0f) continue;
          token = i;
          cumulative += row[i];
          if (cumulative > target) break;
        }
        if (token < 0) token = TopKTopPSupport(row, vocab, -1, 1.0).front();
      }
    }
    result.tokens[b] = token;
    result.logprobs[b] = lp_data[b * vocab + token];
  }
  return result;
}

}  // namespace rlmesh::generation
