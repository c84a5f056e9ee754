// Float32 CPU kernels of the KV-cached decoder (internal to common/model): the matrix
// products, norms, RoPE and attention of CausalLmImpl::ForwardCached on x86-64 with AVX-512,
// on raw row-major buffers. They exist because at batch 1-64 the ATen path spends most of
// its time outside arithmetic: per-op dispatch, BLAS packing of the whole weight matrix for a
// few rows, a gather and an additive mask per layer, one small BLAS call per attention head.
//
// Every function may be called from one thread at a time per output buffer and parallelises
// itself over at::get_num_threads() threads: its own spinning workers (spin_pool.h), not
// OpenMP's, whose wake-up at every call made a 2-thread decode step as slow as one thread.
// Callers check CpuKernelsAvailable() first; on other CPUs the ATen path runs instead.
#pragma once

#include <cstdint>

namespace rlmesh::model::internal {

// True when the running CPU has AVX-512F (checked once).
bool CpuKernelsAvailable();

// y[i, :] (= or +=) x[i, :] W^T + bias for x [m, k] (row stride ldx), W [n, k] contiguous,
// bias [n] or null, y [m, n] (row stride ldy). accumulate: add to y instead of overwriting
// (the residual connection). Up to 64 rows (decoding) the product is this file's own: for
// 2 <= m <= 64 each output is one sequential sum over k, so a row's result does not depend
// on the other rows or on their number. Above 64 rows (prefill) it goes to OpenBLAS's sgemm
// through ATen, which is faster there, and results may differ in the last bits with m.
void LinearF32(const float* x, int64_t ldx, int64_t m, int64_t k, const float* w, int64_t n,
               const float* bias, float* y, int64_t ldy, bool accumulate);

// y[i, :] = weight * x[i, :] / sqrt(mean(x[i, :]^2) + eps) for m rows of d (x, y contiguous,
// may alias).
void RmsNormF32(const float* x, int64_t m, int64_t d, const float* weight, double eps, float* y);

// y[i, j] = silu(gu[i, j]) * gu[i, inter + j] for gu [m, 2 * inter], y [m, inter].
void SiluMulF32(const float* gu, int64_t m, int64_t inter, float* y);

// Where the rows of a cached forward go: row r of the batch (of `rows` rows of `t` tokens)
// belongs to cache slot slots[r], holds num_new[r] real tokens (the rest padding) at
// positions lengths[r] .. lengths[r] + num_new[r] - 1.
struct CachedRows {
  int64_t rows = 0;
  int64_t t = 0;
  const int64_t* slots = nullptr;
  const int64_t* lengths = nullptr;  // tokens cached before this forward
  const int64_t* num_new = nullptr;
};

// Shapes of one attention layer and its cache: cache [max_seqs, kv_heads, max_len, head_dim].
struct AttentionShape {
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_len = 0;
};

// RoPE tables cos, sin [rows * t, half] of each token's position: the angle
// position * inv_freq[j] in float32, as Hugging Face computes it (padding tokens: zeros).
void RopeTableF32(const CachedRows& rows, const float* inv_freq, int64_t half, float* cos,
                  float* sin);

// From the fused projection qkv [rows * t, (heads + 2 * kv_heads) * head_dim] (q, then k,
// then v, each head's head_dim values together): applies the optional per-head RMS norms
// (q_norm/k_norm weights [head_dim], null when absent) and RoPE (tables of RopeTableF32) to
// q and k; writes q to q_out [rows * t, heads * head_dim] and each real token's k and v into
// the cache.
void PrepareQkvF32(const float* qkv, const CachedRows& rows, const AttentionShape& shape,
                   const float* q_norm, const float* k_norm, double eps, const float* cos,
                   const float* sin, float* q_out, float* cache_k, float* cache_v);

// Causal attention of q [rows * t, heads * head_dim] over each row's cache slot (the new
// tokens already written by PrepareQkvF32): query i of row r sees keys 0 .. lengths[r] + i.
// Writes out [rows * t, heads * head_dim]; padding queries get zeros. Head h uses key/value
// head h / (heads / kv_heads).
void CachedAttentionF32(const float* q, const CachedRows& rows, const AttentionShape& shape,
                        const float* cache_k, const float* cache_v, float* out);

}  // namespace rlmesh::model::internal
