// motley_comm_bench: algbw and busbw per operation, size and backend, printed as nccl-tests does
// (busbw = algbw * 2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter and all-gather, 1 for
// broadcast and p2p), plus the point-to-point bandwidth of the same transport measured in the same
// run and the all-reduce busbw / p2p ratio per size.
//
// Noise: the dev machine is shared, so each operation is timed `repeats` times (each the mean of
// `iters` calls) with the operations interleaved, and the best (lowest) time is reported, so that
// p2p and all-reduce are compared under the same load. The load average is printed at the start
// and end.
//
// Usage: motley_comm_bench [--ranks N] [--min_mb A] [--max_mb B] [--iters K] [--repeats R]
//                          [--deadline_floor_s S]                               (local, threads)
//        mpiexec -n 2 motley_comm_bench --mpi [...]                           (mpi, when built)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/local_world.h"
#ifdef MOTLEY_HAVE_MPI
#include "comm/mpi_world.h"
#endif

namespace motley::comm {
namespace {

using tensor::DType;
using tensor::HostTensor;
using tensor::Shape;
using tensor::Tensor;

struct Flags {
  int ranks = 2;
  double min_mb = 4;
  double max_mb = 256;
  int iters = 5;
  int repeats = 5;
  bool mpi = false;
  double deadline_floor_s = 60;  // slow shaped links (scripts/netns) need more than the default
};

std::string LoadAverage() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return "?";
  char buf[128] = {0};
  const bool ok = std::fgets(buf, sizeof(buf), f) != nullptr;
  std::fclose(f);
  std::string s = ok ? buf : "?";
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds per call of `op` on this rank (after a warm-up call), all ranks aligned by a barrier.
template <typename F>
double TimeOp(Communicator& c, int iters, F&& op) {
  Status s = op();
  if (s.ok()) s = c.Barrier();
  const double start = Now();
  for (int i = 0; i < iters && s.ok(); ++i) s = op();
  if (s.ok()) s = c.Barrier();
  MOTLEY_CHECK(s.ok(), s.message());
  return (Now() - start) / iters;
}

void Body(Communicator& c, const Flags& f, const char* backend) {
  const int n = c.size();
  const double nd = static_cast<double>(n);
  std::map<double, double> p2p_gbps, ar_busbw;
  if (c.rank() == 0) {
    std::printf("# backend %s, %d ranks, f32, best of %d repeats of %d iterations per size\n",
                backend, n, f.repeats, f.iters);
    std::printf("# load average at start: %s\n", LoadAverage().c_str());
    std::printf("%-15s %10s %12s %10s %10s %10s\n", "op", "size_MB", "count", "time_us",
                "algbw_GB/s", "busbw_GB/s");
  }
  for (double mb = f.min_mb; mb <= f.max_mb; mb *= 4) {
    const int64_t count = static_cast<int64_t>(mb * 1024 * 1024 / 4) / n * n;
    const double bytes = static_cast<double>(count) * 4.0;
    Tensor full = HostTensor(Shape{count}, DType::kF32);
    Tensor part = HostTensor(Shape{count / n}, DType::kF32);
    std::memset(full.raw(), 0, full.bytes());
    std::memset(part.raw(), 0, part.bytes());
    const auto counts = EvenCounts(count, n);
    struct Op {
      const char* name;
      double factor;  // busbw / algbw
      std::function<Status()> run;
      double best = 1e30;
    };
    std::vector<Op> ops = {
        // p2p: rank 0 sends the whole buffer to rank 1 (one direction), the same transport.
        {"p2p(0->1)", 1.0,
         [&] {
           if (c.rank() == 0) return c.Send(full, 1, 0);
           if (c.rank() == 1) return c.Recv(full, 0, 0);
           return Status::Ok();
         }},
        {"all_reduce", 2.0 * (nd - 1) / nd, [&] { return c.AllReduce(full, ReduceOp::kSum); }},
        {"reduce_scatter", (nd - 1) / nd,
         [&] { return c.ReduceScatter(part, full, counts, ReduceOp::kSum); }},
        {"all_gather", (nd - 1) / nd, [&] { return c.AllGather(full, part, counts); }},
        {"broadcast", 1.0, [&] { return c.Broadcast(full, 0); }},
    };
    for (int rep = 0; rep < f.repeats; ++rep) {
      for (Op& op : ops) op.best = std::min(op.best, TimeOp(c, f.iters, op.run));
    }
    for (const Op& op : ops) {
      const double algbw = bytes / op.best / 1e9;
      if (c.rank() == 0) {
        std::printf("%-15s %10.0f %12ld %10.0f %10.2f %10.2f\n", op.name, mb,
                    static_cast<long>(count), op.best * 1e6, algbw, algbw * op.factor);
      }
    }
    p2p_gbps[mb] = bytes / ops[0].best / 1e9;
    ar_busbw[mb] = bytes / ops[1].best / 1e9 * ops[1].factor;
  }
  if (c.rank() == 0) {
    std::printf("\n%-10s %14s %14s %8s\n", "size_MB", "ar_busbw_GB/s", "p2p_GB/s", "ratio");
    for (const auto& [mb, bw] : ar_busbw) {
      std::printf("%-10.0f %14.2f %14.2f %8.2f\n", mb, bw, p2p_gbps[mb], bw / p2p_gbps[mb]);
    }
    std::printf("# load average at end: %s\n", LoadAverage().c_str());
  }
}

}  // namespace
}  // namespace motley::comm

int main(int argc, char** argv) {
  motley::comm::Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::stod(argv[++i]) : 0.0; };
    if (a == "--ranks") f.ranks = static_cast<int>(next());
    else if (a == "--min_mb") f.min_mb = next();
    else if (a == "--max_mb") f.max_mb = next();
    else if (a == "--iters") f.iters = static_cast<int>(next());
    else if (a == "--repeats") f.repeats = static_cast<int>(next());
    else if (a == "--mpi") f.mpi = true;
    else if (a == "--deadline_floor_s") f.deadline_floor_s = next();
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (f.mpi) {
#ifdef MOTLEY_HAVE_MPI
    motley::comm::CommOptions options;
    options.deadline_floor_s = f.deadline_floor_s;
    auto world = motley::comm::MpiWorld::Connect(&argc, &argv, options);
    if (!world.ok()) {
      std::fprintf(stderr, "%s\n", world.status().message().c_str());
      return 1;
    }
    motley::comm::Body(**world, f, "mpi");
    world->reset();
    motley::comm::MpiWorld::Finalize();
    return 0;
#else
    std::fprintf(stderr, "built without MPI\n");
    return 1;
#endif
  }
  if (f.ranks < 2) {
    std::fprintf(stderr, "--ranks must be >= 2\n");
    return 2;
  }
  auto world = motley::comm::LocalWorld::Create(f.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < f.ranks; ++r) {
    threads.emplace_back([&, r] {
      motley::comm::CommOptions options;
      options.deadline_floor_s = f.deadline_floor_s;
      auto c = world->Connect(r, options);
      MOTLEY_CHECK(c.ok(), c.status().message());
      motley::comm::Body(**c, f, "local");
    });
  }
  for (auto& t : threads) t.join();
  return 0;
}
