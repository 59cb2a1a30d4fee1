// Shared-memory collective algorithms: what each rank does once every rank of a group posted its
// buffers to Transport::SharedCollective (local backend, no link emulation). Ranks read and write
// their peers' tensors directly, so data crosses memory once per rank that needs it, and the work
// is cut into chunks (kSharedChunkBytes) that the ranks take from a shared counter: every rank
// works while there is work left, and a rank whose thread is descheduled (a loaded machine) does
// not hold the others up.
// - AllReduce, per chunk: fold every rank's chunk into rank 0's, block by block (the block stays
//   in cache), then copy the block into every other rank's data; with 2 ranks one fused pass
//   writes a = b = a + b. In all, each element is read n times and written n times, the least
//   any all-reduce can do (the ring reads 3x and writes 2x on 2 ranks, plus re-reads). So when
//   tensors do not fit in cache and one core already saturates memory bandwidth (the 2-core dev
//   machine: two threads copying at once get no more bandwidth than one), 2-rank busbw is at
//   most half a one-way copy's (memcpy moves 2 bytes per byte, the all-reduce 4).
// - ReduceScatter: chunks of each rank's output, reduced from every rank's input.
// - AllGather: chunks of (destination rank, source rank) pairs, copied from input to output.
// - Broadcast: chunks of each non-root's data, copied from the root's.
// Reduction order of an element: rank 0, 1, ..., n-1, whoever does the chunk, so every rank ends
// with bit-identical results, run after run.
// Internal to comm. Thread safety: chunks are disjoint; each is written by the rank that took it.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "comm/transport.h"
#include "tensor/tensor.h"

namespace motley::comm {

// Bytes per unit of work handed out by the shared counter (a multiple of the cache line).
inline constexpr size_t kSharedChunkBytes = size_t{256} << 10;

// all[k].out: rank k's data (numel elements of dtype), reduced in place.
void SharedAllReduceWork(const std::vector<SharedBuffers>& all, std::atomic<uint64_t>& next,
                         int64_t numel, tensor::DType dtype, ReduceOp op);
// all[k].in: rank k's input (sum(counts)); all[k].out: rank k's output (counts[k]).
void SharedReduceScatterWork(const std::vector<SharedBuffers>& all, std::atomic<uint64_t>& next,
                             const std::vector<int64_t>& counts, tensor::DType dtype, ReduceOp op);
// all[k].in: rank k's input (counts[k]); all[k].out: rank k's output (sum(counts)).
void SharedAllGatherWork(const std::vector<SharedBuffers>& all, std::atomic<uint64_t>& next,
                         const std::vector<int64_t>& counts, size_t element_size);
// all[root].in: the root's data (bytes); all[k].out: rank k's data.
void SharedBroadcastWork(const std::vector<SharedBuffers>& all, std::atomic<uint64_t>& next,
                         int root, size_t bytes);

}  // namespace motley::comm
