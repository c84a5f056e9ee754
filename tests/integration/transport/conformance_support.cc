#include "tests/integration/transport/conformance_support.h"

#include <cstdlib>

namespace rlmesh::transport::testing {

namespace {

class Host : public Memory {
 public:
  void* Alloc(size_t bytes) override { return std::malloc(bytes == 0 ? 1 : bytes); }
  void Free(void* p) override { std::free(p); }
  void Upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void Download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
};

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::unique_ptr<Memory> HostMemory() { return std::make_unique<Host>(); }

std::vector<char> PatternBytes(uint64_t seed, uint64_t version, size_t index, size_t bytes) {
  std::vector<char> out(bytes);
  const uint64_t base = SplitMix(seed ^ SplitMix(version * 1000003 + index));
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t word = SplitMix(base + i);
    std::memcpy(out.data() + i, &word, std::min<size_t>(8, bytes - i));
  }
  return out;
}

SourceVersion::SourceVersion(Memory& memory, const std::vector<TensorMeta>& metas, uint64_t seed,
                             uint64_t version)
    : memory_(memory) {
  for (size_t i = 0; i < metas.size(); ++i) {
    const size_t bytes = metas[i].NumBytes();
    void* p = memory_.Alloc(bytes);
    const auto pattern = PatternBytes(seed, version, i, bytes);
    memory_.Upload(p, pattern.data(), bytes);
    views_.push_back({metas[i], p});
  }
}

SourceVersion::~SourceVersion() {
  for (auto& v : views_) memory_.Free(const_cast<void*>(v.data));
}

Sink::Sink(Memory& memory, const std::vector<TensorMeta>& metas) : memory_(memory), metas_(metas) {
  for (size_t i = 0; i < metas.size(); ++i) {
    index_[metas[i].name] = i;
    buffers_.push_back(memory_.Alloc(metas[i].NumBytes()));
  }
}

Sink::~Sink() {
  for (void* p : buffers_) memory_.Free(p);
}

DestinationFn Sink::Destination() {
  return [this](const TensorMeta& meta) -> StatusOr<void*> {
    auto it = index_.find(meta.name);
    if (it == index_.end())
      return InvalidArgumentError("tensor \"" + meta.name + "\": not expected here");
    if (!(metas_[it->second] == meta)) {
      return InvalidArgumentError("tensor \"" + meta.name +
                                  "\": dtype or shape differs from the expected one");
    }
    return buffers_[it->second];
  };
}

std::string Sink::Check(uint64_t seed, uint64_t version) const {
  for (size_t i = 0; i < metas_.size(); ++i) {
    const size_t bytes = metas_[i].NumBytes();
    std::vector<char> got(bytes);
    memory_.Download(got.data(), buffers_[i], bytes);
    const auto want = PatternBytes(seed, version, i, bytes);
    if (got != want) {
      size_t at = 0;
      while (at < bytes && got[at] == want[at]) ++at;
      return "tensor \"" + metas_[i].name + "\" (version " + std::to_string(version) +
             ") differs at byte " + std::to_string(at) + " of " + std::to_string(bytes);
    }
  }
  return "";
}

std::vector<TensorMeta> OddTensors() {
  return {
      {"model.embed_tokens.weight", DType::kBFloat16, {37, 13}},
      {"model.layers.0.self_attn.q_proj.weight", DType::kFloat32, {7, 11}},
      {"model.layers.0.self_attn.q_proj.bias", DType::kFloat32, {7}},
      {"model.layers.0.input_layernorm.weight", DType::kBFloat16, {1}},
      {"model.layers.0.mlp.up_proj.weight", DType::kBFloat16, {101, 3, 3}},
      {"empty", DType::kFloat32, {0, 5}},
      {"model.norm.weight", DType::kFloat32, {1001}},
      {"lm_head.weight", DType::kBFloat16, {513, 17}},
  };
}

std::vector<TensorMeta> ManyTensors(int small, int large, size_t large_bytes) {
  std::vector<TensorMeta> metas;
  for (int i = 0; i < small; ++i) {
    metas.push_back(
        {"small." + std::to_string(i), i % 2 ? DType::kBFloat16 : DType::kFloat32, {1 + i % 67}});
  }
  for (int i = 0; i < large; ++i) {
    metas.push_back(
        {"large." + std::to_string(i), DType::kBFloat16, {static_cast<int64_t>(large_bytes / 2)}});
  }
  return metas;
}

}  // namespace rlmesh::transport::testing
