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
      return Err("{}: write failed: {}", path, std::strerror(errno));
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
  if (!e.is_object()) return Err("{}: entry is not an object", where);
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!e.contains(field)) return Err("{}: field '{}' is missing", where, field);
  }
  SafetensorsEntry entry;
  entry.name = name;
  if (!e["dtype"].is_string()) return Err("{}: field 'dtype' is not a string", where);
  entry.dtype = e["dtype"].get<std::string>();
  if (entry.dtype != "F32") {
    return Err("{}: dtype '{}' is not supported (motley reads F32 only)", where, entry.dtype);
  }
  if (!e["shape"].is_array()) return Err("{}: field 'shape' is not an array", where);
  // The element count must fit int64 and its bytes uint64 (issue 17: a shape of [2^32, 2^32]
  // overflowed numel(); found by fuzz/checkpoint_fuzz.cc, fuzz/regressions/checkpoint).
  int64_t numel = 1;
  for (const json& d : e["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return Err("{}: field 'shape' holds '{}', not a non-negative integer", where, d.dump());
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
    return Err("{}: field 'data_offsets' must be two non-negative integers, got {}", where,
               off.dump());
  }
  entry.begin = off[0].get<uint64_t>();
  entry.end = off[1].get<uint64_t>();
  if (entry.end < entry.begin) {
    return Err("{}: data_offsets [{}, {}] are reversed", where, entry.begin, entry.end);
  }
  return entry;
}

}  // namespace

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
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

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Err("{}: cannot create: {}", path, std::strerror(errno));
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
  if (status.ok() && ::fsync(fd) != 0)
    status = Err("{}: fsync failed: {}", path, std::strerror(errno));
  if (::close(fd) != 0 && status.ok())
    status = Err("{}: close failed: {}", path, std::strerror(errno));
  MOTLEY_RETURN_IF_ERROR(status);
  return WrittenFile{8 + header_len + offset, sha.HexDigest()};
}

Result<SafetensorsHeader> ParseSafetensorsHeader(const std::string& path, const std::string& prefix,
                                                 uint64_t file_size) {
  if (file_size < 8 || prefix.size() < 8) {
    return Err("{}: truncated: the file is {} bytes, shorter than the 8-byte header length", path,
               file_size);
  }
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) {
    header_len |= uint64_t{static_cast<unsigned char>(prefix[static_cast<size_t>(i)])} << (8 * i);
  }
  if (header_len == 0 || header_len > kMaxHeaderBytes || header_len > file_size - 8) {
    return Err("{}: malformed header: header length {} does not fit the file of {} bytes", path,
               header_len, file_size);
  }
  if (prefix.size() < 8 + header_len) return Err("{}: truncated header", path);
  json header;
  try {
    header = json::parse(prefix.begin() + 8,
                         prefix.begin() + static_cast<std::ptrdiff_t>(8 + header_len));
  } catch (const json::exception& e) {
    return Err("{}: header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object()) return Err("{}: header is not a JSON object", path);

  SafetensorsHeader out;
  out.data_start = 8 + header_len;
  out.file_size = file_size;
  const uint64_t data_size = file_size - out.data_start;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return Err("{}: header: '__metadata__' is not an object", path);
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          return Err("{}: header: __metadata__ '{}' is not a string", path, mk);
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
    const uint64_t want = static_cast<uint64_t>(entry.numel()) * sizeof(float);
    if (entry.end - entry.begin != want) {
      return Err(
          "{}: tensor '{}': data_offsets [{}, {}] hold {} bytes but shape [{}] of F32 needs {}",
          path, key, entry.begin, entry.end, entry.end - entry.begin, fmt::join(entry.shape, ", "),
          want);
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
      return Err("{}: tensors '{}' and '{}' overlap (bytes [{}, {}) and [{}, {}))", path,
                 out.tensors[i - 1].name, e.name, out.tensors[i - 1].begin, covered, e.begin,
                 e.end);
    }
    if (e.begin > covered) {
      return Err("{}: hole in the data: bytes [{}, {}) before tensor '{}' belong to no tensor",
                 path, covered, e.begin, e.name);
    }
    covered = e.end;
  }
  if (covered != data_size) {
    return Err("{}: {} trailing data bytes after the last tensor belong to no tensor", path,
               data_size - covered);
  }
  return out;
}

Result<SafetensorsHeader> ReadSafetensorsHeader(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Err("{}: cannot open: {}", path, std::strerror(errno));
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
  if (!in) return Err("{}: read error", path);
  return ParseSafetensorsHeader(path, prefix, size);
}

Status ReadSafetensorsTensor(const std::string& path, const SafetensorsHeader& header,
                             const SafetensorsEntry& entry, std::span<float> out) {
  MOTLEY_CHECK(out.size() == static_cast<size_t>(entry.numel()), "ReadSafetensorsTensor: size");
  std::ifstream in(path, std::ios::binary);
  if (!in) return Err("{}: cannot open: {}", path, std::strerror(errno));
  in.seekg(static_cast<std::streamoff>(header.data_start + entry.begin));
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size_bytes()));
  if (!in || static_cast<size_t>(in.gcount()) != out.size_bytes()) {
    return Err("{}: tensor '{}': short read (the file changed or is truncated)", path, entry.name);
  }
  return Status::Ok();
}

}  // namespace motley::train
