// Helpers for multi-rank tests on the local backend: run one body per rank thread, and the
// deterministic inputs / single-rank references the collective tests compare against.
#pragma once

#include <functional>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/link_model.h"
#include "comm/local_world.h"
#include "core/clock.h"
#include "tensor/tensor.h"

namespace motley::comm::testing {

struct RunOptions {
  CommOptions comm;
  const LinkMatrix* links = nullptr;
  std::vector<VirtualClock>* clocks = nullptr;  // one per rank when links is set
  double payload_scale = 1.0;
  const std::atomic<int64_t>* step = nullptr;  // every rank's step counter (link rate schedules)
  LocalWorldOptions world;
};

// Runs body(comm) on n threads of a fresh LocalWorld; returns each rank's Status.
inline std::vector<Status> RunLocal(int n, const std::function<Status(Communicator&)>& body,
                                    const RunOptions& options = {}) {
  auto world = LocalWorld::Create(n, options.world);
  std::vector<Status> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Emulation emu;
      if (options.links != nullptr) {
        emu.links = options.links;
        emu.clock = &(*options.clocks)[static_cast<size_t>(r)];
        emu.payload_scale = options.payload_scale;
        emu.step = options.step;
      }
      auto comm = world->Connect(r, options.comm, emu);
      if (!comm.ok()) {
        results[static_cast<size_t>(r)] = comm.status();
        return;
      }
      results[static_cast<size_t>(r)] = body(**comm);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// Small integers, so that sums in f32 are exact in any order.
inline float InputValue(int rank, int64_t i) {
  return static_cast<float>((rank * 131 + i * 7) % 97) - 48.0F;
}

inline tensor::Tensor RankInput(int rank, int64_t n) {
  tensor::Tensor t = tensor::HostTensor(tensor::Shape{n}, tensor::DType::kF32);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = InputValue(rank, i);
  return t;
}

// Reference of element i reduced over ranks [0, n).
inline float Reference(int n, int64_t i, ReduceOp op) {
  float acc = InputValue(0, i);
  for (int r = 1; r < n; ++r) {
    acc = op == ReduceOp::kSum ? acc + InputValue(r, i) : std::max(acc, InputValue(r, i));
  }
  return acc;
}

}  // namespace motley::comm::testing
