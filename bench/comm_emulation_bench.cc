// motley_comm_emulation_bench: link emulation on the WALL clock against the alpha-beta time of the
// ring algorithm (the project's reference notes, performance-model.md), per operation, rank count
// and size, with a uniform ring and with one slower link. The virtual clock is exact and tested
// (tests/comm/link_emulation_test.cc); this measures how closely real sleeping ranks follow it.
//
// Each case starts a fresh local world whose ranks share one steady-clock origin; a rank's wall
// time is steady-clock seconds from the origin until its collective returns; the case's time is
// the largest over ranks, reported as the best of `--repeats` runs. Links are slow enough
// (1 GB/s, 100 us) that the pacing, not the host's copies, sets the time, as in an emulated run.
//
// Usage: motley_comm_emulation_bench [--repeats R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/link_model.h"
#include "comm/local_world.h"
#include "core/clock.h"
#include "tensor/tensor.h"

namespace motley::comm {
namespace {

enum class Op { kAllReduce, kReduceScatter, kAllGather };
const char* OpName(Op op) {
  return op == Op::kAllReduce       ? "all-reduce"
         : op == Op::kReduceScatter ? "reduce-scatter"
                                    : "all-gather";
}

double Formula(Op op, const std::vector<LinkModel>& ring, double bytes) {
  switch (op) {
    case Op::kAllReduce: return RingAllReduceTime(ring, bytes);
    case Op::kReduceScatter: return RingReduceScatterTime(ring, bytes);
    case Op::kAllGather: return RingAllGatherTime(ring, bytes);
  }
  return 0.0;
}

// Wall seconds of one `op` of `bytes` on `n` ranks over `links`, or a negative value on error.
double RunOnce(Op op, int n, int64_t numel, const LinkMatrix& links) {
  auto world = LocalWorld::Create(n);
  const auto origin = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
  std::vector<VirtualClock> clocks;
  for (int r = 0; r < n; ++r) clocks.emplace_back(VirtualClock::Mode::kWall, origin);
  const auto counts = EvenCounts(numel, n);
  std::vector<double> wall(static_cast<size_t>(n), -1.0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Emulation emu;
      emu.links = &links;
      emu.clock = &clocks[static_cast<size_t>(r)];
      auto comm = world->Connect(r, CommOptions{}, emu);
      if (!comm.ok()) return;
      tensor::Tensor full = tensor::HostTensor(tensor::Shape{numel}, tensor::DType::kF32);
      tensor::Tensor part = tensor::HostTensor(
          tensor::Shape{counts[static_cast<size_t>(r)]}, tensor::DType::kF32);
      std::this_thread::sleep_until(origin);
      Status s;
      switch (op) {
        case Op::kAllReduce: s = (*comm)->AllReduce(full, ReduceOp::kSum); break;
        case Op::kReduceScatter: s = (*comm)->ReduceScatter(part, full, counts, ReduceOp::kSum); break;
        case Op::kAllGather: s = (*comm)->AllGather(full, part, counts); break;
      }
      if (!s.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, s.message().c_str());
        return;
      }
      wall[static_cast<size_t>(r)] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - origin).count();
    });
  }
  for (auto& t : threads) t.join();
  double worst = 0.0;
  for (double w : wall) {
    if (w < 0.0) return -1.0;
    worst = std::max(worst, w);
  }
  return worst;
}

}  // namespace
}  // namespace motley::comm

int main(int argc, char** argv) {
  using namespace motley::comm;  // NOLINT(google-build-using-namespace): a benchmark's main
  int repeats = 3;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: motley_comm_emulation_bench [--repeats R]\n");
      return 2;
    }
  }
  const LinkModel fast{100e-6, 1e9};
  const LinkModel slow{100e-6, 0.5e9};
  std::printf("%-15s %2s %5s %-9s %10s %10s %8s\n", "op", "n", "MB", "links", "wall_s", "formula_s",
              "rel_err");
  double worst_err = 0.0;
  for (Op op : {Op::kAllReduce, Op::kReduceScatter, Op::kAllGather}) {
    for (int n : {2, 4}) {
      for (double mb : {1.0, 4.0, 16.0}) {
        for (bool one_slow : {false, true}) {
          LinkMatrix links(n, fast);
          if (one_slow) links.Set(1 % n, 2 % n, slow);
          const auto numel = static_cast<int64_t>(mb * 1e6 / 4.0) / n * n;
          const double bytes = static_cast<double>(numel) * 4.0;
          std::vector<LinkModel> ring;
          for (int r = 0; r < n; ++r) ring.push_back(links.link(r, (r + 1) % n));
          const double want = Formula(op, ring, bytes);
          double best = -1.0;
          for (int k = 0; k < repeats; ++k) {
            const double t = RunOnce(op, n, numel, links);
            if (t < 0.0) return 1;
            best = best < 0.0 ? t : std::min(best, t);
          }
          const double err = (best - want) / want;
          worst_err = std::max(worst_err, std::abs(err));
          std::printf("%-15s %2d %5.0f %-9s %10.5f %10.5f %+7.2f%%\n", OpName(op), n, mb,
                      one_slow ? "one-slow" : "uniform", best, want, 100.0 * err);
        }
      }
    }
  }
  std::printf("largest |relative error|: %.2f%%\n", 100.0 * worst_err);
  return 0;
}
