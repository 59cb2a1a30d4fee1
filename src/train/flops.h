// Training FLOPs per token, the numerator of achieved GFLOP/s and MFU in motley's reports.
#pragma once

#include <cstdint>

#include "spec/model_spec.h"

namespace motley::train {

// Parameters that cost matmul FLOPs per token: every block plus the final norm and LM head
// (the embedding is a lookup and is left out).
int64_t NonEmbeddingParams(const spec::ModelSpec& model);

// 6 N + 12 L C T FLOPs per trained token (forward + backward), N = NonEmbeddingParams, T the
// sequence length: the accounting of PaLM (Chowdhery et al. 2022, Appendix B), whose second term
// counts the attention score and value matmuls (QK^T and AV) over the full T x T square.
double TrainFlopsPerToken(const spec::ModelSpec& model, int64_t seq_len);

}  // namespace motley::train
