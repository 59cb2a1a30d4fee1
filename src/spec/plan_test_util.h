// Test helpers shared by the spec and sched tests and the runtime tests
// (tests/parallel/parallel_test_util.h) that write plans by hand: a StagePlan in one line, and
// the tiny 4-block model they plan for.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "spec/model_spec.h"
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

// L=4 so that pipelines can split blocks unevenly; NH=4, NKV=2, F=64 so that TP 2 splits heads,
// kv heads and F; V=256 (byte tokens) and T<=16 keep a step at a few milliseconds. A block has
// 9,280 parameters (64 of them norm weights), the embedding 8,192, the head 8,224.
inline ModelSpec TinyFourBlockModel() {
  ModelSpec m;
  m.name = "tiny4";
  m.num_blocks = 4;
  m.hidden = 32;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.ffn_hidden = 64;
  m.vocab_size = 256;
  m.max_seq_len = 16;
  return m;
}

}  // namespace motley::spec::test_util
