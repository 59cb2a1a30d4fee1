// See settings.h.
#include "perf/settings.h"

namespace motley::perf {

PerfSettings DefaultSettings(const spec::ClusterSpec& cluster) {
  PerfSettings settings;
  for (const spec::DeviceType& type : cluster.device_types) {
    if (type.vendor == "cpu" || type.peak_bf16_flops <= 0) settings.precision = spec::Precision::kFp32;
  }
  return settings;
}

double ActivationElementBytes(const PerfSettings& settings) {
  return settings.precision == spec::Precision::kFp32 ? 4.0 : 2.0;
}

double GradientElementBytes(const PerfSettings& settings) {
  return ActivationElementBytes(settings);
}

}  // namespace motley::perf
