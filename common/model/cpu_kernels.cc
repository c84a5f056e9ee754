#include "common/model/cpu_kernels.h"

// GCC 12 reports the deliberately undefined register inside avx512fintrin.h's masked-load
// and reduction intrinsics as "may be used uninitialized" (a false positive of the header).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/model/spin_pool.h"

// The build targets baseline x86-64, so the AVX-512 code is compiled per function with
// target("avx512f") and only entered after CpuKernelsAvailable() checked the CPU. Such
// functions are kept out of lambdas (a lambda body does not inherit the attribute): each
// SpinParallelFor body calls one noinline worker.
#define RLMESH_AVX512 __attribute__((target("avx512f")))
#define RLMESH_AVX512_WORKER __attribute__((target("avx512f"), noinline))

namespace rlmesh::model::internal {
namespace {

constexpr int64_t kLanes = 16;     // floats per zmm register
constexpr int kMaxPanels = 4;      // 16-row panels of x per micro-kernel call (64 rows)
constexpr int kNr = 6;             // columns of y per micro-kernel call
constexpr int64_t kNc = 8 * kNr;   // columns of y per output block of GemmColumns
constexpr int64_t kGemvRows = 64;  // weight rows per work chunk of a matrix-vector product
// 4 x 6 accumulators + 4 x vectors = 28 of the 32 zmm registers.

RLMESH_AVX512 inline __mmask16 TailMask(int64_t count) {
  return static_cast<__mmask16>((1u << count) - 1u);
}

// Transposes the 16 x 16 block whose rows are v[0..16) in place (v[c] becomes column c).
// Three stages: pairs of rows interleaved, then groups of four, then the 128-bit lanes.
RLMESH_AVX512 inline void Transpose16x16(__m512 (&v)[16]) {
  __m512 a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  // b[4i + j], 128-bit lane L: column 4L + j of rows 4i .. 4i + 3.
  for (int i = 0; i < 4; ++i) {
    b[4 * i + 0] = _mm512_shuffle_ps(a[4 * i], a[4 * i + 2], 0x44);
    b[4 * i + 1] = _mm512_shuffle_ps(a[4 * i], a[4 * i + 2], 0xEE);
    b[4 * i + 2] = _mm512_shuffle_ps(a[4 * i + 1], a[4 * i + 3], 0x44);
    b[4 * i + 3] = _mm512_shuffle_ps(a[4 * i + 1], a[4 * i + 3], 0xEE);
  }
  // Column 4L + j is lane L of b[j], b[4 + j], b[8 + j], b[12 + j].
  for (int j = 0; j < 4; ++j) {
    const __m512 c0 = _mm512_shuffle_f32x4(b[j], b[4 + j], 0x88);
    const __m512 c1 = _mm512_shuffle_f32x4(b[j], b[4 + j], 0xDD);
    const __m512 c2 = _mm512_shuffle_f32x4(b[8 + j], b[12 + j], 0x88);
    const __m512 c3 = _mm512_shuffle_f32x4(b[8 + j], b[12 + j], 0xDD);
    v[j] = _mm512_shuffle_f32x4(c0, c2, 0x88);
    v[4 + j] = _mm512_shuffle_f32x4(c1, c3, 0x88);
    v[8 + j] = _mm512_shuffle_f32x4(c0, c2, 0xDD);
    v[12 + j] = _mm512_shuffle_f32x4(c1, c3, 0xDD);
  }
}

// Panels [p_begin, p_end) of PackRows: 16 x 16 blocks of x transposed in registers.
RLMESH_AVX512_WORKER void PackPanels(const float* x, int64_t ldx, int64_t m, int64_t k, float* out,
                                     int64_t p_begin, int64_t p_end) {
  for (int64_t p = p_begin; p < p_end; ++p) {
    const int64_t rows = std::min<int64_t>(kLanes, m - p * kLanes);
    float* panel = out + p * k * kLanes;
    for (int64_t k0 = 0; k0 < k; k0 += kLanes) {
      const int64_t cols = std::min<int64_t>(kLanes, k - k0);
      const __mmask16 mask = TailMask(cols);
      __m512 v[16];
      for (int64_t r = 0; r < kLanes; ++r) {
        v[r] = r < rows ? _mm512_maskz_loadu_ps(mask, x + (p * kLanes + r) * ldx + k0)
                        : _mm512_setzero_ps();
      }
      Transpose16x16(v);
      for (int64_t c = 0; c < cols; ++c) _mm512_storeu_ps(panel + (k0 + c) * kLanes, v[c]);
    }
  }
}

// x packed for the micro-kernel: panel p holds rows 16p .. 16p+15 as [k][16] (rows past m
// are zero), so one load gives one k of 16 rows. The buffer is the calling thread's and keeps
// the size of its largest call (64 rows), to spare the page faults of a fresh one per call;
// every element of it is written.
const float* PackRows(const float* x, int64_t ldx, int64_t m, int64_t k) {
  thread_local std::vector<float> packed;
  const int64_t panels = (m + kLanes - 1) / kLanes;
  packed.resize(static_cast<size_t>(panels * k * kLanes));
  float* out = packed.data();
  SpinParallelFor(at::get_num_threads(), panels, 2, [&](int64_t begin, int64_t end) {
    PackPanels(x, ldx, m, k, out, begin, end);
  });
  return out;
}

// tile[j][i*16 + r] = sum_kk xt[i][kk][r] * w[j][kk] over kk < k, for P panels of packed
// rows ([k][16] each) and NR contiguous rows of w (k floats each).
template <int P, int NR>
RLMESH_AVX512 void MicroKernel(const float* xt, int64_t k, const float* w, float* tile) {
  __m512 acc[P][NR];
#pragma GCC unroll 4
  for (int i = 0; i < P; ++i) {
#pragma GCC unroll 6
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    if ((kk & (kLanes - 1)) == 0) {
      // One cache line of each of the next NR weight rows (the next call's): in decoding
      // they come from memory, and rows of a few KiB are too short for the hardware
      // prefetcher to get ahead of them. Prefetching past the matrix does not fault.
#pragma GCC unroll 6
      for (int j = 0; j < NR; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(w + (NR + j) * k + kk), _MM_HINT_T0);
      }
    }
    __m512 xv[P];
#pragma GCC unroll 4
    for (int i = 0; i < P; ++i) xv[i] = _mm512_loadu_ps(xt + (i * k + kk) * kLanes);
#pragma GCC unroll 6
    for (int j = 0; j < NR; ++j) {
      const __m512 b = _mm512_set1_ps(w[j * k + kk]);
#pragma GCC unroll 4
      for (int i = 0; i < P; ++i) acc[i][j] = _mm512_fmadd_ps(xv[i], b, acc[i][j]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < P; ++i) {
#pragma GCC unroll 6
    for (int j = 0; j < NR; ++j) _mm512_storeu_ps(tile + j * P * kLanes + i * kLanes, acc[i][j]);
  }
}

using MicroKernelFn = void (*)(const float*, int64_t, const float*, float*);

template <int P>
MicroKernelFn PickNr(int nr) {
  switch (nr) {
    case 1:
      return &MicroKernel<P, 1>;
    case 2:
      return &MicroKernel<P, 2>;
    case 3:
      return &MicroKernel<P, 3>;
    case 4:
      return &MicroKernel<P, 4>;
    case 5:
      return &MicroKernel<P, 5>;
    default:
      return &MicroKernel<P, 6>;
  }
}

MicroKernelFn PickKernel(int p, int nr) {
  switch (p) {
    case 1:
      return PickNr<1>(nr);
    case 2:
      return PickNr<2>(nr);
    case 3:
      return PickNr<3>(nr);
    default:
      return PickNr<4>(nr);
  }
}

struct GemmArgs {
  const float* xt;  // packed rows
  int64_t m, k, n;
  const float* w;
  const float* bias;
  float* y;
  int64_t ldy;
  bool accumulate;
};

// Rows [0, m) of a block of GemmColumns ([cols][height], column-major, height a multiple of
// 16) into y's columns from y[0] on: 16 x 16 blocks transposed in registers, then the bias
// and the residual added with the same two additions per element as a scalar loop.
RLMESH_AVX512_WORKER void WriteBlock(const float* block, int64_t height, int64_t m, int64_t cols,
                                     const float* bias, float* y, int64_t ldy, bool accumulate) {
  for (int64_t c0 = 0; c0 < cols; c0 += kLanes) {
    const int64_t nc = std::min<int64_t>(kLanes, cols - c0);
    const __mmask16 mask = TailMask(nc);
    const __m512 bv =
        bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + c0) : _mm512_setzero_ps();
    for (int64_t r0 = 0; r0 < m; r0 += kLanes) {
      __m512 v[16];
      for (int64_t j = 0; j < kLanes; ++j) {
        v[j] = j < nc ? _mm512_loadu_ps(block + (c0 + j) * height + r0) : _mm512_setzero_ps();
      }
      Transpose16x16(v);
      const int64_t nr = std::min<int64_t>(kLanes, m - r0);
      for (int64_t r = 0; r < nr; ++r) {
        float* out = y + (r0 + r) * ldy + c0;
        __m512 value = _mm512_add_ps(v[r], bv);
        if (accumulate) value = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, out), value);
        _mm512_mask_storeu_ps(out, mask, value);
      }
    }
  }
}

// Columns [n_begin, n_end) of y, all m <= 64 rows: each micro-kernel call streams NR whole
// weight rows once against the packed rows (64 x k floats, from this core's L2). The tiles
// gather in a column-major block that is written out row by row: y's rows are often a power
// of two apart, and storing each tile column straight into y sent every store to the same
// cache set.
void GemmColumns(const GemmArgs& a, int64_t n_begin, int64_t n_end) {
  const int p = static_cast<int>((a.m + kLanes - 1) / kLanes);
  const int64_t height = p * kLanes;
  alignas(64) float block[kNc * kMaxPanels * kLanes];
  for (int64_t nb = n_begin; nb < n_end; nb += kNc) {
    const int64_t nb_end = std::min(n_end, nb + kNc);
    for (int64_t n0 = nb; n0 < nb_end; n0 += kNr) {
      const int nr = static_cast<int>(std::min<int64_t>(kNr, nb_end - n0));
      PickKernel(p, nr)(a.xt, a.k, a.w + n0 * a.k, block + (n0 - nb) * height);
    }
    WriteBlock(block, height, a.m, nb_end - nb, a.bias != nullptr ? a.bias + nb : nullptr,
               a.y + nb, a.ldy, a.accumulate);
  }
}

inline void StoreDot(float dot, int64_t row, const float* bias, float* y, bool accumulate) {
  const float v = dot + (bias != nullptr ? bias[row] : 0.0f);
  y[row] = accumulate ? y[row] + v : v;
}

// y[n] (+)= dot(w[n, :], x) + bias[n] for n in [n_begin, n_end): four weight rows at a time,
// streamed once; this is the whole cost of batch-1 decoding.
RLMESH_AVX512_WORKER void GemvRows(const float* x, int64_t k, const float* w, const float* bias,
                                   float* y, bool accumulate, int64_t n_begin, int64_t n_end) {
  const int64_t k_main = k / kLanes * kLanes;
  const __mmask16 tail = TailMask(k - k_main);
  int64_t n = n_begin;
  for (; n + 4 <= n_end; n += 4) {
    const float* w0 = w + n * k;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(),
           a3 = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < k_main; kk += kLanes) {
      const __m512 xv = _mm512_loadu_ps(x + kk);
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + kk), xv, a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + k + kk), xv, a1);
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + 2 * k + kk), xv, a2);
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + 3 * k + kk), xv, a3);
    }
    if (k_main < k) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, x + k_main);
      a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + k_main), xv, a0);
      a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + k + k_main), xv, a1);
      a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + 2 * k + k_main), xv, a2);
      a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + 3 * k + k_main), xv, a3);
    }
    StoreDot(_mm512_reduce_add_ps(a0), n, bias, y, accumulate);
    StoreDot(_mm512_reduce_add_ps(a1), n + 1, bias, y, accumulate);
    StoreDot(_mm512_reduce_add_ps(a2), n + 2, bias, y, accumulate);
    StoreDot(_mm512_reduce_add_ps(a3), n + 3, bias, y, accumulate);
  }
  for (; n < n_end; ++n) {
    const float* w0 = w + n * k;
    __m512 a0 = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < k_main; kk += kLanes) {
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + kk), _mm512_loadu_ps(x + kk), a0);
    }
    if (k_main < k) {
      a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w0 + k_main),
                           _mm512_maskz_loadu_ps(tail, x + k_main), a0);
    }
    StoreDot(_mm512_reduce_add_ps(a0), n, bias, y, accumulate);
  }
}

// exp(x), x clamped to [-87, 88]: 2^round(x log2 e) times a degree-6 polynomial on the
// remainder (|r| <= ln2 / 2, relative error ~1e-7).
RLMESH_AVX512 inline __m512 Exp(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

RLMESH_AVX512 inline float Dot(const float* a, const float* b, int64_t d) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + kLanes <= d; i += kLanes) {
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  }
  if (i < d) {
    const __mmask16 m = TailMask(d - i);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// out[0..d) += s * v[0..d)
RLMESH_AVX512 inline void Axpy(float s, const float* v, float* out, int64_t d) {
  const __m512 sv = _mm512_set1_ps(s);
  int64_t i = 0;
  for (; i + kLanes <= d; i += kLanes) {
    _mm512_storeu_ps(out + i,
                     _mm512_fmadd_ps(sv, _mm512_loadu_ps(v + i), _mm512_loadu_ps(out + i)));
  }
  if (i < d) {
    const __mmask16 m = TailMask(d - i);
    _mm512_mask_storeu_ps(
        out + i, m,
        _mm512_fmadd_ps(sv, _mm512_maskz_loadu_ps(m, v + i), _mm512_maskz_loadu_ps(m, out + i)));
  }
}

// y[j] = silu(g[j]) * u[j] = g[j] / (1 + exp(-g[j])) * u[j] for j < n.
RLMESH_AVX512_WORKER void SiluMulRow(const float* g, const float* u, int64_t n, float* y) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t j = 0;
  for (; j < n; j += kLanes) {
    const __mmask16 m = TailMask(std::min<int64_t>(kLanes, n - j));
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + j);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_setzero_ps(), gv));
    const __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(y + j, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u + j)));
  }
}

// y[0..d) = weight * (x / sqrt(mean(x^2) + eps)); x and y may alias.
RLMESH_AVX512 inline void RmsNormVector(const float* x, int64_t d, const float* weight, float eps,
                                        float* y) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < d; j += kLanes) {
    const __m512 v = _mm512_maskz_loadu_ps(TailMask(std::min<int64_t>(kLanes, d - j)), x + j);
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  const __m512 inv =
      _mm512_set1_ps(1.0f / std::sqrt(_mm512_reduce_add_ps(acc) / static_cast<float>(d) + eps));
  for (int64_t j = 0; j < d; j += kLanes) {
    const __mmask16 m = TailMask(std::min<int64_t>(kLanes, d - j));
    _mm512_mask_storeu_ps(y + j, m,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(m, weight + j),
                                        _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + j), inv)));
  }
}

RLMESH_AVX512_WORKER void RmsNormRows(const float* x, int64_t d, const float* weight, float eps,
                                      float* y, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) RmsNormVector(x + i * d, d, weight, eps, y + i * d);
}

// RoPE in place on one head vector v[0 .. 2 * half) with this token's cos/sin [half]:
// (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin).
RLMESH_AVX512 inline void RopeVector(float* v, int64_t half, const float* cos, const float* sin) {
  for (int64_t d = 0; d < half; d += kLanes) {
    const __mmask16 m = TailMask(std::min<int64_t>(kLanes, half - d));
    const __m512 x1 = _mm512_maskz_loadu_ps(m, v + d), x2 = _mm512_maskz_loadu_ps(m, v + d + half);
    const __m512 c = _mm512_maskz_loadu_ps(m, cos + d), s = _mm512_maskz_loadu_ps(m, sin + d);
    _mm512_mask_storeu_ps(v + d, m, _mm512_sub_ps(_mm512_mul_ps(x1, c), _mm512_mul_ps(x2, s)));
    _mm512_mask_storeu_ps(v + d + half, m,
                          _mm512_add_ps(_mm512_mul_ps(x2, c), _mm512_mul_ps(x1, s)));
  }
}

// PrepareQkvF32's buffers (the rows and shape are passed beside them).
struct PrepareArgs {
  const float* qkv;
  const float* q_norm;
  const float* k_norm;
  float eps;
  const float* cos_table;
  const float* sin_table;
  float* q_out;
  float* cache_k;
  float* cache_v;
};

// Tokens [begin, end) of PrepareQkvF32: each head of q and k normed (when the model has the
// norms) and rotated, q written out, k and v into the token's cache slot.
RLMESH_AVX512_WORKER void PrepareTokens(const PrepareArgs& a, const CachedRows& rows,
                                        const AttentionShape& s, int64_t begin, int64_t end) {
  const int64_t hd = s.head_dim, half = hd / 2;
  const int64_t width = (s.heads + 2 * s.kv_heads) * hd;
  for (int64_t token = begin; token < end; ++token) {
    const int64_t row = token / rows.t, i = token % rows.t;
    float* q = a.q_out + token * s.heads * hd;
    if (i >= rows.num_new[row]) {
      std::fill(q, q + s.heads * hd, 0.0f);
      continue;
    }
    const int64_t pos = rows.lengths[row] + i;
    const float* cos = a.cos_table + token * half;
    const float* sin = a.sin_table + token * half;
    const float* src = a.qkv + token * width;
    for (int64_t h = 0; h < s.heads; ++h) {
      float* head = q + h * hd;
      if (a.q_norm != nullptr) {
        RmsNormVector(src + h * hd, hd, a.q_norm, a.eps, head);
      } else {
        std::copy(src + h * hd, src + (h + 1) * hd, head);
      }
      RopeVector(head, half, cos, sin);
    }
    for (int64_t h = 0; h < s.kv_heads; ++h) {
      const int64_t at = ((rows.slots[row] * s.kv_heads + h) * s.max_len + pos) * hd;
      const float* k = src + (s.heads + h) * hd;
      const float* v = src + (s.heads + s.kv_heads + h) * hd;
      float* key = a.cache_k + at;
      if (a.k_norm != nullptr) {
        RmsNormVector(k, hd, a.k_norm, a.eps, key);
      } else {
        std::copy(k, k + hd, key);
      }
      RopeVector(key, half, cos, sin);
      std::copy(v, v + hd, a.cache_v + at);
    }
  }
}

struct AttentionArgs {
  const float* q;
  CachedRows rows;
  AttentionShape shape;
  const float* cache_k;
  const float* cache_v;
  float* out;
};

// sc[0..keys) = softmax(sc[0..keys)), in place.
RLMESH_AVX512 inline void SoftmaxInPlace(float* sc, int64_t keys) {
  const __m512 mv = _mm512_set1_ps(*std::max_element(sc, sc + keys));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < keys; j += kLanes) {
    const __mmask16 m = TailMask(std::min<int64_t>(kLanes, keys - j));
    const __m512 e =
        _mm512_maskz_mov_ps(m, Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sc + j), mv)));
    _mm512_mask_storeu_ps(sc + j, m, e);
    sum = _mm512_add_ps(sum, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (int64_t j = 0; j < keys; j += kLanes) {
    const __mmask16 m = TailMask(std::min<int64_t>(kLanes, keys - j));
    _mm512_mask_storeu_ps(sc + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, sc + j), inv));
  }
}

// The 16 lane sums of v[0..16) as one vector (lane j = sum of v[j]'s lanes): a transposing
// tree of 15 adds, where 16 separate horizontal sums would take ~10 instructions each.
RLMESH_AVX512 inline __m512 SumsOf16(const __m512* v) {
  __m512 pairs[8], quads[4];
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                             _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane: that lane's sums of 4 vectors
    quads[i] = _mm512_add_ps(_mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], 0xEE));
  }
  // Across the four 128-bit lanes: [q0 lanes 0+1, q0 2+3, q1 0+1, q1 2+3], then whole sums.
  const __m512 h01 = _mm512_add_ps(_mm512_shuffle_f32x4(quads[0], quads[1], 0x88),
                                   _mm512_shuffle_f32x4(quads[0], quads[1], 0xDD));
  const __m512 h23 = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2], quads[3], 0x88),
                                   _mm512_shuffle_f32x4(quads[2], quads[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(h01, h23, 0x88), _mm512_shuffle_f32x4(h01, h23, 0xDD));
}

// One query head against `keys` cached keys and values of head_dim HD (a multiple of 16):
// scores 16 keys at a time, softmax, then p v accumulated in registers.
template <int HD>
RLMESH_AVX512 inline void AttendHead(const float* q, const float* kc, const float* vc, int64_t keys,
                                     float scale, float* sc, float* out) {
  constexpr int kChunks = HD / kLanes;
  __m512 qv[kChunks];
  for (int c = 0; c < kChunks; ++c) {
    qv[c] = _mm512_mul_ps(_mm512_loadu_ps(q + c * kLanes), _mm512_set1_ps(scale));
  }
  for (int64_t j0 = 0; j0 < keys; j0 += kLanes) {
    const int64_t n = std::min<int64_t>(kLanes, keys - j0);
    __m512 dots[kLanes];
    for (int64_t j = 0; j < kLanes; ++j) {
      __m512 acc = _mm512_setzero_ps();
      if (j < n) {
        const float* k = kc + (j0 + j) * HD;
#pragma GCC unroll 8
        for (int c = 0; c < kChunks; ++c) {
          acc = _mm512_fmadd_ps(qv[c], _mm512_loadu_ps(k + c * kLanes), acc);
        }
      }
      dots[j] = acc;
    }
    _mm512_mask_storeu_ps(sc + j0, TailMask(n), SumsOf16(dots));
  }
  SoftmaxInPlace(sc, keys);
  __m512 acc[kChunks];
  for (int c = 0; c < kChunks; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t j = 0; j < keys; ++j) {
    const __m512 p = _mm512_set1_ps(sc[j]);
    const float* v = vc + j * HD;
#pragma GCC unroll 8
    for (int c = 0; c < kChunks; ++c) {
      acc[c] = _mm512_fmadd_ps(p, _mm512_loadu_ps(v + c * kLanes), acc[c]);
    }
  }
  for (int c = 0; c < kChunks; ++c) _mm512_storeu_ps(out + c * kLanes, acc[c]);
}

// Any head_dim: one horizontal sum per score, p v added into out.
RLMESH_AVX512 inline void AttendHeadAnyDim(const float* q, const float* kc, const float* vc,
                                           int64_t keys, int64_t hd, float scale, float* sc,
                                           float* out) {
  for (int64_t j = 0; j < keys; ++j) sc[j] = Dot(q, kc + j * hd, hd) * scale;
  SoftmaxInPlace(sc, keys);
  std::fill(out, out + hd, 0.0f);
  for (int64_t j = 0; j < keys; ++j) Axpy(sc[j], vc + j * hd, out, hd);
}

// Where item (row, query, key/value head) reads its keys and values: the offset of its cache
// slot's head and the number of keys it sees (0 for a padding query).
struct ItemKeys {
  int64_t base = 0;
  int64_t keys = 0;
};

inline ItemKeys KeysOf(const AttentionArgs& a, int64_t item) {
  const AttentionShape& s = a.shape;
  const int64_t kvh = item % s.kv_heads;
  const int64_t token = item / s.kv_heads;  // row * t + i
  const int64_t row = token / a.rows.t, i = token % a.rows.t;
  if (i >= a.rows.num_new[row]) return {};
  return {(a.rows.slots[row] * s.kv_heads + kvh) * s.max_len * s.head_dim,
          a.rows.lengths[row] + i + 1};
}

// Work items (row, query, key/value head) in [begin, end); a key/value head's query heads
// read its keys and values one after the other, while they are in L1. The next item's keys
// and values are prefetched into L2 first: in decoding the cache of a whole step (tens of
// MiB across the layers, with the weights streamed in between) comes from memory, and an
// item's few KiB are too short a stream for the hardware prefetcher to get ahead of.
RLMESH_AVX512_WORKER void AttendItems(const AttentionArgs& a, int64_t begin, int64_t end) {
  const AttentionShape& s = a.shape;
  const int64_t groups = s.heads / s.kv_heads, hd = s.head_dim;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  // The calling thread's score buffer, kept between calls (a decode step makes ~100 calls a
  // layer).
  thread_local std::vector<float> scores;
  scores.resize(static_cast<size_t>(s.max_len + kLanes));
  constexpr int64_t kLineFloats = 16;
  ItemKeys here, next = begin < end ? KeysOf(a, begin) : ItemKeys{};
  for (int64_t item = begin; item < end; ++item) {
    here = next;
    next = item + 1 < end ? KeysOf(a, item + 1) : ItemKeys{};
    for (int64_t f = 0; f < next.keys * hd; f += kLineFloats) {
      _mm_prefetch(reinterpret_cast<const char*>(a.cache_k + next.base + f), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(a.cache_v + next.base + f), _MM_HINT_T1);
    }
    const int64_t head0 = (item / s.kv_heads) * s.heads + (item % s.kv_heads) * groups;
    float* out = a.out + head0 * hd;
    if (here.keys == 0) {
      std::fill(out, out + groups * hd, 0.0f);
      continue;
    }
    const int64_t keys = here.keys;
    const float* kc = a.cache_k + here.base;
    const float* vc = a.cache_v + here.base;
    const float* q = a.q + head0 * hd;
    for (int64_t g = 0; g < groups; ++g) {
      if (hd == 64) {
        AttendHead<64>(q + g * hd, kc, vc, keys, scale, scores.data(), out + g * hd);
      } else if (hd == 128) {
        AttendHead<128>(q + g * hd, kc, vc, keys, scale, scores.data(), out + g * hd);
      } else {
        AttendHeadAnyDim(q + g * hd, kc, vc, keys, hd, scale, scores.data(), out + g * hd);
      }
    }
  }
}

}  // namespace

bool CpuKernelsAvailable() {
  static const bool available = __builtin_cpu_supports("avx512f");
  return available;
}

constexpr int64_t kBlasMinRows = kMaxPanels * kLanes + 1;

void LinearF32(const float* x, int64_t ldx, int64_t m, int64_t k, const float* w, int64_t n,
               const float* bias, float* y, int64_t ldy, bool accumulate) {
  if (m >= kBlasMinRows) {
    // Prefill: OpenBLAS's sgemm, which packs and blocks the weights for many row groups,
    // beats the kernel below once it must read the weights more than once (2,048 rows:
    // 180-200 GFLOP/s against 130-190; docs/performance.md).
    auto xt = torch::from_blob(const_cast<float*>(x), {m, k}, {ldx, 1}, torch::kFloat32);
    auto wt = torch::from_blob(const_cast<float*>(w), {n, k}, torch::kFloat32);
    auto yt = torch::from_blob(y, {m, n}, {ldy, 1}, torch::kFloat32);
    if (accumulate) {
      yt.addmm_(xt, wt.t());
    } else if (bias != nullptr) {
      auto bt = torch::from_blob(const_cast<float*>(bias), {n}, torch::kFloat32);
      at::addmm_out(yt, bt, xt, wt.t());
    } else {
      at::mm_out(yt, xt, wt.t());
    }
    if (accumulate && bias != nullptr) {
      yt.add_(torch::from_blob(const_cast<float*>(bias), {n}, torch::kFloat32));
    }
    return;
  }
  const GemmArgs args{
      m == 1 ? nullptr : PackRows(x, ldx, m, k), m, k, n, w, bias, y, ldy, accumulate};
  // Output columns in chunks taken from a shared counter (SpinParallelFor): on a machine
  // shared with other jobs, a thread that runs while its peer is descheduled does the peer's
  // share instead of waiting for it at the end of the product.
  const int64_t chunk = m == 1 ? kGemvRows : kNc;
  SpinParallelFor(at::get_num_threads(), n, chunk, [&](int64_t begin, int64_t end) {
    if (m == 1) {
      GemvRows(x, k, w, bias, y, accumulate, begin, end);
    } else {
      GemmColumns(args, begin, end);
    }
  });
}

void RmsNormF32(const float* x, int64_t m, int64_t d, const float* weight, double eps, float* y) {
  SpinParallelFor(at::get_num_threads(), m, 16, [&](int64_t begin, int64_t end) {
    RmsNormRows(x, d, weight, static_cast<float>(eps), y, begin, end);
  });
}

void SiluMulF32(const float* gu, int64_t m, int64_t inter, float* y) {
  SpinParallelFor(at::get_num_threads(), m, 8, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* g = gu + i * 2 * inter;
      SiluMulRow(g, g + inter, inter, y + i * inter);
    }
  });
}

void RopeTableF32(const CachedRows& rows, const float* inv_freq, int64_t half, float* cos,
                  float* sin) {
  SpinParallelFor(at::get_num_threads(), rows.rows * rows.t, 16, [&](int64_t begin, int64_t end) {
    for (int64_t token = begin; token < end; ++token) {
      const int64_t row = token / rows.t, i = token % rows.t;
      const bool real = i < rows.num_new[row];
      const float pos = static_cast<float>(rows.lengths[row] + i);
      for (int64_t j = 0; j < half; ++j) {
        const float angle = pos * inv_freq[j];
        cos[token * half + j] = real ? std::cos(angle) : 0.0f;
        sin[token * half + j] = real ? std::sin(angle) : 0.0f;
      }
    }
  });
}

void PrepareQkvF32(const float* qkv, const CachedRows& rows, const AttentionShape& s,
                   const float* q_norm, const float* k_norm, double eps, const float* cos_table,
                   const float* sin_table, float* q_out, float* cache_k, float* cache_v) {
  const PrepareArgs args{qkv,   q_norm,  k_norm, static_cast<float>(eps), cos_table, sin_table,
                         q_out, cache_k, cache_v};
  SpinParallelFor(at::get_num_threads(), rows.rows * rows.t, 4,
                  [&](int64_t begin, int64_t end) { PrepareTokens(args, rows, s, begin, end); });
}

void CachedAttentionF32(const float* q, const CachedRows& rows, const AttentionShape& shape,
                        const float* cache_k, const float* cache_v, float* out) {
  AttentionArgs args{q, rows, shape, cache_k, cache_v, out};
  // Items of at least ~64k multiply-adds per thread: waking a sleeping thread costs more than
  // a batch-1 decode step's attention of a few heads.
  int64_t keys = 1;
  for (int64_t r = 0; r < rows.rows; ++r) keys = std::max(keys, rows.lengths[r] + rows.num_new[r]);
  const int64_t work = keys * 2 * (shape.heads / shape.kv_heads) * shape.head_dim;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / work);
  SpinParallelFor(at::get_num_threads(), rows.rows * rows.t * shape.kv_heads, grain,
                  [&](int64_t begin, int64_t end) { AttendItems(args, begin, end); });
}

}  // namespace rlmesh::model::internal
