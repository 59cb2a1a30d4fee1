// See plan_switch.h.
#include "train/plan_switch.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "parallel/migration.h"
#include "sched/step_messages.h"

namespace motley::train {

using parallel::WorldLayout;
using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

std::string PlanName(const spec::Plan& plan) {
  return plan.source.empty() ? std::string("plan") : plan.source;
}

Result<std::optional<spec::Plan>> AgreeOnPlan(comm::Communicator& world,
                                              const std::optional<spec::Plan>& decision) {
  std::string text;  // "NAME\nJSON" on rank 0 when it switches
  if (world.rank() == 0 && decision.has_value()) {
    text = PlanName(*decision) + "\n" + spec::PlanToJson(*decision);
  }
  Tensor length = tensor::HostTensor(Shape{sched::kPlanAgreementDoubles}, DType::kF64);
  length.data<double>()[0] = static_cast<double>(text.size());
  MOTLEY_RETURN_IF_ERROR(world.Broadcast(length, 0).WithContext("plan switch: decision"));
  const auto n = static_cast<size_t>(length.data<double>()[0]);
  if (n == 0) return std::optional<spec::Plan>();
  // The text packed 4 bytes per i32 element (copies support every dtype).
  Tensor words = tensor::HostTensor(Shape{static_cast<int64_t>((n + 3) / 4)}, DType::kI32);
  if (world.rank() == 0) std::memcpy(words.data<int32_t>(), text.data(), n);
  MOTLEY_RETURN_IF_ERROR(world.Broadcast(words, 0).WithContext("plan switch: plan"));
  text.resize(n);
  std::memcpy(text.data(), words.data<int32_t>(), n);
  const size_t newline = text.find('\n');
  if (newline == std::string::npos) return Err("plan switch: malformed broadcast of the plan");
  // Every rank, rank 0 included, runs the parsed plan, so all agree to the byte.
  MOTLEY_ASSIGN_OR_RETURN(spec::Plan plan,
                          spec::ParsePlan(std::string_view(text).substr(newline + 1),
                                          std::string_view(text).substr(0, newline)));
  return std::optional<spec::Plan>(std::move(plan));
}

Result<SwitchOutcome> SwitchPlan(const spec::RunFile& run, int r, comm::Communicator& world,
                                 tensor::Backend& backend, const SwitchOptions& options,
                                 int64_t step, RankUnderPlan& state, const spec::Plan& next) {
  const parallel::RankClock& clock = options.rank_options.clock;
  SwitchOutcome out;
  MigrationRecord& rec = out.record;
  rec.step = step;
  rec.from = PlanName(state.layout->plan());
  rec.to = PlanName(next);
  const std::string where =
      fmt::format("plan switch after step {} ({} -> {})", step, rec.from, rec.to);
  // ZeRO-1 plans keep moments sharded: make them whole before they are checked and moved.
  MOTLEY_RETURN_IF_ERROR(state.rank->GatherOptimizerState().WithContext(where));
  if (options.check) {
    MOTLEY_ASSIGN_OR_RETURN(rec.before, parallel::ChecksumState(*state.layout, r, world, backend,
                                                                state.rank->params()));
  }
  const Seconds start = clock.Now();
  Result<WorldLayout> built = WorldLayout::Build(next, state.layout->devices());
  if (!built.ok()) return built.status().WithContext(where);
  auto next_layout = std::make_unique<WorldLayout>(std::move(*built));
  // Senders are picked by the time the cluster's links take (alpha-beta per link class).
  const WorldLayout& world_layout = *state.layout;
  auto transfer_time = [&run, &world_layout](int source, int dest, int64_t bytes) {
    return run.cluster.LinkBetween(world_layout.rank(source).device, world_layout.rank(dest).device)
        .TransferTime(static_cast<double>(bytes));
  };
  Result<parallel::MigrationPlan> plan =
      parallel::PlanMigration(*state.layout, *next_layout, run.model, transfer_time);
  if (!plan.ok()) return plan.status().WithContext(where);
  const parallel::StateSnapshot snapshot = parallel::SnapshotState(backend, state.rank->params());
  state.rank.reset();  // frees the old stage before the new one is allocated
  Result<std::unique_ptr<parallel::ParallelRank>> rank = parallel::ParallelRank::Create(
      *next_layout, r, run.model, run.train, backend, world, options.rank_options);
  if (!rank.ok()) return rank.status().WithContext(where);
  state.rank = std::move(*rank);
  out.old = std::move(state.layout);
  state.layout = std::move(next_layout);
  Result<parallel::MigrationStats> stats =
      parallel::Migrate(*plan, r, step, world, backend, snapshot, state.rank->params(), clock);
  if (!stats.ok()) return stats.status().WithContext(where);
  const Seconds end = clock.Now();
  if (options.check) {
    MOTLEY_ASSIGN_OR_RETURN(
        rec.after, parallel::ChecksumState(*state.layout, r, world, backend, state.rank->params()));
  }

  // Every rank's numbers: sent, received and kept bytes, transfer seconds, start and end.
  constexpr int64_t kFields = 6;
  Tensor mine = tensor::HostTensor(Shape{kFields}, DType::kF64);
  const double values[kFields] = {static_cast<double>(stats->sent_bytes),
                                  static_cast<double>(stats->received_bytes),
                                  static_cast<double>(stats->local_bytes),
                                  stats->seconds,
                                  start,
                                  end};
  std::copy(values, values + kFields, mine.data<double>());
  Tensor all = tensor::HostTensor(Shape{kFields * world.size()}, DType::kF64);
  const std::vector<int64_t> counts(static_cast<size_t>(world.size()), kFields);
  MOTLEY_RETURN_IF_ERROR(world.AllGather(all, mine, counts).WithContext(where));
  double first_start = 0.0, last_end = 0.0, slowest = 0.0;
  for (int q = 0; q < world.size(); ++q) {
    const double* v = all.data<double>() + static_cast<size_t>(q) * kFields;
    rec.sent_bytes.push_back(static_cast<int64_t>(v[0]));
    rec.received_bytes.push_back(static_cast<int64_t>(v[1]));
    rec.bytes += static_cast<int64_t>(v[0]);
    rec.local_bytes += static_cast<int64_t>(v[2]);
    rec.transfer_s = std::max(rec.transfer_s, v[3]);
    first_start = q == 0 ? v[4] : std::min(first_start, v[4]);
    last_end = q == 0 ? v[5] : std::max(last_end, v[5]);
    slowest = std::max(slowest, v[5] - v[4]);
  }
  rec.time_s = options.on_virtual ? last_end - first_start : slowest;

  if (options.check) {
    auto differ = [](const parallel::StateChecksum& a, const parallel::StateChecksum& b) {
      return a.hash != b.hash || a.elements != b.elements;
    };
    for (size_t p = 0; p < rec.before.size(); ++p) {
      if (differ(rec.before[p], rec.before.front())) {
        return Err(
            "{}: before the migration, replica {} differs from replica 0 (state hash "
            "{:016x} vs {:016x})",
            where, p, rec.before[p].hash, rec.before.front().hash);
      }
    }
    for (size_t p = 0; p < rec.after.size(); ++p) {
      if (differ(rec.after[p], rec.before.front())) {
        return Err(
            "{}: after the migration, replica {} differs from the state before (hash "
            "{:016x} vs {:016x}, {} vs {} elements)",
            where, p, rec.after[p].hash, rec.before.front().hash, rec.after[p].elements,
            rec.before.front().elements);
      }
    }
  }
  return out;
}

}  // namespace motley::train
