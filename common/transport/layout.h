// The byte layout of one version, shared by sender and receivers: tensors packed in order into
// one flat range (each start aligned to 256 bytes, which suits both vector copies and CUDA),
// cut into buckets of `bucket_bytes`. A tensor may span buckets; Pieces() says which part of
// which tensor lies in a bucket. Also the manifest's wire encoding. Plain data; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/transport/status.h"
#include "common/transport/transport.h"

namespace rlmesh::transport {

struct Layout {
  std::vector<TensorMeta> tensors;
  std::vector<size_t> offsets;  // start of each tensor in the flat range
  size_t total_bytes = 0;       // end of the last tensor
  size_t bucket_bytes = 0;

  // Fails (InvalidArgument naming the tensor) on an unknown dtype, a negative dimension, a
  // duplicate name, or bucket_bytes == 0.
  static StatusOr<Layout> Create(std::vector<TensorMeta> tensors, size_t bucket_bytes);
  // The layout of the tensors a sender publishes (their metadata, in order).
  static StatusOr<Layout> Of(const std::vector<ConstTensorView>& tensors, size_t bucket_bytes);

  size_t NumBuckets() const { return (total_bytes + bucket_bytes - 1) / bucket_bytes; }
  size_t BucketBegin(size_t k) const { return k * bucket_bytes; }
  size_t BucketEnd(size_t k) const;
  size_t PayloadBytes() const;

  // Part of tensor `tensor` lying in the flat range [begin, end).
  struct Piece {
    size_t tensor;         // index into tensors
    size_t tensor_offset;  // byte offset inside the tensor
    size_t flat_offset;    // byte offset in the flat range
    size_t bytes;
  };
  std::vector<Piece> Pieces(size_t begin, size_t end) const;
};

inline constexpr size_t kLayoutAlignment = 256;

// The manifest a sender announces before the bytes of a version.
struct Manifest {
  uint64_t version = 0;
  std::string segment;       // backend data: shm segment name ("" for NCCL)
  size_t segment_bytes = 0;  // size of that segment
  Layout layout;
};

std::string EncodeManifest(const Manifest& manifest);
// InvalidArgument when the bytes are truncated or inconsistent.
StatusOr<Manifest> DecodeManifest(const std::string& bytes);

}  // namespace rlmesh::transport
