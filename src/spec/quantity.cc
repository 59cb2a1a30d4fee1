// See quantity.h.
#include "spec/quantity.h"

#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace motley::spec {
namespace {

using Prefixes = std::vector<std::pair<std::string_view, double>>;

const Prefixes& DecimalPrefixes() {
  static const Prefixes kPrefixes = {{"", 1.0},   {"k", 1e3},   {"K", 1e3},   {"M", 1e6},
                                     {"G", 1e9},  {"T", 1e12},  {"P", 1e15},  {"E", 1e18}};
  return kPrefixes;
}

const Prefixes& BinaryPrefixes() {
  static const Prefixes kPrefixes = {{"Ki", 1024.0},
                                     {"Mi", 1024.0 * 1024.0},
                                     {"Gi", 1024.0 * 1024.0 * 1024.0},
                                     {"Ti", 1024.0 * 1024.0 * 1024.0 * 1024.0},
                                     {"Pi", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0}};
  return kPrefixes;
}

// A unit is <prefix><suffix>; returns the factor to the base unit.
struct UnitFamily {
  std::vector<std::string_view> suffixes;
  const Prefixes* prefixes;
  double factor;  // of the un-prefixed unit, in base units
};

std::optional<double> MatchFamily(std::string_view unit, const UnitFamily& family) {
  for (std::string_view suffix : family.suffixes) {
    if (unit.size() < suffix.size() || unit.substr(unit.size() - suffix.size()) != suffix) {
      continue;
    }
    const std::string_view prefix = unit.substr(0, unit.size() - suffix.size());
    for (const auto& [name, scale] : *family.prefixes) {
      if (name == prefix) return scale * family.factor;
    }
  }
  return std::nullopt;
}

const std::vector<UnitFamily>& Families(QuantityKind kind) {
  static const std::vector<UnitFamily> kFlops = {
      {{"FLOPS", "FLOP/s", "flops", "flop/s"}, &DecimalPrefixes(), 1.0}};
  static const std::vector<UnitFamily> kBytes = {
      {{"B", "bytes"}, &DecimalPrefixes(), 1.0},
      {{"B"}, &BinaryPrefixes(), 1.0},
  };
  static const std::vector<UnitFamily> kBandwidth = {
      {{"B/s", "Bps"}, &DecimalPrefixes(), 1.0},
      {{"B/s"}, &BinaryPrefixes(), 1.0},
      {{"bit/s", "b/s", "bps"}, &DecimalPrefixes(), 1.0 / 8.0},
  };
  static const Prefixes kTimePrefixes = {{"", 1.0}, {"m", 1e-3}, {"u", 1e-6}, {"\u00b5", 1e-6},
                                         {"n", 1e-9}};
  static const std::vector<UnitFamily> kTime = {{{"s"}, &kTimePrefixes, 1.0}};
  switch (kind) {
    case QuantityKind::kFlopsPerSecond: return kFlops;
    case QuantityKind::kBytes: return kBytes;
    case QuantityKind::kBytesPerSecond: return kBandwidth;
    case QuantityKind::kSeconds: return kTime;
  }
  return kTime;
}

std::string_view Example(QuantityKind kind) {
  switch (kind) {
    case QuantityKind::kFlopsPerSecond: return "'312 TFLOPS'";
    case QuantityKind::kBytes: return "'80 GiB' or '512 MB'";
    case QuantityKind::kBytesPerSecond: return "'25 GB/s' or '200 Gbit/s'";
    case QuantityKind::kSeconds: return "'5 us' or '1.5 ms'";
  }
  return "";
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string_view QuantityKindName(QuantityKind kind) {
  switch (kind) {
    case QuantityKind::kFlopsPerSecond: return "a compute rate";
    case QuantityKind::kBytes: return "a byte size";
    case QuantityKind::kBytesPerSecond: return "a bandwidth";
    case QuantityKind::kSeconds: return "a duration";
  }
  return "a quantity";
}

Result<double> ParseQuantity(std::string_view text, QuantityKind kind) {
  const std::string_view trimmed = Trim(text);
  auto fail = [&]() -> Status {
    return Err("expected {} such as {}, got '{}'", QuantityKindName(kind), Example(kind), text);
  };
  if (trimmed.empty()) return fail();
  std::string_view rest = trimmed;
  if (rest.front() == '+') rest.remove_prefix(1);
  double value = 0;
  const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
  if (ec != std::errc() || !std::isfinite(value)) return fail();
  const std::string_view unit = Trim(rest.substr(static_cast<size_t>(ptr - rest.data())));
  if (unit.empty()) return value;
  for (const UnitFamily& family : Families(kind)) {
    if (auto factor = MatchFamily(unit, family)) return value * *factor;
  }
  return fail();
}

}  // namespace motley::spec
