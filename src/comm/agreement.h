// Checks that every rank of a group called the same collective with the same arguments, over a
// host communicator, for backends whose native library cannot detect a mismatch itself (nccl: a
// mismatch there hangs or corrupts memory). Internal to comm. Thread safety: as the host
// communicator (its rank's thread).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "comm/transport.h"
#include "core/status.h"
#include "tensor/tensor.h"

namespace motley::comm {

// FNV-1a hash of an operation's arguments (counts, root, dtype, reduce op).
uint64_t HashArgs(const std::vector<int64_t>& words);

// Collective over `host`: all-gathers (kind, count, meta) and fails on every rank, naming the
// first rank that differs, when any rank passed other values. `group` names the group in errors.
Status AgreeOnCall(Communicator& host, const std::string& group, const char* op, OpKind kind,
                   int64_t count, uint64_t meta);

// The checks of ReduceScatter (full = in, part = out) and AllGather (full = out, part = in)
// arguments on one rank: counts has one entry >= 0 per rank, summing to full, and part matches.
Status CheckGatherCounts(const std::string& group, const char* op, int rank, int size,
                         const std::vector<int64_t>& counts, const tensor::Tensor& full,
                         const tensor::Tensor& part);

}  // namespace motley::comm
