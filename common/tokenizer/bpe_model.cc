#include "common/tokenizer/bpe_model.h"

#include <limits>
#include <queue>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/tokenizer/byte_level.h"

namespace rlmesh::tokenizer {
namespace {

// Above this many bytes a word is merged with a heap instead of rescanning all pairs.
constexpr size_t kSmallWord = 48;
constexpr size_t kMaxCachedWord = 256;

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(
    absl::flat_hash_map<std::string, int32_t> vocab,
    const std::vector<std::pair<std::string, std::string>>& merges,
    const BpeModelOptions& options) {
  auto model = std::unique_ptr<BpeModel>(new BpeModel());
  model->options_ = options;
  int32_t max_id = -1;
  for (const auto& [bytes, id] : vocab) {
    if (id < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.vocab: token \"", BytesToByteLevel(bytes), "\" has negative id ", id));
    }
    max_id = std::max(max_id, id);
  }
  model->id_to_bytes_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [bytes, id] : vocab) model->id_to_bytes_[id] = bytes;
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(std::string(1, static_cast<char>(b)));
    if (it == vocab.end()) {
      std::string spelled;
      AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), spelled);
      return absl::InvalidArgumentError(
          absl::StrCat("model.vocab: expected every byte to be a token (byte-level BPE), byte 0x",
                       absl::Hex(b, absl::kZeroPad2), " (\"", spelled, "\") is missing"));
    }
    model->byte_ids_[b] = it->second;
  }
  model->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto l = vocab.find(left), r = vocab.find(right), m = vocab.find(left + right);
    if (l == vocab.end() || r == vocab.end() || m == vocab.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.merges[", rank, "] \"", BytesToByteLevel(left), " ", BytesToByteLevel(right),
          "\": expected both parts and their concatenation in model.vocab, \"",
          BytesToByteLevel(l == vocab.end()   ? left
                           : r == vocab.end() ? right
                                              : left + right),
          "\" is not"));
    }
    // A repeated pair keeps its last rank, as both reference implementations do.
    model->merges_.insert_or_assign(PairKey(l->second, r->second),
                                    MergeResult{static_cast<int32_t>(rank), m->second});
  }
  model->vocab_ = std::move(vocab);
  return model;
}

const BpeModel::MergeResult* BpeModel::FindMerge(int32_t a, int32_t b) const {
  auto it = merges_.find(PairKey(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

const std::string* BpeModel::TokenBytes(int32_t id) const {
  if (id < 0 || id >= id_limit() || !id_to_bytes_[id].has_value()) return nullptr;
  return &*id_to_bytes_[id];
}

std::optional<int32_t> BpeModel::TokenId(std::string_view bytes) const {
  auto it = vocab_.find(Av(bytes));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

// Keeps the rank of each adjacent pair; each step finds the minimum by a linear scan.
void BpeModel::MergeSmall(std::vector<int32_t>& ids) const {
  constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
  std::vector<int32_t> ranks(ids.size(), kNone), results(ids.size(), -1);
  auto rank_pair = [&](size_t i) {
    const MergeResult* m = FindMerge(ids[i], ids[i + 1]);
    ranks[i] = m ? m->rank : kNone;
    results[i] = m ? m->id : -1;
  };
  for (size_t i = 0; i + 1 < ids.size(); ++i) rank_pair(i);
  while (ids.size() > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < ids.size(); ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNone) break;
    ids[best] = results[best];
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    ranks.erase(ranks.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    results.erase(results.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    ranks.back() = kNone;
    if (best + 1 < ids.size()) rank_pair(best);
    if (best > 0) rank_pair(best - 1);
  }
}

// Symbols in a linked list, candidate merges in a min-heap keyed by (rank, position);
// stale heap entries are skipped when popped.
void BpeModel::MergeLarge(std::vector<int32_t>& ids) const {
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, pos, result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const MergeResult* m = FindMerge(ids[pos], ids[next[pos]])) {
      heap.push(Candidate{m->rank, pos, m->id});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.pos] || next[c.pos] < 0) continue;
    const MergeResult* m = FindMerge(ids[c.pos], ids[next[c.pos]]);
    if (m == nullptr || m->rank != c.rank || m->id != c.result) continue;
    const int32_t gone = next[c.pos];
    ids[c.pos] = c.result;
    alive[gone] = false;
    next[c.pos] = next[gone];
    if (next[gone] >= 0) prev[next[gone]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  std::vector<int32_t> merged;
  for (int32_t i = 0; i >= 0; i = next[i]) merged.push_back(ids[i]);
  ids.swap(merged);
}

void BpeModel::Encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(word[0])]);
    return;
  }
  if (options_.ignore_merges) {
    auto it = vocab_.find(Av(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = options_.cache_capacity > 0 && word.size() <= kMaxCachedWord;
  CacheShard* shard = nullptr;
  if (cacheable) {
    shard = &cache_[absl::HashOf(Av(word)) % kCacheShards];
    absl::MutexLock lock(&shard->mu);
    auto it = shard->words.find(Av(word));
    if (it != shard->words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  for (char c : word) ids.push_back(byte_ids_[static_cast<uint8_t>(c)]);
  if (ids.size() <= kSmallWord) {
    MergeSmall(ids);
  } else {
    MergeLarge(ids);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    absl::MutexLock lock(&shard->mu);
    // A full shard starts over: simpler than LRU and cheap, since words repeat in bursts.
    if (shard->words.size() >= options_.cache_capacity / kCacheShards + 1) shard->words.clear();
    shard->words.emplace(std::string(word), std::move(ids));
  }
}

}  // namespace rlmesh::tokenizer
