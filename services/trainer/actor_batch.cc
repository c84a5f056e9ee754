#include "services/trainer/actor_batch.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/grpo/grpo.h"
#include "common/status/status_macros.h"

namespace rlmesh::trainer {
namespace {

std::string ShapeString(const torch::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]");
}

absl::Status CheckMatrix(const torch::Tensor& t, absl::string_view name, int64_t rows,
                         int64_t cols) {
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(name, ": missing"));
  if (t.dim() != 2 || t.size(0) != rows || t.size(1) != cols) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected shape [", rows, ", ", cols,
                                                   "] (that of input_ids), got ",
                                                   ShapeString(t)));
  }
  return absl::OkStatus();
}

absl::Status CheckInt64(const torch::Tensor& t, absl::string_view name) {
  if (t.scalar_type() != torch::kInt64) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected dtype int64, got ",
                                                   std::string(c10::toString(t.scalar_type()))));
  }
  return absl::OkStatus();
}

absl::Status CheckBinary(const torch::Tensor& t, absl::string_view name) {
  if (t.scalar_type() == torch::kBool) return absl::OkStatus();
  const auto bad = (t != 0) & (t != 1);
  if (bad.any().item<bool>()) {
    const auto where = bad.nonzero()[0];
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": expected only 0 and 1, got ", t[where[0]][where[1]].item<double>(), " at [",
        where[0].item<int64_t>(), ", ", where[1].item<int64_t>(), "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckFiniteFloating(const torch::Tensor& t, absl::string_view name) {
  if (!t.is_floating_point()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected a floating-point tensor, got dtype ",
                     std::string(c10::toString(t.scalar_type()))));
  }
  const auto bad = ~torch::isfinite(t);
  if (bad.any().item<bool>()) {
    const auto where = bad.nonzero()[0];
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": expected finite values, got ", t[where[0]][where[1]].item<double>(), " at [",
        where[0].item<int64_t>(), ", ", where[1].item<int64_t>(), "]"));
  }
  return absl::OkStatus();
}

absl::Status ValidateOrThrow(const ActorBatch& batch, const BatchNeeds& needs) {
  const auto& ids = batch.input_ids;
  if (!ids.defined()) return absl::InvalidArgumentError("input_ids: missing");
  if (ids.dim() != 2 || ids.size(0) < 1 || ids.size(1) < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input_ids: expected shape [B, T] with B >= 1 and T >= 2, got ", ShapeString(ids)));
  }
  const int64_t b = ids.size(0), t = ids.size(1);
  RETURN_IF_ERROR(CheckInt64(ids, "input_ids"));
  RETURN_IF_ERROR(CheckMatrix(batch.attention_mask, "attention_mask", b, t));
  RETURN_IF_ERROR(CheckBinary(batch.attention_mask, "attention_mask"));
  RETURN_IF_ERROR(CheckMatrix(batch.position_ids, "position_ids", b, t));
  RETURN_IF_ERROR(CheckInt64(batch.position_ids, "position_ids"));
  RETURN_IF_ERROR(CheckMatrix(batch.response_mask, "response_mask", b, t));
  RETURN_IF_ERROR(CheckBinary(batch.response_mask, "response_mask"));
  const auto response = batch.response_mask.to(torch::kBool);
  if (response.select(1, 0).any().item<bool>()) {
    return absl::InvalidArgumentError(
        "response_mask: column 0 must be 0 (the first token has no logits before it)");
  }
  if ((response & ~batch.attention_mask.to(torch::kBool)).any().item<bool>()) {
    return absl::InvalidArgumentError(
        "response_mask: is 1 where attention_mask is 0 (response tokens must be attended)");
  }
  const struct {
    bool needed;
    const torch::Tensor& tensor;
    const char* name;
  } optional[] = {{needs.old_log_probs, batch.old_log_probs, "old_log_probs"},
                  {needs.ref_log_probs, batch.ref_log_probs, "ref_log_probs"},
                  {needs.advantages, batch.advantages, "advantages"}};
  for (const auto& field : optional) {
    if (!field.needed) continue;
    RETURN_IF_ERROR(CheckMatrix(field.tensor, field.name, b, t));
    RETURN_IF_ERROR(CheckFiniteFloating(field.tensor, field.name));
  }
  if (batch.rollout_is_weights.defined()) {
    RETURN_IF_ERROR(CheckMatrix(batch.rollout_is_weights, "rollout_is_weights", b, t));
    RETURN_IF_ERROR(CheckFiniteFloating(batch.rollout_is_weights, "rollout_is_weights"));
    if ((batch.rollout_is_weights < 0).any().item<bool>()) {
      return absl::InvalidArgumentError("rollout_is_weights: expected values >= 0");
    }
  }
  return absl::OkStatus();
}

torch::Tensor ShiftedLogits(const torch::Tensor& logits, double temperature) {
  return logits.slice(1, 0, logits.size(1) - 1) / temperature;
}

torch::Tensor PrependZeroColumn(const torch::Tensor& x) {
  return torch::cat({torch::zeros({x.size(0), 1}, x.options()), x}, 1);
}

}  // namespace

absl::Status ValidateBatch(const ActorBatch& batch, const BatchNeeds& needs) {
  try {
    return ValidateOrThrow(batch, needs);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch: could not be checked: ", e.what_without_backtrace()));
  }
}

ActorBatch SelectRows(const ActorBatch& batch, const torch::Tensor& index) {
  auto rows = [&](const torch::Tensor& t) {
    return t.defined() ? t.index_select(0, index) : torch::Tensor();
  };
  return {rows(batch.input_ids),     rows(batch.attention_mask),    rows(batch.position_ids),
          rows(batch.response_mask), rows(batch.old_log_probs),     rows(batch.ref_log_probs),
          rows(batch.advantages),    rows(batch.rollout_is_weights)};
}

torch::Tensor TokenLogProbs(const torch::Tensor& logits, const torch::Tensor& input_ids,
                            double temperature) {
  // z[y] - logsumexp(z) avoids materialising a second [B, T, V] log-softmax tensor.
  const auto z = ShiftedLogits(logits, temperature);
  const auto targets = input_ids.slice(1, 1, input_ids.size(1)).unsqueeze(2);
  const auto picked = z.gather(2, targets).squeeze(2);
  return PrependZeroColumn(picked - torch::logsumexp(z, 2));
}

absl::StatusOr<torch::Tensor> TokenEntropy(const torch::Tensor& logits, double temperature) {
  ASSIGN_OR_RETURN(auto entropy, grpo::EntropyFromLogits(ShiftedLogits(logits, temperature)));
  return PrependZeroColumn(entropy);
}

PackedRows PackRows(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                    const torch::Tensor& position_ids) {
  PackedRows packed;
  packed.rows = input_ids.size(0);
  packed.cols = input_ids.size(1);
  const auto valid = attention_mask.to(torch::kBool);
  packed.index = valid.reshape({-1}).nonzero().reshape({-1});
  packed.input_ids = input_ids.reshape({-1}).index_select(0, packed.index).unsqueeze(0);
  packed.position_ids = position_ids.reshape({-1}).index_select(0, packed.index).unsqueeze(0);
  const auto lengths = valid.sum(1).to(torch::kCPU, torch::kInt64);
  packed.cu_seqlens = torch::cat({torch::zeros({1}, torch::kInt64), lengths.cumsum(0)});
  packed.starts = torch::zeros({packed.index.numel()}, torch::kBool);
  const auto firsts = packed.cu_seqlens.slice(0, 0, packed.rows);
  packed.starts.index_fill_(0, firsts.masked_select(lengths > 0), true);
  packed.starts = packed.starts.to(input_ids.device());
  return packed;
}

namespace {

// A packed token's score (from the logits before it) back at its place in [B, T].
torch::Tensor Unpack(const torch::Tensor& shifted, const PackedRows& packed) {
  auto flat =
      torch::cat({torch::zeros({1}, shifted.options()), shifted}).masked_fill(packed.starts, 0);
  return torch::zeros({packed.rows * packed.cols}, flat.options())
      .index_copy(0, packed.index, flat)
      .view({packed.rows, packed.cols});
}

torch::Tensor PackedShifted(const torch::Tensor& logits, double temperature) {
  return logits.select(0, 0).slice(0, 0, logits.size(1) - 1) / temperature;  // [N - 1, V]
}

}  // namespace

torch::Tensor PackedTokenLogProbs(const torch::Tensor& logits, const PackedRows& packed,
                                  double temperature) {
  const auto z = PackedShifted(logits, temperature);
  const auto targets = packed.input_ids.select(0, 0).slice(0, 1).unsqueeze(1);
  return Unpack(z.gather(1, targets).squeeze(1) - torch::logsumexp(z, 1), packed);
}

absl::StatusOr<torch::Tensor> PackedTokenEntropy(const torch::Tensor& logits,
                                                 const PackedRows& packed, double temperature) {
  ASSIGN_OR_RETURN(auto entropy, grpo::EntropyFromLogits(PackedShifted(logits, temperature)));
  return Unpack(entropy, packed);
}

absl::StatusOr<TokenScores> ScoreTokens(const ActorBatch& rows, double temperature, bool pack,
                                        EntropyNeed entropy, const RowLogits& logits) {
  std::optional<PackedRows> packed;
  if (pack) {
    packed = PackRows(rows.input_ids, rows.attention_mask, rows.position_ids);
    if (packed->index.numel() == 0) packed.reset();  // no token to pack: the padded forward
  }
  ASSIGN_OR_RETURN(
      auto z,
      packed ? logits(packed->input_ids, packed->position_ids, packed->cu_seqlens, /*packed=*/true)
             : logits(rows.input_ids, rows.attention_mask, rows.position_ids, /*packed=*/false));
  TokenScores out;
  out.tokens = packed ? packed->input_ids.numel() : rows.input_ids.numel();
  out.log_probs = packed ? PackedTokenLogProbs(z, *packed, temperature)
                         : TokenLogProbs(z, rows.input_ids, temperature);
  if (entropy != EntropyNeed::kNone) {
    std::optional<torch::NoGradGuard> no_grad;
    if (entropy == EntropyNeed::kValue) no_grad.emplace();
    ASSIGN_OR_RETURN(out.entropy, packed ? PackedTokenEntropy(z, *packed, temperature)
                                         : TokenEntropy(z, temperature));
  }
  return out;
}

}  // namespace rlmesh::trainer
