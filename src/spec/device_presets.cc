// The preset table (see device_presets.h). Units: FLOP/s, bytes, bytes/s, seconds; memory sizes
// in decimal GB as the datasheets state them. Derivations are written beside the numbers. The
// GEMM efficiency and overlap are the only fitted constants: fitted to a published A100 GEMM
// sweep (bench/data/gemm_benchmarks.csv; bench/gemm_model_check.cc --fit refits them and prints
// each row's error), never to the end-to-end runs they are checked against.
#include "spec/device_presets.h"

#include <fmt/format.h>

namespace motley::spec {
namespace {

// Sources, by the key calibration-sources uses (quoted in docs/formats/cluster.md).
constexpr std::string_view kA100Sheet = "NVIDIA A100 datasheet (SXM, dense)";
constexpr std::string_view kA100Paper = "NVIDIA A100 architecture whitepaper: 108 SMs";
constexpr std::string_view kH100Sheet = "NVIDIA H100 datasheet (SXM5, dense)";
constexpr std::string_view kH100Paper = "NVIDIA H100 architecture whitepaper: 132 SMs (SXM5)";
constexpr std::string_view kH200Sheet = "NVIDIA H200 datasheet (SXM; GH100 compute as H100)";
constexpr std::string_view kMi250xSheet =
    "AMD Instinct MI250X datasheet, halved: one of its two GCDs";
constexpr std::string_view kMi300xSheet = "AMD Instinct MI300X datasheet (dense)";
constexpr std::string_view kAscend =
    "motley's earlier 910b preset ('public product figures' as HETHUB used the 910B); no "
    "datasheet cited";
constexpr std::string_view kAzureA100 =
    "Azure/AI-benchmarking-guide ND_A100_v4_results.md (BabelStream triad)";
constexpr std::string_view kAzureH100 =
    "Azure/AI-benchmarking-guide ND_H100_v5_results.md (BabelStream triad)";
constexpr std::string_view kAzureH200 = "Azure/AI-benchmarking-guide (H200, BabelStream triad)";
constexpr std::string_view kDerivedBw =
    "derived: datasheet bandwidth x 0.862, the mean BabelStream triad / datasheet ratio of "
    "A100 80GB, H100 and H200 (no benchmark cited for this device)";
constexpr std::string_view kReframe =
    "reframe-hpc cscs-checks kernel_latency.py reference (A100, back-to-back launch)";
constexpr std::string_view kReframeAssumed =
    "assumed: the A100's back-to-back launch (reframe kernel_latency.py); same CUDA launch path, "
    "no measurement without CUDA graphs cited";
constexpr std::string_view kPetsc =
    "petsc/src/sys/objects/device/tests/ex1hip.hip.cpp header (MI250X GCD, Crusher)";
constexpr std::string_view kPetscAssumed =
    "assumed: the MI250X's launch (petsc ex1hip); same ROCm launch path";
constexpr std::string_view kA100Gemm =
    "fitted with the GEMM overlap to the 7 aligned rows of the Azure ND_A100_v4 cuBLASLt fp16 "
    "sweep, 1024^3 to 16384^3 (bench/gemm_model_check.cc --fit; mean |log error| 2.5%, "
    "leave-one-out 5.8%)";
constexpr std::string_view kH100Gemm =
    "derived: ml-engineering best shape bf16 2048x2048x13312, 794.5 TFLOP/s, reproduced at 0.845 "
    "(a roofline with its wave factor), x 0.947 = the A100's sweep fit 0.839 over the A100's "
    "best shape on the same page (0.886); bench/gemm_model_check.cc --fit prints both";
constexpr std::string_view kH200Gemm = "the H100's (same GH100 compute and SM count)";
constexpr std::string_view kMi300xGemm =
    "derived: ml-engineering best shape bf16 (TunableOp) 668.4 of 1307.4 = 0.511 (shape not "
    "given), over the A100's best-shape fraction on the same page (271.2 / 312 = 0.869), x the "
    "A100's sweep fit 0.839";
constexpr std::string_view kMi250xGemm =
    "assumed: the MI300X's (same vendor library stack; no MI250X GEMM benchmark cited)";
constexpr std::string_view kAscendGemm = "assumed: the A100's (no Ascend GEMM benchmark cited)";
constexpr std::string_view kA100Overlap =
    "fitted with the GEMM efficiency to the aligned Azure ND_A100_v4 fp16 sweep "
    "(bench/gemm_model_check.cc --fit)";
constexpr std::string_view kOverlapAssumed =
    "assumed: the A100's (fitted to the A100 sweep; no shape sweep cited for this device)";
constexpr std::string_view kFp32Same = "assumed: the 16-bit value (no fp32 GEMM benchmark cited)";
constexpr std::string_view kFa2A100 =
    "FlashAttention-2 paper figure: 203 TFLOP/s fwd+bwd, head dim 128, seq 16k = 0.651 of 312";
constexpr std::string_view kFa2H100 =
    "FlashAttention-2 paper figure: 338 TFLOP/s fwd+bwd on H100 = 0.342 of 989";
constexpr std::string_view kNoFused = "no fused-attention benchmark cited: the GEMM efficiency";
constexpr std::string_view kCublasTiles =
    "NVIDIA Matrix Multiplication Background User's Guide, 'Typical tile dimensions in cuBLAS': "
    "256x128 / 128x256 most efficient down to 64x64 least (64x64 left out: the model has no "
    "per-tile efficiency)";
constexpr std::string_view kRocmTiles =
    "assumed: cuBLAS's tiles (NVIDIA Matrix Multiplication Background guide); no rocBLAS / "
    "hipBLASLt tile list cited";
constexpr std::string_view kCpuMeasured =
    "measured: bench/data/cpu_rates.md (OpenBLAS sgemm and triad on one thread of the "
    "development machines)";

constexpr double kGB = 1e9;
constexpr double kTF = 1e12;

const std::vector<GemmTile> kGpuTiles = {{256, 128}, {128, 256}, {128, 128}, {256, 64},
                                         {64, 256},  {128, 64},  {64, 128}};

std::vector<DevicePreset> MakeDevicePresets() {
  std::vector<DevicePreset> t;
  t.push_back({"a100-80g",
               "cuda",
               "NVIDIA A100 SXM 80GB",
               {19.5 * kTF, kA100Sheet},
               {312 * kTF, kA100Sheet},
               {312 * kTF, kA100Sheet},
               {80 * kGB, kA100Sheet},
               {2039 * kGB, kA100Sheet},
               {1700 * kGB, kAzureA100},
               {108, kA100Paper},
               {2.7e-6, kReframe},
               {0.839, kA100Gemm},
               {0.839, kFp32Same},
               {0.35, kA100Overlap},
               {0.651, kFa2A100},
               kGpuTiles,
               kCublasTiles});
  t.push_back({"a100-40g",
               "cuda",
               "NVIDIA A100 SXM 40GB",
               {19.5 * kTF, kA100Sheet},
               {312 * kTF, kA100Sheet},
               {312 * kTF, kA100Sheet},
               {40 * kGB, kA100Sheet},
               {1555 * kGB, kA100Sheet},
               {1296 * kGB,
                "derived: the 80GB's triad x 1555/2039 (same memory system, fewer "
                "stacks at a lower clock)"},
               {108, kA100Paper},
               {2.7e-6, kReframe},
               {0.839, "the A100 80GB's (same compute)"},
               {0.839, kFp32Same},
               {0.35, "the A100 80GB's (same compute)"},
               {0.651, "the A100 80GB's (same compute)"},
               kGpuTiles,
               kCublasTiles});
  t.push_back({"h100",
               "cuda",
               "NVIDIA H100 SXM5 80GB",
               {67 * kTF, kH100Sheet},
               {989 * kTF, kH100Sheet},
               {989 * kTF, kH100Sheet},
               {80 * kGB, kH100Sheet},
               {3350 * kGB, kH100Sheet},
               {2970 * kGB, kAzureH100},
               {132, kH100Paper},
               {2.7e-6, kReframeAssumed},
               {0.800, kH100Gemm},
               {0.800, kFp32Same},
               {0.35, kOverlapAssumed},
               {0.342, kFa2H100},
               kGpuTiles,
               kCublasTiles});
  t.push_back({"h200",
               "cuda",
               "NVIDIA H200 SXM 141GB",
               {67 * kTF, kH200Sheet},
               {989 * kTF, kH200Sheet},
               {989 * kTF, kH200Sheet},
               {141 * kGB, kH200Sheet},
               {4800 * kGB, kH200Sheet},
               {4150 * kGB, kAzureH200},
               {132, kH100Paper},
               {2.7e-6, kReframeAssumed},
               {0.800, kH200Gemm},
               {0.800, kFp32Same},
               {0.35, kOverlapAssumed},
               {0.342, "the H100's (FlashAttention-2)"},
               kGpuTiles,
               kCublasTiles});
  t.push_back({"mi250x",
               "rocm",
               "AMD Instinct MI250X, one GCD (ROCm exposes each of the card's two GCDs as a "
               "device; a rank drives one)",
               {47.85 * kTF, "AMD MI250X datasheet: 95.7 TFLOP/s fp32 matrix, halved"},
               {191.5 * kTF, kMi250xSheet},
               {191.5 * kTF, kMi250xSheet},
               {64 * kGB, kMi250xSheet},
               {1638.4 * kGB, kMi250xSheet},
               {1412 * kGB, kDerivedBw},
               {110, "AMD MI250X datasheet: 220 CUs, halved"},
               {3.74e-6, kPetsc},
               {0.493, kMi250xGemm},
               {0.493, kFp32Same},
               {0.35, kOverlapAssumed},
               {0, kNoFused},
               kGpuTiles,
               kRocmTiles});
  t.push_back({"mi300x",
               "rocm",
               "AMD Instinct MI300X",
               {163.4 * kTF, kMi300xSheet},
               {1307.4 * kTF, kMi300xSheet},
               {1307.4 * kTF, kMi300xSheet},
               {192 * kGB, kMi300xSheet},
               {5300 * kGB, kMi300xSheet},
               {4569 * kGB, kDerivedBw},
               {304, "AMD MI300X datasheet: 304 CUs"},
               {3.74e-6, kPetscAssumed},
               {0.493, kMi300xGemm},
               {0.493, kFp32Same},
               {0.35, kOverlapAssumed},
               {0, kNoFused},
               kGpuTiles,
               kRocmTiles});
  t.push_back({"ascend-910b",
               "ascend",
               "Huawei Ascend 910B",
               {80 * kTF, kAscend},
               {320 * kTF, kAscend},
               {320 * kTF, kAscend},
               {64 * kGB, kAscend},
               {1600 * kGB, kAscend},
               {1379 * kGB, kDerivedBw},
               {0, "unknown: no AI-core count and tile list cited, so no wave quantization"},
               {2.7e-6, "assumed: NVIDIA's back-to-back launch (no Ascend measurement cited)"},
               {0.839, kAscendGemm},
               {0.839, kFp32Same},
               {0.35, kOverlapAssumed},
               {0, kNoFused},
               {},
               "none (compute_units unknown)"});
  t.push_back({"cpu",
               "cpu",
               "one core of motley's development machines (AMD EPYC, Zen 4, under KVM) as a "
               "rank runs it: one OpenBLAS thread; peak = the measured sgemm rate",
               {104e9, kCpuMeasured},
               {104e9, "the fp32 rate (the CPU backend computes in fp32)"},
               {104e9, "the fp32 rate (the CPU backend computes in fp32)"},
               {4 * kGB, "chosen: a share of the 24 GB host for one rank, not a measurement"},
               {27 * kGB, kCpuMeasured},
               {27 * kGB, kCpuMeasured},
               {1, "one thread per rank (docs/architecture.md §6)"},
               {0, "an op is a function call: no launch cost modelled"},
               {1.0, "1: the peak is itself the measured sgemm rate"},
               {1.0, "1: the peak is itself the measured sgemm rate"},
               {1.0, "1: a roofline (no CPU GEMM sweep cited)"},
               {0, kNoFused},
               {},
               "none (one compute unit)"});
  return t;
}

constexpr std::string_view kNvlinkFit =
    "fitted (latency per ring step and efficiency, least mean |log error|) to nccl-tests 8xA100 "
    "all-reduce busbw 109 / 167 / 214 / 228 GB/s at 16 MB / 67 MB / 268 MB / 1 GB (Azure "
    "ND_A100_v4; errors 0 / +8 / 0 / -2%), the sizes of training's TP and DP messages; the 1 MB "
    "point (36 GB/s) is left out: one latency and bandwidth cannot fit both ends";
constexpr std::string_view kAssumedLink = "assumed (motley's earlier preset; no benchmark cited)";

std::vector<LinkPreset> MakeLinkPresets() {
  std::vector<LinkPreset> t;
  t.push_back({"nvlink",
               "NVLink 3 / NVSwitch (A100 node)",
               {10e-6, kNvlinkFit},
               {300 * kGB,
                "NVIDIA A100 datasheet: 600 GB/s per GPU, 300 "
                "each direction"},
               {0.76, kNvlinkFit}});
  t.push_back({"nvlink4",
               "NVLink 4 / NVSwitch (H100 and H200 nodes)",
               {10e-6, "assumed: NVLink 3's (no ring sweep by size cited)"},
               {450 * kGB, "NVIDIA H100 datasheet: 900 GB/s per GPU, 450 each direction"},
               {0.82,
                "nccl-tests 8xH100 ring all-reduce busbw ~368 GB/s (Azure ND_H100_v5; "
                "NVIDIA/nccl-tests #212) / 450"}});
  t.push_back({"xgmi",
               "AMD Infinity Fabric between MI250X GCDs",
               {2e-6, kAssumedLink},
               {100 * kGB, "AMD MI250X datasheet: 100 GB/s per link"},
               {0.8, kAssumedLink}});
  t.push_back({"hccs",
               "Huawei HCCS between Ascend 910B",
               {2e-6, kAssumedLink},
               {56 * kGB, kAssumedLink},
               {0.8, kAssumedLink}});
  t.push_back({"ib-hdr",
               "InfiniBand HDR NIC, 200 Gbit/s",
               {5e-6, kAssumedLink},
               {25 * kGB, "IBTA HDR: 200 Gbit/s"},
               {0.848,
                "nccl-tests 3 nodes x 8 A100, 4 HDR NICs per node: 84.8 GB/s busbw "
                "(NVIDIA/nccl-tests #119) / (4 x 25)"}});
  t.push_back({"ib-ndr",
               "InfiniBand NDR NIC, 400 Gbit/s",
               {5e-6, "assumed: HDR's"},
               {50 * kGB, "IBTA NDR: 400 Gbit/s"},
               {0.94,
                "NCCL maintainer: 46-48 GB/s per NDR400 NIC expected (NVIDIA/nccl-tests "
                "#290) / 50"}});
  t.push_back({"roce-100g",
               "RoCE NIC, 100 Gbit/s",
               {8e-6, kAssumedLink},
               {12.5 * kGB, "100 Gbit/s"},
               {0.85, kAssumedLink}});
  t.push_back({"eth-25g",
               "Ethernet NIC, 25 Gbit/s (TCP)",
               {30e-6, kAssumedLink},
               {3.125 * kGB, "25 Gbit/s"},
               {0.8, kAssumedLink}});
  t.push_back({"wan-10g",
               "a slow 10 Gbit/s link between islands",
               {100e-6, kAssumedLink},
               {1.25 * kGB, "10 Gbit/s"},
               {0.7, kAssumedLink}});
  return t;
}

template <typename T>
std::string Names(const std::vector<T>& items) {
  std::vector<std::string_view> names;
  for (const T& item : items) names.push_back(item.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string Tiles(const std::vector<GemmTile>& tiles) {
  if (tiles.empty()) return "none";
  std::vector<std::string> parts;
  for (const GemmTile& t : tiles) parts.push_back(fmt::format("{}x{}", t.m, t.n));
  return fmt::format("{}", fmt::join(parts, " "));
}

}  // namespace

const std::vector<DevicePreset>& DevicePresets() {
  static const std::vector<DevicePreset> kTable = MakeDevicePresets();
  return kTable;
}

const std::vector<LinkPreset>& LinkPresets() {
  static const std::vector<LinkPreset> kTable = MakeLinkPresets();
  return kTable;
}

const DevicePreset* FindDevicePreset(std::string_view name) {
  for (const DevicePreset& p : DevicePresets()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const LinkPreset* FindLinkPreset(std::string_view name) {
  for (const LinkPreset& p : LinkPresets()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

DeviceType ToDeviceType(const DevicePreset& p) {
  DeviceType t;
  t.name = std::string(p.name);
  t.vendor = std::string(p.vendor);
  t.preset = std::string(p.name);
  t.peak_fp32_flops = p.peak_fp32_flops.value;
  t.peak_bf16_flops = p.peak_bf16_flops.value;
  t.peak_fp16_flops = p.peak_fp16_flops.value;
  t.memory_bytes = p.memory_bytes.value;
  t.memory_bandwidth = p.memory_bandwidth.value;
  t.achievable_memory_bandwidth = p.achievable_memory_bandwidth.value;
  t.compute_units = static_cast<int>(p.compute_units.value);
  t.kernel_launch_s = p.kernel_launch_s.value;
  t.gemm_efficiency[PrecisionIndex(Precision::kFp32)] = p.gemm_efficiency_fp32.value;
  t.gemm_efficiency[PrecisionIndex(Precision::kBf16)] = p.gemm_efficiency_16bit.value;
  t.gemm_efficiency[PrecisionIndex(Precision::kFp16)] = p.gemm_efficiency_16bit.value;
  t.gemm_overlap = p.gemm_overlap.value;
  for (auto& tiles : t.gemm_tiles) tiles = p.gemm_tiles;
  t.attention_efficiency = p.attention_efficiency.value;
  return t;
}

LinkClass ToLinkClass(const LinkPreset& p) {
  return {std::string(p.name), p.latency_s.value, p.bandwidth.value, p.efficiency.value};
}

std::string DevicePresetNames() {
  return Names(DevicePresets());
}
std::string LinkPresetNames() {
  return Names(LinkPresets());
}

Result<DeviceType> PresetDeviceType(std::string_view name) {
  const DevicePreset* p = FindDevicePreset(name);
  if (p == nullptr) {
    return Err(StatusCode::kInvalidArgument, "unknown device preset '{}' (known: {})", name,
               DevicePresetNames());
  }
  return ToDeviceType(*p);
}

Result<LinkClass> PresetLinkClass(std::string_view name) {
  const LinkPreset* p = FindLinkPreset(name);
  if (p == nullptr) {
    return Err(StatusCode::kInvalidArgument, "unknown link preset '{}' (known: {})", name,
               LinkPresetNames());
  }
  return ToLinkClass(*p);
}

std::string PresetsMarkdown() {
  std::string out;
  out +=
      "| preset | vendor | peak fp32 / bf16 / fp16 TFLOP/s | memory GB | bandwidth GB/s "
      "(achievable) | compute units | launch us | GEMM efficiency 16-bit / fp32 | GEMM "
      "overlap | fused attention efficiency | GEMM tiles |\n";
  out += "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const DevicePreset& p : DevicePresets()) {
    out += fmt::format(
        "| `{}` | {} | {:g} / {:g} / {:g} | {:g} | {:g} ({:g}) | {:g} | {:g} | {:g} / {:g} | {:g} "
        "| "
        "{} | {} |\n",
        p.name, p.vendor, p.peak_fp32_flops.value / kTF, p.peak_bf16_flops.value / kTF,
        p.peak_fp16_flops.value / kTF, p.memory_bytes.value / kGB, p.memory_bandwidth.value / kGB,
        p.achievable_memory_bandwidth.value / kGB, p.compute_units.value,
        p.kernel_launch_s.value * 1e6, p.gemm_efficiency_16bit.value, p.gemm_efficiency_fp32.value,
        p.gemm_overlap.value,
        p.attention_efficiency.value > 0 ? fmt::format("{:g}", p.attention_efficiency.value)
                                         : std::string("(GEMM)"),
        Tiles(p.gemm_tiles));
  }
  out += "\nSources, per preset and field:\n\n";
  for (const DevicePreset& p : DevicePresets()) {
    out += fmt::format("- `{}` ({}):\n", p.name, p.description);
    auto line = [&](std::string_view field, const Sourced& s) {
      out += fmt::format("  - {}: {}\n", field, s.source);
    };
    line("peak fp32", p.peak_fp32_flops);
    line("peak bf16", p.peak_bf16_flops);
    line("peak fp16", p.peak_fp16_flops);
    line("memory", p.memory_bytes);
    line("memory bandwidth", p.memory_bandwidth);
    line("achievable memory bandwidth", p.achievable_memory_bandwidth);
    line("compute units", p.compute_units);
    line("kernel launch", p.kernel_launch_s);
    line("GEMM efficiency 16-bit", p.gemm_efficiency_16bit);
    line("GEMM efficiency fp32", p.gemm_efficiency_fp32);
    line("GEMM overlap", p.gemm_overlap);
    line("fused attention efficiency", p.attention_efficiency);
    out += fmt::format("  - GEMM tiles: {}\n", p.gemm_tiles_source);
  }
  out += "\n| link preset | what | latency us | bandwidth GB/s | efficiency |\n";
  out += "|---|---|---|---|---|\n";
  for (const LinkPreset& l : LinkPresets()) {
    out += fmt::format("| `{}` | {} | {:g} | {:g} | {:g} |\n", l.name, l.description,
                       l.latency_s.value * 1e6, l.bandwidth.value / kGB, l.efficiency.value);
  }
  out += "\nSources, per link preset and field:\n\n";
  for (const LinkPreset& l : LinkPresets()) {
    out += fmt::format("- `{}`: latency: {}; bandwidth: {}; efficiency: {}\n", l.name,
                       l.latency_s.source, l.bandwidth.source, l.efficiency.source);
  }
  return out;
}

}  // namespace motley::spec
