#include "services/coordinator/validation.h"

#include "gtest/gtest.h"

namespace rlmesh::coordinator {
namespace {

TEST(ValidationTest, SamplesWithValKwargsTheResponseLimitAndTheRunSeed) {
  config::CoordinatorSettings settings;
  settings.val_sampling.n = 0;  // at least one sample per prompt
  settings.val_sampling.temperature = 0;
  settings.val_sampling.top_p = 0.9;
  settings.val_sampling.top_k = 5;
  settings.max_response_length = 17;
  settings.seed = 42;
  const v1::SamplingParams params = ValidationSampling(settings);
  EXPECT_EQ(params.n(), 1);
  EXPECT_EQ(params.temperature(), 0);
  EXPECT_FLOAT_EQ(params.top_p(), 0.9f);
  EXPECT_EQ(params.top_k(), 5);
  EXPECT_EQ(params.max_new_tokens(), 17);
  EXPECT_EQ(params.seed(), 42u);
}

TEST(ValidationTest, TheLineShowsTheValCoreMetricsOnly) {
  const std::map<std::string, double> metrics = {{"val-core/a/reward/mean@1", 0.12345},
                                                 {"val-core/b/reward/mean@1", 1.0},
                                                 {"val/reward/mean", 0.5},
                                                 {"timing_s/testing", 3.0}};
  EXPECT_EQ(ValidationLine(20, false, metrics),
            "validation @ step 20: val-core/a/reward/mean@1 0.123 val-core/b/reward/mean@1 1.000");
  EXPECT_EQ(ValidationLine(0, true, {}), "validation before warm-up:");
}

}  // namespace
}  // namespace rlmesh::coordinator
