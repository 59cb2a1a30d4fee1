// Device and link presets: ONE table of per-device-class numbers, each with its source, read by
// cluster files (`device_types: - {preset: h100}`, `link_classes: - {preset: ib-hdr}`;
// docs/formats/cluster.md), by the clusters generated in code (perf/cluster_presets.h) and, via
// the DeviceType fields it fills, by the compute model (perf/compute_model.h), whose formulas
// live apart from these numbers as NCCL keeps its tuning tables apart from its cost formula.
//
// A source names a datasheet, a published GEMM / memory / collective benchmark (most are listed
// in calibration-sources, quoted in docs/formats/cluster.md), or a measurement by file; a number
// derived from others says how; a number no source gives is marked "assumed" with the reason.
// The table is static and immutable; every function is thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "spec/cluster_spec.h"

namespace motley::spec {

// A number and where it comes from.
struct Sourced {
  double value = 0;
  std::string_view source;
};

struct DevicePreset {
  std::string_view name;         // e.g. "a100-80g"
  std::string_view vendor;       // DeviceType::vendor
  std::string_view description;  // the product, and what one device (one rank) is
  Sourced peak_fp32_flops;
  Sourced peak_bf16_flops;
  Sourced peak_fp16_flops;
  Sourced memory_bytes;
  Sourced memory_bandwidth;
  Sourced achievable_memory_bandwidth;
  Sourced compute_units;
  Sourced kernel_launch_s;
  Sourced gemm_efficiency_16bit;  // bf16 and fp16 (the same matrix units)
  Sourced gemm_efficiency_fp32;
  Sourced gemm_overlap;
  Sourced attention_efficiency;      // 0: the GEMM efficiency
  std::vector<GemmTile> gemm_tiles;  // all precisions; empty: no tile or wave quantization
  std::string_view gemm_tiles_source;
};

struct LinkPreset {
  std::string_view name;
  std::string_view description;
  Sourced latency_s;
  Sourced bandwidth;  // bytes/s, one direction
  Sourced efficiency;
};

// Every preset, in the order docs/formats/cluster.md lists them.
const std::vector<DevicePreset>& DevicePresets();
const std::vector<LinkPreset>& LinkPresets();

// nullptr when no preset has that name.
const DevicePreset* FindDevicePreset(std::string_view name);
const LinkPreset* FindLinkPreset(std::string_view name);

// The DeviceType / LinkClass of a preset, named after it (DeviceType::preset set too).
DeviceType ToDeviceType(const DevicePreset& preset);
LinkClass ToLinkClass(const LinkPreset& preset);

// By name; the error lists the known names ("unknown device preset 'h100x' (known: ...)").
Result<DeviceType> PresetDeviceType(std::string_view name);
Result<LinkClass> PresetLinkClass(std::string_view name);

// "a100-80g, a100-40g, ..." (for error messages and help).
std::string DevicePresetNames();
std::string LinkPresetNames();

// The presets as the markdown tables of docs/formats/cluster.md (values, then sources); a test
// checks that the document contains exactly this text.
std::string PresetsMarkdown();

}  // namespace motley::spec
