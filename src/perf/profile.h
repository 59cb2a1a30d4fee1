// Profile: measured per-block forward and backward times of one model on one or more device types,
// for a grid of (TP degree, micro-batch size, sequence length), as JSON ("format": "motley-profile",
// "version": 1; docs/formats/profile.md). Written by `motley profile`, read by the predictor.
// Plain value types; the functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "spec/model_spec.h"

namespace motley::perf {

struct ProfileEntry {
  int tp = 1;
  int64_t micro_batch_size = 1;
  int64_t seq_len = 1;
  Seconds block_forward_s = 0;
  Seconds block_backward_s = 0;
  Seconds embedding_forward_s = 0;
  Seconds embedding_backward_s = 0;
  Seconds head_forward_s = 0;
  Seconds head_backward_s = 0;
};

struct DeviceProfile {
  std::string device_type;  // a DeviceType name of the cluster
  std::vector<ProfileEntry> entries;
  // Per-step work per parameter a device holds: zeroing the gradients, the gradient-norm pass and
  // the AdamW update, seconds per parameter (0: not measured; the fallback's memory-bound model).
  Seconds step_s_per_param = 0;
};

struct Profile {
  // The model shape the times belong to; the predictor refuses a profile of another shape.
  int64_t hidden = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t ffn_hidden = 0;
  int64_t vocab_size = 0;
  std::string precision = "fp32";  // "fp32" | "bf16"
  std::string comment;
  std::vector<DeviceProfile> devices;
  std::string source;  // file it was read from; not serialized
};

Result<Profile> ParseProfile(std::string_view json_text, std::string_view name);
Result<Profile> LoadProfile(const std::string& path);
std::string ProfileToJson(const Profile& profile);
Status SaveProfile(const Profile& profile, const std::string& path);
// Errors when the profile was measured on another model shape (names the differing field).
Status CheckProfileMatchesModel(const Profile& profile, const spec::ModelSpec& model);

}  // namespace motley::perf
