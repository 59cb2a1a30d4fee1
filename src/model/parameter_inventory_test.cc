// The parameter counts the predictor and the memory model read (spec/plan_topology.h
// LayerParamsPerTpRank, StageParamsPerTpRank) equal the tensors this module allocates for every
// TP rank of a stage: block weights split, norms, embedding and head whole on every rank; and
// tensor by tensor, in allocation order (LayerTensorsPerTpRank, which ZeRO-1's chunks follow).
#include <gtest/gtest.h>

#include "model/parameters.h"
#include "spec/plan_topology.h"

namespace motley::model {
namespace {

struct Counted {
  int64_t total = 0;
  int64_t sharded = 0;
};

Counted Count(const std::vector<ParamInfo>& infos) {
  Counted c;
  for (const ParamInfo& info : infos) {
    c.total += info.shape.numel();
    if (info.sharded()) c.sharded += info.shape.numel();
  }
  return c;
}

TEST(ParameterInventoryTest, SpecCountsEqualTheAllocatedTensorsOnEveryTpRank) {
  for (const char* preset : {"tiny", "small"}) {
    spec::ModelSpec model = *spec::ModelPreset(preset);
    model.num_blocks = 3;
    for (int tp : {1, 2, 4}) {
      if (model.num_kv_heads % tp != 0 || model.num_heads % tp != 0) continue;
      for (const bool emb : {false, true}) {
        for (const bool head : {false, true}) {
          for (int rank = 0; rank < tp; ++rank) {
            StageLayout layout;
            layout.first_block = 1;
            layout.num_blocks = 2;
            layout.has_embedding = emb;
            layout.has_head = head;
            layout.tp_rank = rank;
            layout.tp_degree = tp;
            const Counted got = Count(StageParamInfos(model, layout));
            SCOPED_TRACE(::testing::Message() << preset << " tp " << tp << " rank " << rank
                                              << " emb " << emb << " head " << head);
            EXPECT_EQ(got.total, spec::StageParamsPerTpRank(model, 2, emb, head, tp));
            int64_t sharded = 2 * spec::LayerParamsPerTpRank(model, 1, tp).sharded;
            if (emb) sharded += spec::LayerParamsPerTpRank(model, 0, tp).sharded;
            if (head) sharded += spec::LayerParamsPerTpRank(model, 4, tp).sharded;
            EXPECT_EQ(got.sharded, tp > 1 ? sharded : 0);
          }
        }
      }
    }
  }
}

TEST(ParameterInventoryTest, SpecTensorsEqualTheAllocatedTensorsInOrder) {
  for (const char* preset : {"tiny", "small"}) {
    spec::ModelSpec model = *spec::ModelPreset(preset);
    model.num_blocks = 3;
    for (int tp : {1, 2}) {
      for (int rank = 0; rank < tp; ++rank) {
        StageLayout layout = StageLayout::Full(model);
        layout.tp_rank = rank;
        layout.tp_degree = tp;
        const std::vector<ParamInfo> infos = StageParamInfos(model, layout);
        std::vector<spec::LayerTensor> want;
        for (int64_t layer = 0; layer < spec::NumGradientLayers(model.num_blocks); ++layer) {
          for (const spec::LayerTensor& t : spec::LayerTensorsPerTpRank(model, layer, tp)) {
            want.push_back(t);
          }
        }
        SCOPED_TRACE(::testing::Message() << preset << " tp " << tp << " rank " << rank);
        ASSERT_EQ(infos.size(), want.size());
        for (size_t i = 0; i < infos.size(); ++i) {
          EXPECT_EQ(infos[i].shape.numel(), want[i].elements) << infos[i].name;
          if (tp > 1) {
            EXPECT_EQ(infos[i].sharded(), want[i].sharded) << infos[i].name;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace motley::model
