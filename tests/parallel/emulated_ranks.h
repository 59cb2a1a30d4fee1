// Test helper: a plan trained for a few steps with one EmulatedBackend per rank (ranks as
// threads over the local communicator), returning what each rank's backend counted. Shared by the
// recompute test (FLOPs, peak memory, activation slots) and the memory model's test
// (tests/plan_vs_runtime/memory_vs_runtime_test.cc: peak memory).
#pragma once

#include <span>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "backend/emulated/emulated_backend.h"
#include "comm/local_world.h"
#include "parallel/parallel_rank.h"
#include "parallel/world_layout.h"
#include "spec/plan.h"
#include "spec/run_file.h"
#include "train/batch_sampler.h"
#include "train/dataset.h"

namespace motley::testing {

struct RankCounts {
  double flops = 0;        // charged by the rank's backend over all steps
  int64_t peak_bytes = 0;  // of live tensors, as the backend counts them
  int64_t activation_slots = 0;
};

// Trains `plan` for `steps` steps with one EmulatedBackend per rank (ranks as threads) and
// returns each rank's counts.
inline std::vector<RankCounts> RunEmulated(const spec::RunFile& run, const spec::Plan& plan,
                                    int64_t steps) {
  auto layout = parallel::WorldLayout::Build(plan);
  EXPECT_TRUE(layout.ok()) << layout.status().message();
  auto data = train::LoadTokenSplits(run.train.data, run.model.vocab_size, run.train.seq_len);
  EXPECT_TRUE(data.ok()) << data.status().message();
  if (!layout.ok() || !data.ok()) return {};
  backend::SetBlasThreads(1);
  auto world = comm::LocalWorld::Create(layout->size());
  std::vector<RankCounts> counts(static_cast<size_t>(layout->size()));
  std::vector<Status> status(counts.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < layout->size(); ++r) {
    threads.emplace_back([&, r] {
      auto fail = [&](const Status& s) {
        status[static_cast<size_t>(r)] = s;
        world->Abort(s.message());
      };
      auto comm = world->Connect(r);
      if (!comm.ok()) return fail(comm.status());
      VirtualClock clock;
      const spec::DeviceType& type = run.cluster.device_type_of(layout->rank(r).device);
      auto backend = backend::EmulatedBackend::Create(type, &clock, r, 1);
      if (!backend.ok()) return fail(backend.status());
      auto rank =
          parallel::ParallelRank::Create(*layout, r, run.model, run.train, **backend, **comm);
      if (!rank.ok()) return fail(rank.status());
      const auto& slices = layout->samples()[static_cast<size_t>((*rank)->info().pipeline)];
      const int64_t begin = slices.front().begin;
      const int64_t count = static_cast<int64_t>(slices.size()) * slices.front().count;
      const int64_t t = run.train.seq_len;
      std::vector<int32_t> inputs(static_cast<size_t>(count * t)), targets(inputs.size());
      for (int64_t step = 1; step <= steps; ++step) {
        const auto offsets =
            train::TrainBatchOffsets(run.train.seed, step - 1, layout->global_batch(), t,
                                     static_cast<int64_t>(data->train.size()));
        train::GatherSamples(
            data->train,
            std::span<const int64_t>(offsets.data() + begin, static_cast<size_t>(count)), t, inputs,
            targets);
        auto result = (*rank)->Step(step, inputs, targets);
        if (!result.ok()) return fail(result.status());
      }
      if (!(*backend)->memory_status().ok()) return fail((*backend)->memory_status());
      RankCounts& c = counts[static_cast<size_t>(r)];
      c.flops = (*backend)->total_stats().flops;
      c.peak_bytes = (*backend)->peak_bytes();
      c.activation_slots = (*rank)->stage().num_activation_slots();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Status& s : status) EXPECT_TRUE(s.ok()) << s.message();
  return counts;
}

}  // namespace motley::testing
