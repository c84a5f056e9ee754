#include "common/transport/layout.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace rlmesh::transport {

StatusOr<Layout> Layout::Of(const std::vector<ConstTensorView>& tensors, size_t bucket_bytes) {
  std::vector<TensorMeta> metas;
  metas.reserve(tensors.size());
  for (const auto& t : tensors) metas.push_back(t.meta);
  return Create(std::move(metas), bucket_bytes);
}

StatusOr<Layout> Layout::Create(std::vector<TensorMeta> tensors, size_t bucket_bytes) {
  if (bucket_bytes == 0) return InvalidArgumentError("bucket_bytes: expected > 0, got 0");
  Layout layout;
  layout.bucket_bytes = bucket_bytes;
  std::set<std::string> names;
  size_t offset = 0;
  for (const auto& t : tensors) {
    if (DTypeSize(t.dtype) == 0) {
      return InvalidArgumentError("tensor \"" + t.name + "\": unknown dtype " + DTypeName(t.dtype));
    }
    for (int64_t d : t.shape) {
      if (d < 0) return InvalidArgumentError("tensor \"" + t.name + "\": negative dimension");
    }
    if (!names.insert(t.name).second) {
      return InvalidArgumentError("tensor \"" + t.name + "\": name appears twice in one version");
    }
    offset = (offset + kLayoutAlignment - 1) / kLayoutAlignment * kLayoutAlignment;
    layout.offsets.push_back(offset);
    offset += t.NumBytes();
  }
  layout.total_bytes = offset;
  layout.tensors = std::move(tensors);
  return layout;
}

size_t Layout::BucketEnd(size_t k) const { return std::min(total_bytes, (k + 1) * bucket_bytes); }

size_t Layout::PayloadBytes() const {
  size_t n = 0;
  for (const auto& t : tensors) n += t.NumBytes();
  return n;
}

std::vector<Layout::Piece> Layout::Pieces(size_t begin, size_t end) const {
  std::vector<Piece> pieces;
  // First tensor that ends after `begin`.
  auto it = std::upper_bound(offsets.begin(), offsets.end(), begin);
  size_t i = it == offsets.begin() ? 0 : static_cast<size_t>(it - offsets.begin()) - 1;
  for (; i < tensors.size() && offsets[i] < end; ++i) {
    const size_t t_begin = offsets[i];
    const size_t t_end = t_begin + tensors[i].NumBytes();
    const size_t lo = std::max(begin, t_begin);
    const size_t hi = std::min(end, t_end);
    if (lo < hi) pieces.push_back({i, lo - t_begin, lo, hi - lo});
  }
  return pieces;
}

namespace {

void PutU64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(b, 8);
}

void PutString(std::string* out, const std::string& s) {
  PutU64(out, s.size());
  out->append(s);
}

// Reads little-endian fields from a byte string; remembers the first truncation.
class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}
  uint64_t U64() {
    if (pos_ + 8 > bytes_.size()) {
      truncated_ = true;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return v;
  }
  std::string String() {
    const uint64_t n = U64();
    if (truncated_ || n > bytes_.size() - pos_) {
      truncated_ = true;
      return "";
    }
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  bool ok() const { return !truncated_ && pos_ == bytes_.size(); }

 private:
  const std::string& bytes_;
  size_t pos_ = 0;
  bool truncated_ = false;
};

}  // namespace

std::string EncodeManifest(const Manifest& m) {
  std::string out;
  PutU64(&out, m.version);
  PutString(&out, m.segment);
  PutU64(&out, m.segment_bytes);
  PutU64(&out, m.layout.bucket_bytes);
  PutU64(&out, m.layout.tensors.size());
  for (const auto& t : m.layout.tensors) {
    PutString(&out, t.name);
    PutU64(&out, static_cast<uint64_t>(t.dtype));
    PutU64(&out, t.shape.size());
    for (int64_t d : t.shape) PutU64(&out, static_cast<uint64_t>(d));
  }
  return out;
}

StatusOr<Manifest> DecodeManifest(const std::string& bytes) {
  Reader r(bytes);
  Manifest m;
  m.version = r.U64();
  m.segment = r.String();
  m.segment_bytes = r.U64();
  const size_t bucket_bytes = r.U64();
  const uint64_t n = r.U64();
  if (n > bytes.size()) return InvalidArgumentError("manifest: tensor count exceeds its size");
  std::vector<TensorMeta> tensors(n);
  for (auto& t : tensors) {
    t.name = r.String();
    t.dtype = static_cast<DType>(r.U64());
    const uint64_t rank = r.U64();
    if (rank > 64) return InvalidArgumentError("manifest: tensor \"" + t.name + "\" has rank > 64");
    for (uint64_t i = 0; i < rank; ++i) t.shape.push_back(static_cast<int64_t>(r.U64()));
  }
  if (!r.ok()) {
    return InvalidArgumentError("manifest: expected " + std::to_string(bytes.size()) +
                                " bytes of well-formed fields, found truncated or trailing bytes");
  }
  TRANSPORT_ASSIGN_OR_RETURN(m.layout, Layout::Create(std::move(tensors), bucket_bytes));
  return m;
}

}  // namespace rlmesh::transport
