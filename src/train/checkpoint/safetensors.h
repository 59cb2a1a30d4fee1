// A small, strict reader and writer of the safetensors format (github.com/huggingface/safetensors,
// docs/formats/checkpoint.md): an 8-byte little-endian header length H, H bytes of JSON
//   {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>"}}
// (padded with spaces to a multiple of 8), then the raw little-endian data; offsets are relative
// to the first byte after the header. motley writes F32 (its parameters and moments are fp32) and
// reads F32, BF16 and F16, converting the 16-bit types to fp32 exactly (every BF16 and F16 value
// is a float; F16 subnormals, infinities and NaN included).
//
// The reader rejects, with an error naming the file and the tensor: a file shorter than 8 bytes,
// a header length past the end of the file, a header that is not JSON or not an object, an entry
// with a missing or mistyped field, an unsupported dtype, a negative dimension, offsets that are
// reversed or run past the data (a truncated file), a byte range that does not match the shape,
// overlapping tensors, and holes or trailing bytes in the data (the reference format forbids
// them). Thread safety: pure functions over files; no shared state.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace motley::train {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16" or "F16"
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the data start
  uint64_t end = 0;
  int64_t numel() const;
  uint64_t element_bytes() const;  // 4 for F32, 2 for BF16 and F16
};

// The element size of a dtype motley reads ("F32": 4, "BF16" and "F16": 2); 0 for any other.
uint64_t SafetensorsElementBytes(const std::string& dtype);
// Exact conversions of one 16-bit value (IEEE 754 binary16; bfloat16, the top half of a float).
float HalfToFloat(uint16_t bits);
float Bfloat16ToFloat(uint16_t bits);

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // sorted by begin
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length
  uint64_t file_size = 0;
  const SafetensorsEntry* Find(const std::string& name) const;  // nullptr when absent
};

// One host tensor to write: `data` holds numel(shape) floats and must outlive the call.
struct HostTensorView {
  std::string name;
  std::vector<int64_t> shape;
  std::span<const float> data;
};

// What a write produced: the file's size and SHA-256 (computed while writing).
struct WrittenFile {
  uint64_t bytes = 0;
  std::string sha256;
};

// Creates `path` (which must not exist: O_EXCL), writes, fsyncs and closes it; write errors carry
// CodeForErrno's write code (a full disk is kResourceExhausted). Names must be unique and may not
// be "__metadata__" (checked: bugs).
Result<WrittenFile> WriteSafetensors(const std::string& path,
                                     const std::vector<HostTensorView>& tensors,
                                     const std::map<std::string, std::string>& metadata);

// Reads and validates the header of `path` (see the list above).
Result<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path);
// Parses a header from the first bytes of a file of `file_size` bytes (`prefix` must hold at least
// the 8 + H header bytes when the file has them); `path` names the file in errors.
Result<SafetensorsHeader> ParseSafetensorsHeader(const std::string& path, const std::string& prefix,
                                                 uint64_t file_size);

// Reads one tensor's data into `out` (entry.numel() floats), converted to fp32.
Status ReadSafetensorsTensor(const std::string& path, const SafetensorsHeader& header,
                             const SafetensorsEntry& entry, std::span<float> out);

}  // namespace motley::train
