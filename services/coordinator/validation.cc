#include "services/coordinator/validation.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rlmesh::coordinator {

v1::SamplingParams ValidationSampling(const config::CoordinatorSettings& settings) {
  const config::SamplingSettings& val = settings.val_sampling;
  v1::SamplingParams params;
  params.set_n(static_cast<int32_t>(std::max<int64_t>(1, val.n)));
  params.set_temperature(val.temperature);
  params.set_top_p(val.top_p);
  params.set_top_k(static_cast<int32_t>(val.top_k));
  params.set_max_new_tokens(static_cast<int32_t>(settings.max_response_length));
  params.set_seed(settings.seed);
  return params;
}

std::string ValidationLine(int64_t global_step, bool before_warmup,
                           const std::map<std::string, double>& metrics) {
  std::string line = before_warmup ? std::string("validation before warm-up:")
                                   : absl::StrFormat("validation @ step %d:", global_step);
  for (const auto& [name, value] : metrics) {
    if (name.rfind("val-core/", 0) == 0) {
      absl::StrAppend(&line, " ", name, " ", absl::StrFormat("%.3f", value));
    }
  }
  return line;
}

}  // namespace rlmesh::coordinator
