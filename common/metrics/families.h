// One unlabelled series of a new metric family on a registry, for the components' metrics
// files: NewGauge / NewCounter / NewHistogram(name, help[, buckets]). Families that take
// labels are built with prometheus::Build* directly.
#pragma once

#include <string>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace rlmesh::metrics {

inline prometheus::Gauge& NewGauge(prometheus::Registry& registry, const std::string& name,
                                   const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

inline prometheus::Counter& NewCounter(prometheus::Registry& registry, const std::string& name,
                                       const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

inline prometheus::Histogram& NewHistogram(prometheus::Registry& registry, const std::string& name,
                                           const std::string& help,
                                           const prometheus::Histogram::BucketBoundaries& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add({}, buckets);
}

}  // namespace rlmesh::metrics
