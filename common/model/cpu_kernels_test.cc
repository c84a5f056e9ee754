// The CPU kernels against ATen's own operators (an independent implementation) on shapes
// with tails: rows, columns and inner sizes that are not multiples of the vector width.
#include "common/model/cpu_kernels.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

namespace rlmesh::model::internal {
namespace {

class CpuKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CpuKernelsAvailable()) GTEST_SKIP() << "CPU without AVX-512F";
    torch::manual_seed(7);
  }
};

double MaxRelError(const torch::Tensor& got, const torch::Tensor& want) {
  return ((got - want).abs().max() / want.abs().max()).item<double>();
}

TEST_F(CpuKernelsTest, LinearMatchesAtenLinearWithBiasAndAccumulation) {
  for (int64_t m : {1, 2, 17, 64, 70}) {
    for (auto [k, n] : std::vector<std::pair<int64_t, int64_t>>{{37, 13}, {64, 100}, {130, 7}}) {
      torch::Tensor x = torch::randn({m, k}), w = torch::randn({n, k}), b = torch::randn({n});
      torch::Tensor y = torch::empty({m, n});
      LinearF32(x.data_ptr<float>(), k, m, k, w.data_ptr<float>(), n, b.data_ptr<float>(),
                y.data_ptr<float>(), n, /*accumulate=*/false);
      torch::Tensor want = at::linear(x, w, b);
      EXPECT_LT(MaxRelError(y, want), 1e-5) << m << "x" << k << "x" << n;
      torch::Tensor residual = torch::randn({m, n});
      torch::Tensor acc = residual.clone();
      LinearF32(x.data_ptr<float>(), k, m, k, w.data_ptr<float>(), n, nullptr,
                acc.data_ptr<float>(), n, /*accumulate=*/true);
      EXPECT_LT(MaxRelError(acc, residual + at::linear(x, w)), 1e-5) << m << "x" << k << "x" << n;
    }
  }
}

// Rows of x and y a stride apart that is not their width (a column slice of a wider buffer),
// for row counts around the 16-row blocks that packing and the write-out transpose, and
// column counts around the 16-column groups: the columns beside the slice stay untouched.
TEST_F(CpuKernelsTest, LinearHonoursRowStridesAndLeavesTheRestOfTheRowsAlone) {
  for (int64_t m : {2, 15, 16, 33, 64}) {
    for (auto [k, n] : std::vector<std::pair<int64_t, int64_t>>{{16, 16}, {31, 47}, {50, 97}}) {
      torch::Tensor wide_x = torch::randn({m, k + 5}), w = torch::randn({n, k});
      torch::Tensor b = torch::randn({n});
      torch::Tensor x = wide_x.narrow(1, 0, k);
      torch::Tensor wide_y = torch::randn({m, n + 7}), before = wide_y.clone();
      LinearF32(wide_x.data_ptr<float>(), k + 5, m, k, w.data_ptr<float>(), n,
                b.data_ptr<float>(), wide_y.data_ptr<float>(), n + 7, /*accumulate=*/true);
      torch::Tensor want = before.narrow(1, 0, n) + at::linear(x, w, b);
      EXPECT_LT(MaxRelError(wide_y.narrow(1, 0, n), want), 1e-5) << m << "x" << k << "x" << n;
      EXPECT_TRUE(torch::equal(wide_y.narrow(1, n, 7), before.narrow(1, n, 7)))
          << m << "x" << k << "x" << n;
    }
  }
}

// Up to 64 rows (decoding) the kernel's own product is used, and a row's result does not
// depend on the other rows or on how many there are; above 64 rows (prefill) the product is
// OpenBLAS's (through ATen) and must still equal x W^T to rounding.
TEST_F(CpuKernelsTest, LinearRowsDoNotDependOnTheOtherRowsUpToSixtyFour) {
  const int64_t k = 45, n = 29;
  torch::Tensor x = torch::randn({64, k}), w = torch::randn({n, k});
  torch::Tensor all = torch::empty({64, n});
  LinearF32(x.data_ptr<float>(), k, 64, k, w.data_ptr<float>(), n, nullptr, all.data_ptr<float>(),
            n, false);
  for (int64_t m : {2, 3, 17, 40}) {
    torch::Tensor some = torch::empty({m, n});
    LinearF32(x.data_ptr<float>(), k, m, k, w.data_ptr<float>(), n, nullptr, some.data_ptr<float>(),
              n, false);
    EXPECT_TRUE(torch::equal(all.narrow(0, 0, m), some)) << m << " rows";
  }
}

TEST_F(CpuKernelsTest, LinearOfManyRowsWithBiasAndAccumulationMatchesTheDefinition) {
  const int64_t m = 100, k = 45, n = 29;
  torch::Tensor x = torch::randn({m, k}), w = torch::randn({n, k}), b = torch::randn({n});
  torch::Tensor y = torch::empty({m, n});
  LinearF32(x.data_ptr<float>(), k, m, k, w.data_ptr<float>(), n, b.data_ptr<float>(),
            y.data_ptr<float>(), n, false);
  EXPECT_LT(MaxRelError(y, x.mm(w.t()) + b), 1e-5);
  torch::Tensor residual = torch::randn({m, n}), acc = residual.clone();
  LinearF32(x.data_ptr<float>(), k, m, k, w.data_ptr<float>(), n, b.data_ptr<float>(),
            acc.data_ptr<float>(), n, true);
  EXPECT_LT(MaxRelError(acc, residual + x.mm(w.t()) + b), 1e-5);
}

TEST_F(CpuKernelsTest, RmsNormAndSiluMulMatchTheirDefinitions) {
  torch::Tensor x = torch::randn({5, 37}) * 3, w = torch::randn({37}), y = torch::empty({5, 37});
  RmsNormF32(x.data_ptr<float>(), 5, 37, w.data_ptr<float>(), 1e-6, y.data_ptr<float>());
  EXPECT_LT(MaxRelError(y, w * x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6)), 1e-6);

  torch::Tensor gu = torch::randn({3, 2 * 21}) * 6, act = torch::empty({3, 21});
  SiluMulF32(gu.data_ptr<float>(), 3, 21, act.data_ptr<float>());
  EXPECT_LT(MaxRelError(act, torch::silu(gu.narrow(1, 0, 21)) * gu.narrow(1, 21, 21)), 1e-6);
}

// Two rows in slots 2 and 0 of a cache: row 0 has `cached` tokens and 2 new, row 1
// none cached and 3 new. Each query's output must be softmax(q k^T / sqrt(d)) v over the keys
// at positions up to its own, with its key/value head (heads 0-2 use kv head 0, 3-5 kv head
// 1).
void CheckAttentionAndQkvPreparation(const AttentionShape& shape, int64_t cached) {
  const int64_t t = 3, hd = shape.head_dim, half = hd / 2;
  const std::vector<int64_t> slots = {2, 0}, lengths = {cached, 0}, num_new = {2, 3};
  const CachedRows rows{2, t, slots.data(), lengths.data(), num_new.data()};
  torch::Tensor cache_k = torch::randn({3, shape.kv_heads, shape.max_len, hd});
  torch::Tensor cache_v = torch::randn({3, shape.kv_heads, shape.max_len, hd});
  const int64_t width = (shape.heads + 2 * shape.kv_heads) * hd;
  torch::Tensor qkv = torch::randn({2 * t, width});
  torch::Tensor inv_freq = torch::rand({half});
  torch::Tensor q_norm = torch::randn({hd}), k_norm = torch::randn({hd});
  torch::Tensor cos = torch::empty({2 * t, half}), sin = torch::empty({2 * t, half});
  RopeTableF32(rows, inv_freq.data_ptr<float>(), half, cos.data_ptr<float>(),
               sin.data_ptr<float>());
  torch::Tensor q = torch::empty({2 * t, shape.heads * hd}), out = torch::empty_like(q);
  torch::Tensor want_k = cache_k.clone(), want_v = cache_v.clone();
  PrepareQkvF32(qkv.data_ptr<float>(), rows, shape, q_norm.data_ptr<float>(),
                k_norm.data_ptr<float>(), 1e-6, cos.data_ptr<float>(), sin.data_ptr<float>(),
                q.data_ptr<float>(), cache_k.data_ptr<float>(), cache_v.data_ptr<float>());
  CachedAttentionF32(q.data_ptr<float>(), rows, shape, cache_k.data_ptr<float>(),
                     cache_v.data_ptr<float>(), out.data_ptr<float>());

  auto rms = [](const torch::Tensor& v, const torch::Tensor& w) {
    return w * (v * torch::rsqrt(v.pow(2).mean(-1, true) + 1e-6));
  };
  auto rope = [&](const torch::Tensor& v, int64_t pos) {
    torch::Tensor angle = inv_freq * static_cast<float>(pos);
    torch::Tensor c = torch::cat({angle.cos(), angle.cos()}),
                  s = torch::cat({angle.sin(), angle.sin()});
    torch::Tensor rotated = torch::cat({-v.narrow(-1, half, half), v.narrow(-1, 0, half)}, -1);
    return v * c + rotated * s;
  };
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t i = 0; i < num_new[r]; ++i) {
      const int64_t pos = lengths[r] + i;
      torch::Tensor src = qkv[r * t + i];
      for (int64_t h = 0; h < shape.kv_heads; ++h) {
        want_k[slots[r]][h][pos] =
            rope(rms(src.narrow(0, (shape.heads + h) * hd, hd), k_norm), pos);
        want_v[slots[r]][h][pos] = src.narrow(0, (shape.heads + shape.kv_heads + h) * hd, hd);
      }
    }
  }
  EXPECT_LT(MaxRelError(cache_k, want_k), 1e-6);
  EXPECT_TRUE(torch::equal(cache_v, want_v));
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t h = 0; h < shape.heads; ++h) {
        torch::Tensor got = out[r * t + i].narrow(0, h * hd, hd);
        if (i >= num_new[r]) {
          EXPECT_TRUE(torch::equal(got, torch::zeros({hd})));
          continue;
        }
        const int64_t pos = lengths[r] + i, kvh = h / 3;
        torch::Tensor qh = rope(rms(qkv[r * t + i].narrow(0, h * hd, hd), q_norm), pos);
        torch::Tensor keys = want_k[slots[r]][kvh].narrow(0, 0, pos + 1);
        torch::Tensor values = want_v[slots[r]][kvh].narrow(0, 0, pos + 1);
        torch::Tensor p = torch::softmax(keys.matmul(qh) / std::sqrt(static_cast<double>(hd)), 0);
        EXPECT_LT(MaxRelError(got, p.matmul(values)), 1e-5) << "row " << r << " query " << i;
      }
    }
  }
}

TEST_F(CpuKernelsTest, CachedAttentionAndQkvPreparationMatchTheDefinition) {
  // head_dim 20: the general path; 64 and 128: the register paths, with key counts that are
  // and are not multiples of 16 (the second row's 1-3 keys, the first row's cached + 1..2).
  CheckAttentionAndQkvPreparation(AttentionShape{6, 2, 20, 9}, 5);
  CheckAttentionAndQkvPreparation(AttentionShape{6, 2, 64, 48}, 31);
  CheckAttentionAndQkvPreparation(AttentionShape{6, 2, 128, 48}, 40);
}

}  // namespace
}  // namespace rlmesh::model::internal
