// See agreement.h.
#include "comm/agreement.h"

#include <array>
#include <cstring>

#include <fmt/core.h>

namespace motley::comm {

uint64_t HashArgs(const std::vector<int64_t>& words) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a offset basis
  for (int64_t w : words) {
    for (int i = 0; i < 8; ++i) {
      h ^= (static_cast<uint64_t>(w) >> (8 * i)) & 0xFFU;
      h *= 1099511628211ULL;  // FNV-1a prime
    }
  }
  return h;
}

Status AgreeOnCall(Communicator& host, const std::string& group, const char* op, OpKind kind,
                   int64_t count, uint64_t meta) {
  const int n = host.size();
  const std::array<int32_t, 4> words = {
      static_cast<int32_t>(kind), static_cast<int32_t>(count & 0x7FFFFFFF),
      static_cast<int32_t>(count >> 31), static_cast<int32_t>(meta & 0x7FFFFFFF)};
  tensor::Tensor mine = tensor::HostTensor(tensor::Shape{4}, tensor::DType::kI32);
  std::memcpy(mine.data<int32_t>(), words.data(), sizeof(words));
  tensor::Tensor all = tensor::HostTensor(tensor::Shape{4 * int64_t{n}}, tensor::DType::kI32);
  const std::string where = fmt::format("{} on group '{}'", op, group);
  MOTLEY_RETURN_IF_ERROR(host.AllGather(all, mine, std::vector<int64_t>(static_cast<size_t>(n), 4))
                             .WithContext(where + " (argument check over the host)"));
  const int32_t* w = all.data<int32_t>();
  for (int r = 0; r < n; ++r) {
    const int32_t* theirs = w + size_t{4} * static_cast<size_t>(r);
    if (theirs[0] != words[0]) {
      return Err("{}: operation mismatch: rank {} called {} while this rank called {}", where, r,
                 OpKindName(static_cast<uint32_t>(theirs[0])), op);
    }
    if (theirs[1] != words[1] || theirs[2] != words[2]) {
      const int64_t other = (int64_t{theirs[2]} << 31) | int64_t{theirs[1]};
      return Err("{}: size mismatch in {}: rank {} passed {} elements, this rank {}", where, op, r,
                 other, count);
    }
    if (theirs[3] != words[3]) {
      return Err(
          "{}: argument mismatch in {}: rank {} passed other counts, root, dtype or reduce "
          "op than this rank",
          where, op, r);
    }
  }
  return Status::Ok();
}

Status CheckGatherCounts(const std::string& group, const char* op, int rank, int size,
                         const std::vector<int64_t>& counts, const tensor::Tensor& full,
                         const tensor::Tensor& part) {
  if (static_cast<int>(counts.size()) != size) {
    return Err("{} on group '{}': counts has {} entries, the group has {} ranks", op, group,
               counts.size(), size);
  }
  int64_t sum = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) {
      return Err("{} on group '{}': counts[{}] = {} < 0", op, group, i, counts[i]);
    }
    sum += counts[i];
  }
  if (sum != full.numel()) {
    return Err("{} on group '{}': sum(counts) = {} but the full tensor has {} elements", op, group,
               sum, full.numel());
  }
  if (part.numel() != counts[static_cast<size_t>(rank)]) {
    return Err("{} on group '{}': counts[{}] = {} but this rank's part has {} elements", op, group,
               rank, counts[static_cast<size_t>(rank)], part.numel());
  }
  return Status::Ok();
}

}  // namespace motley::comm
