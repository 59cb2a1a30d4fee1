// See flops.h.
#include "train/flops.h"

namespace motley::train {

int64_t NonEmbeddingParams(const spec::ModelSpec& model) {
  return model.num_blocks * model.BlockParams() + model.HeadParams();
}

double TrainFlopsPerToken(const spec::ModelSpec& model, int64_t seq_len) {
  return 6.0 * static_cast<double>(NonEmbeddingParams(model)) +
         12.0 * static_cast<double>(model.num_blocks) * static_cast<double>(model.hidden) *
             static_cast<double>(seq_len);
}

}  // namespace motley::train
