// Test helper: a StagePlan in one line, shared by the spec tests and the runtime tests
// (tests/parallel/parallel_test_util.h) that write plans by hand.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "spec/plan.h"

namespace motley::spec::test_util {

// Blocks [first, first + num) on `devices` (the TP group, in TP-rank order), with the embedding
// and/or the head.
inline StagePlan Stage(int64_t first, int64_t num, bool embedding, bool head,
                       std::vector<int> devices) {
  StagePlan s;
  s.first_block = first;
  s.num_blocks = num;
  s.has_embedding = embedding;
  s.has_head = head;
  s.tp_degree = static_cast<int>(devices.size());
  s.devices = std::move(devices);
  return s;
}

}  // namespace motley::spec::test_util
