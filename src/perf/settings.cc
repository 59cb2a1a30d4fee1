// See settings.h.
#include "perf/settings.h"

namespace motley::perf {

PerfSettings DefaultSettings(const spec::ClusterSpec& cluster) {
  PerfSettings settings;
  for (const spec::DeviceType& type : cluster.device_types) {
    if (type.vendor == "cpu" || type.peak_bf16_flops <= 0) settings.precision = spec::Precision::kFp32;
  }
  bool all_emulated = !cluster.device_types.empty();
  for (const spec::DeviceType& type : cluster.device_types) {
    all_emulated = all_emulated && type.is_emulated();
  }
  if (all_emulated) {
    settings.nic_contention = false;
    settings.ring_collectives = true;
    settings.sequence_parallel = false;
    settings.flash_attention = false;
  }
  return settings;
}

PerfSettings DefaultSettings(const spec::ClusterSpec& cluster, const spec::TrainSpec& train) {
  PerfSettings settings = DefaultSettings(cluster);
  if (train.precision) settings.precision = *train.precision;
  if (train.attention) settings.flash_attention = *train.attention == spec::Attention::kFused;
  if (train.sequence_parallel) settings.sequence_parallel = *train.sequence_parallel;
  settings.attention_dropout = train.attention_dropout;
  return settings;
}

double ActivationElementBytes(const PerfSettings& settings) {
  return settings.precision == spec::Precision::kFp32 ? 4.0 : 2.0;
}

double GradientElementBytes(const PerfSettings& settings) {
  return ActivationElementBytes(settings);
}

}  // namespace motley::perf
