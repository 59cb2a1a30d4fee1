// Benchmark check of the GEMM formula (perf/compute_model_kernels.h) against published GEMM
// throughput (bench/data/gemm_benchmarks.csv): for every row, the device preset's modelled
// TFLOP/s, the signed error, the tile and waves the formula chose. With --fit, the A100's
// gemm_efficiency and gemm_overlap are fitted to the Azure A100 sweep (rows whose sides are all
// multiples of 8; the formula has no alignment term), minimising the mean |log error|, and each
// fitted row's leave-one-out error is printed: the numbers spec/device_presets.cc quotes.
//
//   motley_gemm_model_check [--fit] [CSV]     (default CSV: the repository's bench/data file)
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "motley_source_dir.h"
#include "perf/compute_model_kernels.h"
#include "spec/device_presets.h"

namespace {

using motley::perf::EstimateGemm;
using motley::perf::GemmEstimate;
using motley::perf::GemmShape;
using motley::perf::KernelRates;

struct Row {
  std::string preset;
  std::string dtype;
  GemmShape shape;
  double tflops = 0;
  std::string source;
};

std::vector<Row> ReadRows(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::vector<Row> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::stringstream ss(line);
    std::vector<std::string> f;
    std::string cell;
    while (std::getline(ss, cell, ',')) f.push_back(cell);
    if (f.size() != 7) {
      std::fprintf(stderr, "%s: bad row '%s'\n", path.c_str(), line.c_str());
      std::exit(2);
    }
    Row r;
    r.preset = f[0];
    r.dtype = f[1];
    r.shape = {std::stod(f[2]), std::stod(f[3]), std::stod(f[4]), 1};
    r.tflops = std::stod(f[5]);
    r.source = f[6];
    rows.push_back(r);
  }
  return rows;
}

KernelRates RatesOf(const Row& r) {
  auto type = motley::spec::PresetDeviceType(r.preset);
  auto precision = motley::spec::ParsePrecision(r.dtype);
  if (!type.ok() || !precision) {
    std::fprintf(stderr, "row %s %s: unknown preset or dtype\n", r.preset.c_str(), r.dtype.c_str());
    std::exit(2);
  }
  return KernelRates::Of(*type, *precision);
}

double ModelTflops(const KernelRates& rates, const Row& r) {
  return r.shape.flops() / EstimateGemm(rates, r.shape).time_s / 1e12;
}

bool Aligned(const Row& r) {
  return std::fmod(r.shape.m, 8) == 0 && std::fmod(r.shape.n, 8) == 0 &&
         std::fmod(r.shape.k, 8) == 0;
}

struct Fit {
  double efficiency = 0;
  double overlap = 0;
  double mean_abs_log = 1e30;
};

// Grid search over efficiency in [0.60, 0.99] (step 0.001) and overlap in [0, 1] (step 0.01).
Fit FitRows(KernelRates rates, const std::vector<const Row*>& rows) {
  Fit best;
  for (int i = 600; i <= 990; ++i) {
    for (int j = 0; j <= 100; ++j) {
      rates.gemm_efficiency = i / 1000.0;
      rates.gemm_overlap = j / 100.0;
      double sum = 0;
      for (const Row* r : rows) sum += std::fabs(std::log(ModelTflops(rates, *r) / r->tflops));
      const double mean = sum / static_cast<double>(rows.size());
      if (mean < best.mean_abs_log) best = {rates.gemm_efficiency, rates.gemm_overlap, mean};
    }
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  bool fit = false;
  std::string path = std::string(MOTLEY_SOURCE_DIR) + "/bench/data/gemm_benchmarks.csv";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--fit") {
      fit = true;
    } else if (arg == "-h" || arg == "--help") {
      std::printf("usage: motley_gemm_model_check [--fit] [CSV]\n");
      return 0;
    } else {
      path = arg;
    }
  }
  const std::vector<Row> rows = ReadRows(path);
  std::printf("GEMM formula against %s (presets as in spec/device_presets.cc)\n", path.c_str());
  std::printf("%-9s %-5s %22s %9s %9s %7s %8s %6s  %s\n", "preset", "dtype", "m x n x k",
              "measured", "model", "error", "tile", "waves", "source");
  double sum_abs = 0;
  int n = 0;
  for (const Row& r : rows) {
    const KernelRates rates = RatesOf(r);
    const GemmEstimate e = EstimateGemm(rates, r.shape);
    const double model = r.shape.flops() / e.time_s / 1e12;
    const double err = (model - r.tflops) / r.tflops;
    char shape[64];
    std::snprintf(shape, sizeof(shape), "%.0fx%.0fx%.0f", r.shape.m, r.shape.n, r.shape.k);
    char tile[16];
    std::snprintf(tile, sizeof(tile), "%dx%d", e.tile.m, e.tile.n);
    std::printf("%-9s %-5s %22s %9.1f %9.1f %+6.1f%% %8s %6.0f  %s%s\n", r.preset.c_str(),
                r.dtype.c_str(), shape, r.tflops, model, 100 * err, tile, e.waves, r.source.c_str(),
                Aligned(r) ? "" : " (unaligned side)");
    sum_abs += std::fabs(err);
    ++n;
  }
  std::printf("mean |error| of the modelled TFLOP/s: %.1f%% over %d rows\n", 100 * sum_abs / n, n);
  if (!fit) return 0;

  std::vector<const Row*> sweep;
  for (const Row& r : rows) {
    if (r.preset == "a100-80g" && r.source == "azure-nd-a100-v4" && Aligned(r)) sweep.push_back(&r);
  }
  const KernelRates base = RatesOf(*sweep.front());
  const Fit all = FitRows(base, sweep);
  std::printf(
      "\nfit on the %zu aligned Azure A100 rows: gemm_efficiency %.3f, gemm_overlap %.2f "
      "(mean |log error| %.2f%%)\n",
      sweep.size(), all.efficiency, all.overlap, 100 * all.mean_abs_log);
  std::printf("leave-one-out (fit without the row, predict it):\n");
  double loo_sum = 0;
  for (size_t i = 0; i < sweep.size(); ++i) {
    std::vector<const Row*> rest;
    for (size_t j = 0; j < sweep.size(); ++j) {
      if (j != i) rest.push_back(sweep[j]);
    }
    const Fit f = FitRows(base, rest);
    KernelRates rates = base;
    rates.gemm_efficiency = f.efficiency;
    rates.gemm_overlap = f.overlap;
    const double err = (ModelTflops(rates, *sweep[i]) - sweep[i]->tflops) / sweep[i]->tflops;
    loo_sum += std::fabs(err);
    std::printf("  %.0fx%.0fx%.0f: efficiency %.3f overlap %.2f -> error %+.1f%%\n",
                sweep[i]->shape.m, sweep[i]->shape.n, sweep[i]->shape.k, f.efficiency, f.overlap,
                100 * err);
  }
  std::printf("mean leave-one-out |error| %.1f%%\n",
              100 * loo_sum / static_cast<double>(sweep.size()));

  // The best-shape rows are ceilings a shape search found on other machines, not sweeps: the
  // efficiency that reproduces each as a pure roofline (overlap 1: the ceilings leave no room for
  // the sweep's overlap term), and for a device without a sweep that efficiency relative to the
  // A100's best shape, applied to the A100's sweep fit (a ratio measured the same way).
  auto solve = [&](const Row& r) {
    KernelRates rates = RatesOf(r);
    rates.gemm_overlap = 1.0;
    double lo = 0.01;
    double hi = 1.0;
    for (int it = 0; it < 60; ++it) {
      rates.gemm_efficiency = 0.5 * (lo + hi);
      (ModelTflops(rates, r) < r.tflops ? lo : hi) = rates.gemm_efficiency;
    }
    return 0.5 * (lo + hi);
  };
  double a100_best = 0;
  for (const Row& r : rows) {
    if (r.preset == "a100-80g" && r.source == "ml-engineering-best-shape") a100_best = solve(r);
  }
  if (a100_best > 0) {
    std::printf(
        "\nbest-shape rows: efficiency reproducing the row; x %.3f (A100 sweep fit %.3f / "
        "A100 best shape %.3f) for a device without a sweep\n",
        all.efficiency / a100_best, all.efficiency, a100_best);
    for (const Row& r : rows) {
      if (r.source != "ml-engineering-best-shape") continue;
      const double e = solve(r);
      std::printf("  %-9s %.3f -> %.3f\n", r.preset.c_str(), e, e * all.efficiency / a100_best);
    }
  }
  return 0;
}
