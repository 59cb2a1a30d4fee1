// Helpers for the plan tests: a world (cluster, model, train, compute model, predictor) held
// together so that the references the predictor keeps stay valid.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "perf/cluster_presets.h"
#include "perf/predictor.h"

namespace motley::plan::testing {

struct World {
  spec::ClusterSpec cluster;
  spec::ModelSpec model;
  spec::TrainSpec train;
  perf::PerfSettings settings;
  std::unique_ptr<perf::RooflineComputeModel> compute;
  std::unique_ptr<perf::Predictor> predictor;

  void Finish() {
    settings = perf::DefaultSettings(cluster);
    compute = std::make_unique<perf::RooflineComputeModel>(cluster, model, settings);
    predictor = std::make_unique<perf::Predictor>(cluster, model, train, *compute, settings);
  }
};

inline std::unique_ptr<World> MakeWorld(const std::vector<perf::NodeGroup>& groups,
                                        const std::string& inter, const std::string& model,
                                        int64_t batch, int64_t seq) {
  auto w = std::make_unique<World>();
  auto c = perf::MakeCluster("test", groups, inter);
  MOTLEY_CHECK(c.ok(), c.status().message());
  w->cluster = *c;
  auto m = spec::ModelPreset(model);
  MOTLEY_CHECK(m.ok(), "preset");
  w->model = *m;
  w->train.global_batch = batch;
  w->train.seq_len = seq;
  w->Finish();
  return w;
}

}  // namespace motley::plan::testing
