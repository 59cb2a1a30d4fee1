// See plan_topology.h.
#include "spec/plan_topology.h"

#include <algorithm>

namespace motley::spec {

bool StageHoldsLayer(const StagePlan& stage, int64_t layer, int64_t num_blocks) {
  if (layer == 0) return stage.has_embedding;
  if (layer == num_blocks + 1) return stage.has_head;
  return stage.first_block <= layer - 1 && layer - 1 < stage.end_block();
}

LayerTensorList LayerTensorsPerTpRank(const ModelSpec& model, int64_t layer, int tp) {
  const int64_t c = model.hidden;
  const int64_t v = model.vocab_size;
  if (layer == 0) return {{v * c, false}};
  if (layer == model.num_blocks + 1) return {{c, false}, {v * c, false}};
  const int64_t q = model.num_heads * model.head_size() / tp;
  const int64_t kv = model.num_kv_heads * model.head_size() / tp;
  const int64_t f = model.ffn_hidden / tp;
  return {{c, false},     {q * c, true}, {kv * c, true}, {kv * c, true}, {c * q, true},
          {c, false},     {f * c, true}, {f * c, true},  {c * f, true}};
}

LayerParams LayerParamsPerTpRank(const ModelSpec& model, int64_t layer, int tp) {
  LayerParams out;
  for (const LayerTensor& t : LayerTensorsPerTpRank(model, layer, tp)) {
    (t.sharded ? out.sharded : out.replicated) += t.elements;
  }
  return out;
}

LayerParams LayerParamsMemo::Of(int64_t layer, int tp) {
  MOTLEY_CHECK(tp >= 1, "LayerParamsMemo: TP degree below 1");
  const size_t cls = layer == 0 ? 0 : layer == model_.num_blocks + 1 ? 2 : 1;
  if (by_tp_.size() <= static_cast<size_t>(tp)) by_tp_.resize(static_cast<size_t>(tp) + 1);
  Entry& e = by_tp_[static_cast<size_t>(tp)][cls];
  if (!e.known) {
    e.params = LayerParamsPerTpRank(model_, layer, tp);
    e.known = true;
  }
  return e.params;
}

int64_t StageParamsPerTpRank(const ModelSpec& model, int64_t num_blocks, bool has_embedding,
                             bool has_head, int tp) {
  int64_t params = num_blocks * LayerParamsPerTpRank(model, 1, tp).total();
  if (has_embedding) params += LayerParamsPerTpRank(model, 0, tp).total();
  if (has_head) params += LayerParamsPerTpRank(model, model.num_blocks + 1, tp).total();
  return params;
}

int BoundaryPeer(int tp_rank, int other_degree) { return tp_rank % other_degree; }

std::vector<int> BoundaryReceivers(int sender_tp, int sender_degree, int receiver_degree) {
  std::vector<int> out;
  for (int j = 0; j < receiver_degree; ++j) {
    if (j % sender_degree == sender_tp) out.push_back(j);
  }
  return out;
}

std::vector<int> PlanDevices(const Plan& plan) {
  std::vector<int> devices;
  for (const PipelinePlan& pipe : plan.pipelines) {
    for (const StagePlan& stage : pipe.stages) {
      devices.insert(devices.end(), stage.devices.begin(), stage.devices.end());
    }
  }
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return devices;
}

std::vector<LayerHolding> LayerHoldings(const Plan& plan, int64_t num_blocks) {
  std::vector<LayerHolding> out(static_cast<size_t>(NumGradientLayers(num_blocks)));
  for (const PipelinePlan& pipe : plan.pipelines) {
    for (const StagePlan& stage : pipe.stages) {
      ForEachGradientLayerOf(stage, num_blocks, [&](int64_t layer) {
        LayerHolding& h = out[static_cast<size_t>(layer)];
        if (h.holders++ == 0) h.tp_degree = stage.tp_degree;
        if (h.tp_degree != stage.tp_degree) h.mixed = true;
      });
    }
  }
  return out;
}

std::vector<LayerGroup> DataParallelGroups(const Plan& plan, int64_t num_blocks) {
  const std::vector<LayerHolding> holdings = LayerHoldings(plan, num_blocks);
  std::vector<std::vector<const StagePlan*>> holders(holdings.size());
  for (const PipelinePlan& pipe : plan.pipelines) {
    for (const StagePlan& stage : pipe.stages) {
      ForEachGradientLayerOf(stage, num_blocks, [&](int64_t layer) {
        holders[static_cast<size_t>(layer)].push_back(&stage);
      });
    }
  }
  std::vector<LayerGroup> out;
  for (size_t layer = 0; layer < holdings.size(); ++layer) {
    const LayerHolding& h = holdings[layer];
    if (h.holders == 0) continue;
    const int degree = h.mixed ? 1 : h.tp_degree;
    for (int j = 0; j < degree; ++j) {
      LayerGroup group;
      group.layer = static_cast<int64_t>(layer);
      group.mixed = h.mixed;
      group.tp_degree = degree;
      group.tp_rank = j;
      for (const StagePlan* stage : holders[layer]) {
        for (size_t i = 0; i < stage->devices.size(); ++i) {
          if (h.mixed || static_cast<int>(i) == j) group.devices.push_back(stage->devices[i]);
        }
      }
      std::sort(group.devices.begin(), group.devices.end());
      out.push_back(std::move(group));
    }
  }
  return out;
}

}  // namespace motley::spec
