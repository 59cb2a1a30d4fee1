// Plan-independent parameter initialisation: every tensor is drawn from its own random stream,
// seeded by (global seed, Hugging Face parameter name), so any split of the model into stages (and
// any order of construction) yields bit-identical weights.
//
// The generator is fully specified so that weights are reproducible across compilers and standard
// libraries: std::mt19937_64 (its output sequence is fixed by the C++ standard) feeding our own
// Box-Muller transform in double. std::normal_distribution is deliberately NOT used: its algorithm
// is implementation-defined and differs between libstdc++ and libc++. The transform calls std::log,
// std::sqrt, std::cos and std::sin; sqrt is exact (IEEE), the others are correctly rounded or
// within one ulp in glibc, so values agree across machines to float precision and exactly on one
// machine. Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace motley::model {

// The seed of one tensor's stream: splitmix64(global_seed ^ fnv1a64(name)).
uint64_t ParameterSeed(uint64_t global_seed, std::string_view name);

// `count` samples of normal(0, std) from the stream of (global_seed, name), in order, as float.
std::vector<float> NormalInit(uint64_t global_seed, std::string_view name, int64_t count,
                              double std_dev);

}  // namespace motley::model
