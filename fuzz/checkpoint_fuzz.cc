// Fuzz target: the checkpoint readers (docs/formats/checkpoint.md) as they are: the safetensors
// header parser on its own, and CheckpointReader::Open over a checkpoint folder made of the input.
// The input is three parts separated by the line "#--": the sidecar checkpoint.json, the index
// model.safetensors.index.json and the bytes of model-00001-of-00001.safetensors. When the sidecar
// is a JSON object with a "files" object, the harness writes the true size and SHA-256 of the
// files it lists that exist into it (a fuzzer cannot forge a SHA-256), so that the index and the
// safetensors header behind the checks are reached; the mismatch paths are unit-tested
// (src/train/checkpoint/corruption_test.cc). On success every tensor is read back.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/safetensors.h"
#include "train/checkpoint/sha256.h"

namespace {

constexpr std::string_view kSeparator = "\n#--\n";
constexpr const char* kModelFile = "model-00001-of-00001.safetensors";

// Splits off the part before the next separator (the whole rest when there is none).
std::string_view NextPart(std::string_view* rest) {
  const size_t at = rest->find(kSeparator);
  std::string_view part = rest->substr(0, at);
  *rest = at == std::string_view::npos ? std::string_view() : rest->substr(at + kSeparator.size());
  return part;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace motley;
  using nlohmann::json;
  std::string_view rest = fuzz::AsText(data, size);
  const std::string_view sidecar = NextPart(&rest);
  const std::string_view index = NextPart(&rest);
  const std::string_view tensors = rest;

  // The header parser on its own (in memory).
  (void)train::ParseSafetensorsHeader("fuzz.safetensors", std::string(tensors), tensors.size());

  // A checkpoint folder holding the three files.
  const std::string dir = fuzz::ScratchDir() + "/step-00000001";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string model_path = dir + "/" + kModelFile;
  const std::string index_path = dir + "/" + train::kModelIndexFile;
  fuzz::WriteBytes(model_path, tensors);
  fuzz::WriteBytes(index_path, index);
  std::string sidecar_text(sidecar);
  json j = json::parse(sidecar, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("files") && j["files"].is_object()) {
    for (auto& [name, record] : j["files"].items()) {
      const std::string path = dir + "/" + name;
      if (!record.is_object() || (name != kModelFile && name != train::kModelIndexFile)) continue;
      Result<std::string> sha = train::Sha256OfFile(path);
      if (!sha.ok()) continue;
      record["bytes"] = std::filesystem::file_size(path, ec);
      record["sha256"] = *sha;
    }
    sidecar_text = j.dump();
  }
  fuzz::WriteBytes(dir + "/" + train::kSidecarFile, sidecar_text);
  Result<train::CheckpointReader> reader = train::CheckpointReader::Open(dir);
  if (!reader.ok()) return 0;
  for (const std::string& name : reader->TensorNames()) (void)reader->ReadTensor(name);
  return 0;
}
