// The byte-level BPE model: vocabulary, ranked merges, and the merge loop that turns one
// pre-token (raw bytes) into token ids, with a cache of recent words.
//
// Tokens are held as raw bytes (the byte-level spelling of tokenizer.json is undone at
// load time), so encoding never builds byte-level strings. Merging follows the reference:
// repeatedly apply the lowest-ranked merge present, leftmost first among equal ranks; with
// `ignore_merges` a word that is itself in the vocabulary is emitted as one token. `Encode`
// is thread-safe (the cache is sharded and mutex-guarded).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace rlmesh::tokenizer {

struct BpeModelOptions {
  bool ignore_merges = false;
  // Words cached at most (0 disables the cache); words longer than 256 bytes are not cached.
  size_t cache_capacity = 1 << 17;
};

class BpeModel {
 public:
  // `vocab` maps raw-byte tokens to ids; `merges` lists pairs of raw-byte tokens by rank
  // (index 0 = applied first). Every single byte must be a token, and every merge's parts
  // and result must be in the vocabulary; errors name the offending byte or merge.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(
      absl::flat_hash_map<std::string, int32_t> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges,
      const BpeModelOptions& options);

  // Appends the ids of `word` (raw bytes, one pre-token) to `out`.
  void Encode(std::string_view word, std::vector<int32_t>& out) const;

  // The raw bytes of token `id`, or nullptr when `id` is not a model token.
  const std::string* TokenBytes(int32_t id) const;
  std::optional<int32_t> TokenId(std::string_view bytes) const;
  // One more than the largest model token id.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_bytes_.size()); }
  size_t num_merges() const { return merges_.size(); }

 private:
  struct MergeResult {
    int32_t rank;
    int32_t id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  const MergeResult* FindMerge(int32_t a, int32_t b) const;
  void MergeSmall(std::vector<int32_t>& ids) const;
  void MergeLarge(std::vector<int32_t>& ids) const;

  BpeModelOptions options_;
  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::optional<std::string>> id_to_bytes_;
  std::array<int32_t, 256> byte_ids_{};
  absl::flat_hash_map<uint64_t, MergeResult> merges_;

  static constexpr size_t kCacheShards = 16;
  struct CacheShard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> words ABSL_GUARDED_BY(mu);
  };
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace rlmesh::tokenizer
