// Helpers shared by the checkpoint tests: a 4-block test model, parameter sets of any layout with
// recognisable values and moments, temporary folders, and tools that damage a checkpoint while
// keeping its checksums consistent (so that the deeper checks are reached). Test-only.
#pragma once

#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "model/parameters.h"
#include "spec/model_spec.h"
#include "tensor/backend.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/sha256.h"

namespace motley::train::testing {

// L=4, C=16, NH=4, NKV=2, F=32, V=32.
inline spec::ModelSpec Model4() {
  spec::ModelSpec m;
  m.name = "ckpt-test";
  m.num_blocks = 4;
  m.hidden = 16;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.ffn_hidden = 32;
  m.vocab_size = 32;
  m.max_seq_len = 16;
  return m;
}

// Values from (seed, name); moments m = value * 0.5 + salt, v = |value| + salt, so that every
// tensor of every kind differs.
inline model::ParameterSet MakeSet(tensor::Backend& be, const spec::ModelSpec& m,
                                   const model::StageLayout& layout, uint64_t seed,
                                   float salt = 0.0F) {
  model::ParameterSet set = model::ParameterSet::Allocate(be, model::StageParamInfos(m, layout));
  set.Initialize(be, seed);
  for (model::Parameter& p : set) {
    std::vector<float> v(static_cast<size_t>(p.value.numel()));
    be.CopyToHost(v.data(), p.value, p.value.bytes());
    std::vector<float> mm(v.size()), vv(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      mm[i] = v[i] * 0.5F + salt;
      vv[i] = std::abs(v[i]) + salt;
    }
    be.CopyFromHost(p.m, mm.data(), mm.size() * sizeof(float));
    be.CopyFromHost(p.v, vv.data(), vv.size() * sizeof(float));
  }
  return set;
}

inline std::vector<float> Host(tensor::Backend& be, const tensor::Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  be.CopyToHost(v.data(), t, t.bytes());
  return v;
}

// Every tensor of `got` equals the same-named one of `want`, bitwise (values, and moments when
// `moments`).
inline void ExpectSameAs(tensor::Backend& be, const model::ParameterSet& want,
                         const model::ParameterSet& got, bool moments = true) {
  for (const model::Parameter& p : got) {
    const model::Parameter* w = want.Find(p.name());
    ASSERT_NE(w, nullptr) << p.name();
    EXPECT_EQ(Host(be, p.value), Host(be, w->value)) << p.name();
    if (moments) {
      EXPECT_EQ(Host(be, p.m), Host(be, w->m)) << p.name();
      EXPECT_EQ(Host(be, p.v), Host(be, w->v)) << p.name();
    }
  }
}

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (std::filesystem::temp_directory_path() /
             (std::string("motley-ckpt-") + info->test_suite_name() + "-" + info->name() + "-" +
              std::to_string(::getpid())))
                .string();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string ReadBytes(const std::string& path) {
  auto r = ReadFile(path);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : std::string();
}

// Recomputes the size and SHA-256 of every file the sidecar lists (after a deliberate edit).
inline void RehashSidecar(const std::string& dir) {
  const std::string path = dir + "/" + kSidecarFile;
  nlohmann::json sidecar = nlohmann::json::parse(ReadBytes(path));
  for (auto& [name, rec] : sidecar["files"].items()) {
    const std::string bytes = ReadBytes(dir + "/" + name);
    rec["bytes"] = bytes.size();
    rec["sha256"] = Sha256Hex(bytes);
  }
  WriteBytes(path, sidecar.dump(2));
}

// Rebuilds a safetensors file with its header JSON changed by `edit` (data bytes kept).
inline void RewriteHeader(const std::string& path,
                          const std::function<void(nlohmann::json&)>& edit) {
  const std::string bytes = ReadBytes(path);
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, len));
  edit(header);
  std::string text = header.dump();
  const uint64_t new_len = text.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &new_len, 8);
  WriteBytes(path, out + text + bytes.substr(8 + len));
}

// Layouts of the 4-block model.
inline model::StageLayout Layout(int64_t first, int64_t count, bool emb, bool head) {
  return model::StageLayout{first, count, emb, head};
}

}  // namespace motley::train::testing
