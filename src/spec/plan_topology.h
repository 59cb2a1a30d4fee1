// Plan topology: the one description of who does what in a plan that the runtime (parallel/) and
// the predictor (perf/) both read (docs/architecture.md §3 rule 2): the world's rank order, which
// stage holds which gradient layer, and every layer's data-parallel gradient groups.
//
// Gradient layers: 0 the token embedding, 1 + i transformer block i, num_blocks + 1 the final
// norm with the LM head. A layer's holders are the stages, one per pipeline, that hold it.
// Groups of a layer (parallel/grad_sync.h says how the runtime sums over them):
//  - uniform (every holder has the same TP degree d): d groups, group j holds TP rank j of every
//    holder, which all own the same shards;
//  - mixed TP degrees: one group of all holders' devices, summing full-size buffers.
// A group's members are devices in ascending id order, which is world-rank order (a world rank
// drives the r-th smallest device, parallel/world_layout.h), so a communicator split with the
// world rank as key lists them in this order. Pure functions of a plan; thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/check.h"
#include "spec/plan.h"

namespace motley::spec {

// Number of gradient layers of a model with `num_blocks` blocks (embedding, blocks, head).
inline int64_t NumGradientLayers(int64_t num_blocks) { return num_blocks + 2; }

// Whether `stage` holds gradient layer `layer` (0 <= layer < NumGradientLayers(num_blocks)).
bool StageHoldsLayer(const StagePlan& stage, int64_t layer, int64_t num_blocks);
// Calls f(layer) for every gradient layer `stage` holds, in layer order.
template <typename F>
void ForEachGradientLayerOf(const StagePlan& stage, int64_t num_blocks, F&& f) {
  if (stage.has_embedding) f(int64_t{0});
  for (int64_t b = stage.first_block; b < stage.end_block(); ++b) f(b + 1);
  if (stage.has_head) f(num_blocks + 1);
}

// Parameters one TP rank of degree `tp` holds of gradient layer `layer`, as model/parameters.h
// allocates them: a block's attention and MLP weights are split over the TP ranks; its norms, the
// embedding, the final norm and the LM head are replicated on every TP rank. tp must divide the
// model's heads, kv heads and ffn width (spec::ValidatePlan), so the split is exact.
struct LayerParams {
  int64_t sharded = 0;     // elements of split tensors on this rank
  int64_t replicated = 0;  // elements of tensors every TP rank holds whole
  int64_t total() const { return sharded + replicated; }
};
LayerParams LayerParamsPerTpRank(const ModelSpec& model, int64_t layer, int tp);
// LayerParamsPerTpRank of one model, memoised: all blocks have the same counts, so the step
// program's and the predictor's loops over every layer of every rank look up three layer classes
// (embedding, block, head) per TP degree. The model must outlive it; not thread-safe (one per
// caller).
class LayerParamsMemo {
 public:
  explicit LayerParamsMemo(const ModelSpec& model) : model_(model) {}
  LayerParams Of(int64_t layer, int tp);

 private:
  struct Entry {
    bool known = false;
    LayerParams params;
  };
  const ModelSpec& model_;
  std::vector<std::array<Entry, 3>> by_tp_;  // [tp][class]
};
// The same layer tensor by tensor, in the order model/parameters.h lays them out (embedding;
// a block's input norm, q, k, v, o, post-attention norm, gate, up, down; final norm, LM head):
// ZeRO-1 chunks a layer's flattened tensors in this order (parallel/zero1.cc).
struct LayerTensor {
  int64_t elements = 0;  // on one TP rank
  bool sharded = false;  // split over the TP ranks
};
// At most 9 tensors (a block's); a fixed-capacity list, so the planner's and predictor's loops
// over every layer of every rank do not allocate.
class LayerTensorList {
 public:
  LayerTensorList(std::initializer_list<LayerTensor> tensors) {
    MOTLEY_CHECK(tensors.size() <= 9, "LayerTensorList holds at most 9 tensors");
    for (const LayerTensor& t : tensors) items_[size_++] = t;
  }
  const LayerTensor* begin() const { return items_.data(); }
  const LayerTensor* end() const { return items_.data() + size_; }
  size_t size() const { return size_; }
  const LayerTensor& operator[](size_t i) const { return items_[i]; }

 private:
  std::array<LayerTensor, 9> items_{};
  size_t size_ = 0;
};
LayerTensorList LayerTensorsPerTpRank(const ModelSpec& model, int64_t layer, int tp);
// Parameters one TP rank of a stage holds: the sum over the stage's layers.
int64_t StageParamsPerTpRank(const ModelSpec& model, int64_t num_blocks, bool has_embedding,
                             bool has_head, int tp);

// The devices the plan uses, ascending and distinct: world rank r drives the r-th.
std::vector<int> PlanDevices(const Plan& plan);

// Pipeline transfers between consecutive stages of one pipeline (parallel/world_layout.h and the
// step program read this): activations and gradients are replicated on every TP rank of a stage,
// so TP rank j of the receiving stage takes its activation from TP rank BoundaryPeer(j, d_send)
// of the sender, and each sender sends to every receiver it so serves (BoundaryReceivers). A
// sender of TP rank i takes its output gradient from TP rank BoundaryPeer(i, d_recv) of the next
// stage, which sends its input gradient to every sender it so serves.
// The TP rank of the other stage that TP rank `tp_rank` exchanges with: tp_rank mod other_degree.
int BoundaryPeer(int tp_rank, int other_degree);
// The TP ranks of a stage of degree receiver_degree that sender TP rank sender_tp (of a stage of
// degree sender_degree) sends to: j with j mod sender_degree == sender_tp.
std::vector<int> BoundaryReceivers(int sender_tp, int sender_degree, int receiver_degree);

// How a gradient layer is held: by how many stages (one per pipeline that holds it) and whether
// their TP degrees differ. DataParallelGroups' shape without its member lists; the planner's
// fast memory check reads it.
struct LayerHolding {
  int holders = 0;
  int tp_degree = 0;  // the first holder's degree (0 when no stage holds the layer)
  bool mixed = false;
};
// Every gradient layer's holding, indexed by layer (size NumGradientLayers(num_blocks)).
std::vector<LayerHolding> LayerHoldings(const Plan& plan, int64_t num_blocks);
// ZeRO-1's sharding degree of a layer: its optimizer state is split over the members of its
// group (one per holder) when the holders share a TP degree; mixed degrees sum full-size buffers
// and keep the state whole (1). The step program shards by the same rule.
inline int Zero1ShardDegree(const LayerHolding& h) {
  return h.mixed || h.holders < 1 ? 1 : h.holders;
}

// One data-parallel gradient group of one layer.
struct LayerGroup {
  int64_t layer = 0;
  bool mixed = false;        // holders of different TP degrees
  int tp_degree = 1;         // the holders' degree (uniform); 1 when mixed (full-size buffers)
  int tp_rank = 0;           // the TP rank whose shards the group sums (uniform); 0 when mixed
  std::vector<int> devices;  // members, ascending
};

// Every layer's groups, in layer order and, within a layer, in TP-rank order. A layer no stage
// holds has none; a layer held by one stage of degree d has d groups of one member each.
std::vector<LayerGroup> DataParallelGroups(const Plan& plan, int64_t num_blocks);
// Zero1ShardDegree of one group (its members are the layer's holders for its TP rank).
inline int Zero1ShardDegree(const LayerGroup& g) {
  return Zero1ShardDegree(LayerHolding{static_cast<int>(g.devices.size()), g.tp_degree, g.mixed});
}

}  // namespace motley::spec
