// Helpers shared by the model tests: the tiny test configuration and host<->device copies.
// Test-only (included by *_test.cc); header-only.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "spec/model_spec.h"
#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace motley::model::testing {

// L=2, C=16, NH=4, NKV=2 (grouped-query), HS=4, F=32, V=32.
inline spec::ModelSpec TinySpec() {
  spec::ModelSpec m;
  m.name = "model-test-tiny";
  m.num_blocks = 2;
  m.hidden = 16;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.ffn_hidden = 32;
  m.vocab_size = 32;
  m.max_seq_len = 16;
  return m;
}

inline std::vector<float> ToHost(tensor::Backend& backend, const tensor::Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  backend.CopyToHost(out.data(), t, t.bytes());
  return out;
}

inline void FromHost(tensor::Backend& backend, tensor::Tensor& t, const std::vector<float>& v) {
  backend.CopyFromHost(t, v.data(), v.size() * sizeof(float));
}

inline tensor::Tensor DeviceI32(tensor::Backend& backend, tensor::Shape shape,
                                const std::vector<int32_t>& values) {
  tensor::Tensor t = backend.Empty(shape, tensor::DType::kI32);
  backend.CopyFromHost(t, values.data(), values.size() * sizeof(int32_t));
  return t;
}

// `count` tokens uniform in [0, vocab) from a fixed seed.
inline std::vector<int32_t> RandomTokens(int64_t count, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> out(static_cast<size_t>(count));
  for (auto& x : out) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return out;
}

}  // namespace motley::model::testing
