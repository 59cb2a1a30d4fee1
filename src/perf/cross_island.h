// Traffic of one training step that crosses islands (the slow inter-island link of a mixed-NIC
// cluster, Holmes's Ethernet between RDMA groups), read from the step program: pipeline
// messages whose sender and receiver sit in different islands, and collectives whose group spans
// more than one island, by kind. Tensor-parallel groups stay inside a node, so never cross.
// Bytes are those of the training system the predictor models, as the predictor and the
// simulator move them (an activation at the settings' activation element size, a layer
// collective's gradients at the gradient element size, Predictor::ElementBytesOf), not the
// runtime's f32 step program sizes. Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "perf/predictor.h"
#include "sched/step_program.h"
#include "spec/plan.h"

namespace motley::perf {

struct CrossIslandTraffic {
  int64_t pipeline_messages = 0;  // activations and input gradients sent across islands
  int64_t pipeline_bytes = 0;
  // Per collective kind name ("all-reduce", "reduce-scatter", ...; sched::StepOpKindName) whose
  // members span islands: how many, and the bytes of their buffers (one buffer per collective).
  std::map<std::string, int64_t> collectives;
  std::map<std::string, int64_t> collective_buffer_bytes;
};

// `program` was built for `plan` on the predictor's cluster (RankStep::device are its device
// ids), with actions (sched::StepProgramOptions::with_actions).
CrossIslandTraffic CountCrossIslandTraffic(const sched::StepProgram& program,
                                           const spec::Plan& plan, const Predictor& predictor);

}  // namespace motley::perf
