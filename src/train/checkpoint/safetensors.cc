// See safetensors.h.
#include "train/checkpoint/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/file_util.h"
#include "train/checkpoint/sha256.h"

namespace motley::train {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swapping");

namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ULL * 1024 * 1024;  // the reference reader's limit

Status WriteAll(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      return Err(CodeForErrno(err, FileAccess::kWrite), "{}: write failed: {}", path,
                 std::strerror(err));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Parses one tensor entry's fields; errors name the tensor.
Result<SafetensorsEntry> ParseEntry(const std::string& path, const std::string& name,
                                    const json& e) {
  const std::string where = fmt::format("{}: header: tensor '{}'", path, name);
  if (!e.is_object()) return Err(StatusCode::kInvalidArgument, "{}: entry is not an object", where);
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!e.contains(field))
      return Err(StatusCode::kInvalidArgument, "{}: field '{}' is missing", where, field);
  }
  SafetensorsEntry entry;
  entry.name = name;
  if (!e["dtype"].is_string())
    return Err(StatusCode::kInvalidArgument, "{}: field 'dtype' is not a string", where);
  entry.dtype = e["dtype"].get<std::string>();
  if (SafetensorsElementBytes(entry.dtype) == 0) {
    return Err(StatusCode::kInvalidArgument,
               "{}: dtype '{}' is not supported (motley reads F32, BF16 and F16)", where,
               entry.dtype);
  }
  if (!e["shape"].is_array())
    return Err(StatusCode::kInvalidArgument, "{}: field 'shape' is not an array", where);
  // The element count must fit int64 and its bytes uint64 (issue 17: a shape of [2^32, 2^32]
  // overflowed numel(); found by fuzz/checkpoint_fuzz.cc, fuzz/regressions/checkpoint).
  int64_t numel = 1;
  for (const json& d : e["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: field 'shape' holds '{}', not a non-negative integer", where, d.dump());
    }
    entry.shape.push_back(d.get<int64_t>());
    if (__builtin_mul_overflow(numel, d.get<int64_t>(), &numel) ||
        numel > std::numeric_limits<int64_t>::max() / static_cast<int64_t>(sizeof(float))) {
      return Err("{}: field 'shape' {} holds more elements than a file can", where,
                 e["shape"].dump());
    }
  }
  const json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    return Err(StatusCode::kInvalidArgument,
               "{}: field 'data_offsets' must be two non-negative integers, got {}", where,
               off.dump());
  }
  entry.begin = off[0].get<uint64_t>();
  entry.end = off[1].get<uint64_t>();
  if (entry.end < entry.begin) {
    return Err(StatusCode::kInvalidArgument, "{}: data_offsets [{}, {}] are reversed", where,
               entry.begin, entry.end);
  }
  return entry;
}

}  // namespace

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t SafetensorsEntry::element_bytes() const {
  return SafetensorsElementBytes(dtype);
}

uint64_t SafetensorsElementBytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  return 0;
}

float Bfloat16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

float HalfToFloat(uint16_t bits) {
  // binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits -> binary32 (bias 127).
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000U) << 16;
  uint32_t exponent = (bits >> 10) & 0x1FU;
  uint32_t mantissa = bits & 0x3FFU;
  uint32_t out = 0;
  if (exponent == 0x1FU) {  // infinity or NaN (payload kept)
    out = sign | 0x7F800000U | (mantissa << 13);
  } else if (exponent != 0) {  // normal
    out = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // signed zero
    out = sign;
  } else {  // subnormal: normalise (the value is mantissa * 2^-24)
    exponent = 127 - 15 + 1;
    while ((mantissa & 0x400U) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    out = sign | (exponent << 23) | ((mantissa & 0x3FFU) << 13);
  }
  return std::bit_cast<float>(out);
}

const SafetensorsEntry* SafetensorsHeader::Find(const std::string& name) const {
  for (const SafetensorsEntry& e : tensors)
    if (e.name == name) return &e;
  return nullptr;
}

Result<WrittenFile> WriteSafetensors(const std::string& path,
                                     const std::vector<HostTensorView>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const HostTensorView& t : tensors) {
    MOTLEY_CHECK(t.name != "__metadata__" && names.insert(t.name).second,
                 "WriteSafetensors: duplicate or reserved tensor name");
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    MOTLEY_CHECK(static_cast<size_t>(numel) == t.data.size(), "WriteSafetensors: size != shape");
    const uint64_t bytes = t.data.size() * sizeof(float);
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the reference writer pads to 8-byte alignment
  unsigned char len[8];
  const uint64_t header_len = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(header_len >> (8 * i));

  // O_EXCL | O_NOFOLLOW: the writers create files only in folders they made, never over or
  // through something already there.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    return Err(CodeForErrno(err, FileAccess::kWrite), "{}: cannot create: {}", path,
               std::strerror(err));
  }
  Sha256 sha;
  auto emit = [&](const void* data, size_t size) {
    sha.Update(data, size);
    return WriteAll(fd, data, size, path);
  };
  Status status = emit(len, 8);
  if (status.ok()) status = emit(text.data(), text.size());
  for (const HostTensorView& t : tensors) {
    if (!status.ok()) break;
    status = emit(t.data.data(), t.data.size() * sizeof(float));
  }
  if (status.ok() && ::fsync(fd) != 0) {
    const int err = errno;
    status = Err(CodeForErrno(err, FileAccess::kWrite), "{}: fsync failed: {}", path,
                 std::strerror(err));
  }
  if (::close(fd) != 0 && status.ok()) {
    const int err = errno;
    status = Err(CodeForErrno(err, FileAccess::kWrite), "{}: close failed: {}", path,
                 std::strerror(err));
  }
  MOTLEY_RETURN_IF_ERROR(status);
  return WrittenFile{8 + header_len + offset, sha.HexDigest()};
}

Result<SafetensorsHeader> ParseSafetensorsHeader(const std::string& path, const std::string& prefix,
                                                 uint64_t file_size) {
  if (file_size < 8 || prefix.size() < 8) {
    return Err(StatusCode::kInvalidArgument,
               "{}: truncated: the file is {} bytes, shorter than the 8-byte header length", path,
               file_size);
  }
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) {
    header_len |= uint64_t{static_cast<unsigned char>(prefix[static_cast<size_t>(i)])} << (8 * i);
  }
  if (header_len == 0 || header_len > kMaxHeaderBytes || header_len > file_size - 8) {
    return Err(StatusCode::kInvalidArgument,
               "{}: malformed header: header length {} does not fit the file of {} bytes", path,
               header_len, file_size);
  }
  if (prefix.size() < 8 + header_len)
    return Err(StatusCode::kInvalidArgument, "{}: truncated header", path);
  json header;
  try {
    header = json::parse(prefix.begin() + 8,
                         prefix.begin() + static_cast<std::ptrdiff_t>(8 + header_len));
  } catch (const json::exception& e) {
    return Err(StatusCode::kInvalidArgument, "{}: header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object())
    return Err(StatusCode::kInvalidArgument, "{}: header is not a JSON object", path);

  SafetensorsHeader out;
  out.data_start = 8 + header_len;
  out.file_size = file_size;
  const uint64_t data_size = file_size - out.data_start;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object())
        return Err(StatusCode::kInvalidArgument, "{}: header: '__metadata__' is not an object",
                   path);
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          return Err(StatusCode::kInvalidArgument, "{}: header: __metadata__ '{}' is not a string",
                     path, mk);
        }
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    MOTLEY_ASSIGN_OR_RETURN(SafetensorsEntry entry, ParseEntry(path, key, value));
    if (entry.end > data_size) {
      return Err(
          "{}: tensor '{}': data_offsets [{}, {}] run past the {} data bytes (short data: the "
          "file is truncated)",
          path, key, entry.begin, entry.end, data_size);
    }
    const uint64_t want = static_cast<uint64_t>(entry.numel()) * entry.element_bytes();
    if (entry.end - entry.begin != want) {
      return Err(
          "{}: tensor '{}': data_offsets [{}, {}] hold {} bytes but shape [{}] of {} needs {}",
          path, key, entry.begin, entry.end, entry.end - entry.begin, fmt::join(entry.shape, ", "),
          entry.dtype, want);
    }
    out.tensors.push_back(std::move(entry));
  }
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t covered = 0;
  for (size_t i = 0; i < out.tensors.size(); ++i) {
    const SafetensorsEntry& e = out.tensors[i];
    if (i > 0 && e.begin < covered) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: tensors '{}' and '{}' overlap (bytes [{}, {}) and [{}, {}))", path,
                 out.tensors[i - 1].name, e.name, out.tensors[i - 1].begin, covered, e.begin,
                 e.end);
    }
    if (e.begin > covered) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: hole in the data: bytes [{}, {}) before tensor '{}' belong to no tensor",
                 path, covered, e.begin, e.name);
    }
    covered = e.end;
  }
  if (covered != data_size) {
    return Err(StatusCode::kInvalidArgument,
               "{}: {} trailing data bytes after the last tensor belong to no tensor", path,
               data_size - covered);
  }
  return out;
}

Result<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Err(StatusCode::kNotFound, "{}: cannot open: {}", path, std::strerror(errno));
  const auto size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  std::string prefix(std::min<uint64_t>(size, 8), '\0');
  in.read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  if (size >= 8) {
    uint64_t header_len = 0;
    for (int i = 0; i < 8; ++i) {
      header_len |= uint64_t{static_cast<unsigned char>(prefix[static_cast<size_t>(i)])} << (8 * i);
    }
    if (header_len > 0 && header_len <= kMaxHeaderBytes && header_len <= size - 8) {
      prefix.resize(8 + header_len);
      in.read(prefix.data() + 8, static_cast<std::streamsize>(header_len));
    }
  }
  if (!in) return Err(StatusCode::kInvalidArgument, "{}: read error", path);
  return ParseSafetensorsHeader(path, prefix, size);
}

Status ReadSafetensorsTensor(const std::string& path, const SafetensorsHeader& header,
                             const SafetensorsEntry& entry, std::span<float> out) {
  MOTLEY_CHECK(out.size() == static_cast<size_t>(entry.numel()), "ReadSafetensorsTensor: size");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Err(StatusCode::kNotFound, "{}: cannot open: {}", path, std::strerror(errno));
  in.seekg(static_cast<std::streamoff>(header.data_start + entry.begin));
  auto read = [&](void* dst, size_t bytes) -> Status {
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
    if (!in || static_cast<size_t>(in.gcount()) != bytes) {
      return Err(StatusCode::kInvalidArgument,
                 "{}: tensor '{}': short read (the file changed or is truncated)", path,
                 entry.name);
    }
    return Status::Ok();
  };
  if (entry.dtype == "F32") return read(out.data(), out.size_bytes());
  // BF16 / F16: read in chunks of 16-bit values, convert each.
  const bool bf16 = entry.dtype == "BF16";
  MOTLEY_CHECK(bf16 || entry.dtype == "F16", "ReadSafetensorsTensor: unchecked dtype");
  constexpr size_t kChunk = size_t{1} << 16;
  std::vector<uint16_t> half(std::min(kChunk, out.size()));
  for (size_t done = 0; done < out.size();) {
    const size_t n = std::min(half.size(), out.size() - done);
    MOTLEY_RETURN_IF_ERROR(read(half.data(), n * sizeof(uint16_t)));
    for (size_t i = 0; i < n; ++i) {
      out[done + i] = bf16 ? Bfloat16ToFloat(half[i]) : HalfToFloat(half[i]);
    }
    done += n;
  }
  return Status::Ok();
}

}  // namespace motley::train
