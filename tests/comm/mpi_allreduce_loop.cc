// Driver of the kill-a-rank test (kill_rank_test.sh): every rank writes its pid to
// DIR/rank<R>.pid, then all-reduces a 1 MiB tensor in a loop, checking each result, until a call
// fails (a peer was killed) or --max_iters calls succeeded. On failure it prints the error, which
// names the operation, the group and the lost or silent rank, and exits 1; mpiexec then reports
// the killed rank itself.
//
// Usage: mpiexec -n N motley_comm_mpi_allreduce_loop DIR [--max_iters K]
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include "comm/mpi_world.h"

int main(int argc, char** argv) {
  motley::comm::CommOptions options;
  options.silence_timeout_s = 2.0;  // a killed peer stops beating: report it soon
  auto world = motley::comm::MpiWorld::Connect(&argc, &argv, options);
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().message().c_str());
    return 1;
  }
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [--max_iters K]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  long max_iters = 1000000;
  if (argc >= 4 && std::string(argv[2]) == "--max_iters") max_iters = std::atol(argv[3]);
  motley::comm::Communicator& c = **world;
  const std::string path = dir + "/rank" + std::to_string(c.rank()) + ".pid";
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr || std::fprintf(f, "%d\n", static_cast<int>(getpid())) < 0 ||
      std::fclose(f) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "rank %d: cannot write %s\n", c.rank(), path.c_str());
    return 1;
  }
  const int64_t n = int64_t{1} << 18;  // 1 MiB of f32
  motley::tensor::Tensor t =
      motley::tensor::HostTensor(motley::tensor::Shape{n}, motley::tensor::DType::kF32);
  for (long it = 0; it < max_iters; ++it) {
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = 1.0F;
    motley::Status s = c.AllReduce(t, motley::comm::ReduceOp::kSum);
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: all-reduce %ld failed: %s\n", c.rank(), it,
                   s.message().c_str());
      std::fflush(stderr);
      std::_Exit(1);  // the world is broken: do not wait in MPI_Finalize
    }
    if (t.data<float>()[n - 1] != static_cast<float>(c.size())) {
      std::fprintf(stderr, "rank %d: wrong all-reduce result\n", c.rank());
      std::_Exit(1);
    }
  }
  world->reset();
  motley::comm::MpiWorld::Finalize();
  return 0;
}
