// Reads a motley checkpoint with the reference `safetensors` Python package (PyPI) and compares
// every tensor with the values we saved, bit for bit. Skipped, with a message saying how to
// install it, when python3 cannot import safetensors and numpy.
#include <gtest/gtest.h>

#include <cstdlib>

#include <fmt/core.h>

#include "backend/cpu/cpu_backend.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_test_util.h"

namespace motley::train {
namespace {

// Loads every file through the index with safetensors.numpy and compares with expected.json.
constexpr const char* kScript = R"(
import json, sys, os
import numpy as np
from safetensors.numpy import load_file
ckpt, expected_path = sys.argv[1], sys.argv[2]
expected = json.load(open(expected_path))
seen = {}
for index in ("model.safetensors.index.json", "optimizer.safetensors.index.json"):
    weight_map = json.load(open(os.path.join(ckpt, index)))["weight_map"]
    for f in sorted(set(weight_map.values())):
        for name, arr in load_file(os.path.join(ckpt, f)).items():
            assert weight_map[name] == f, (name, f)
            seen[name] = arr
assert sorted(seen) == sorted(expected), "names differ"
for name, want in expected.items():
    got = seen[name]
    assert got.dtype == np.float32, (name, got.dtype)
    assert list(got.shape) == want["shape"], (name, got.shape)
    w = np.array(want["values"], dtype=np.float64).astype(np.float32).reshape(want["shape"])
    assert np.array_equal(got, w), name
print("ok", len(seen))
)";

TEST(SafetensorsPython, ReferenceLibraryReadsOurFiles) {
  if (std::system("python3 -c 'import safetensors, numpy' > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 module 'safetensors' (or numpy) is missing: "
                    "`pip install safetensors numpy` to run this test";
  }
  backend::CpuBackend be;
  testing::TempDir tmp;
  const spec::ModelSpec m = testing::Model4();
  model::ParameterSet s0 = testing::MakeSet(be, m, testing::Layout(0, 3, true, false), 5, 0.5F);
  model::ParameterSet s1 = testing::MakeSet(be, m, testing::Layout(3, 1, false, true), 5, 0.5F);
  CheckpointMetadata meta;
  meta.step = 4;
  auto dir = SaveCheckpoint(tmp.path() + "/ckpt", meta, {{&be, &s0}, {&be, &s1}});
  ASSERT_TRUE(dir.ok()) << dir.status().message();

  nlohmann::json expected = nlohmann::json::object();
  for (const model::ParameterSet* set : {&s0, &s1}) {
    for (const model::Parameter& p : *set) {
      const auto dims = p.info.shape.dims();
      expected[p.name()] = {{"shape", dims}, {"values", testing::Host(be, p.value)}};
      expected["optimizer.m." + p.name()] = {{"shape", dims}, {"values", testing::Host(be, p.m)}};
      expected["optimizer.v." + p.name()] = {{"shape", dims}, {"values", testing::Host(be, p.v)}};
    }
  }
  testing::WriteBytes(tmp.path() + "/expected.json", expected.dump());
  testing::WriteBytes(tmp.path() + "/read.py", kScript);
  const std::string out = tmp.path() + "/out.txt";
  const int rc = std::system(
      fmt::format("python3 {0}/read.py {1} {0}/expected.json > {2} 2>&1", tmp.path(), *dir, out)
          .c_str());
  EXPECT_EQ(rc, 0) << testing::ReadBytes(out);
  EXPECT_EQ(testing::ReadBytes(out), fmt::format("ok {}\n", 3 * (s0.size() + s1.size())));
}

}  // namespace
}  // namespace motley::train
