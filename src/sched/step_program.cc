// See step_program.h.
#include "sched/step_program.h"

#include <algorithm>
#include <map>

#include <fmt/core.h>

#include "core/even_counts.h"
#include "sched/plan_schedules.h"
#include "sched/step_messages.h"
#include "spec/plan_topology.h"

namespace motley::sched {

std::string_view StepOpKindName(StepOpKind kind) {
  switch (kind) {
    case StepOpKind::kZeroGrads: return "zero-grads";
    case StepOpKind::kPipeline: return "pipeline";
    case StepOpKind::kLayerAllReduce: return "all-reduce";
    case StepOpKind::kLayerReduceScatter: return "reduce-scatter";
    case StepOpKind::kGradNorm: return "grad-norm";
    case StepOpKind::kLossNormAllReduce: return "loss-norm";
    case StepOpKind::kOptimizer: return "optimizer";
    case StepOpKind::kLayerAllGather: return "all-gather";
    case StepOpKind::kMetricsAllGather: return "metrics";
    case StepOpKind::kPlanAgreement: return "plan-agreement";
  }
  return "?";
}

int64_t Collective::InputBytes(size_t q) const {
  const int64_t n = kind == StepOpKind::kLayerAllGather || kind == StepOpKind::kMetricsAllGather
                        ? chunks.at(q)
                        : elements;
  return n * element_bytes;
}

TpAllReduces TpAllReducesPerMicroBatch(int64_t num_blocks, spec::Recompute recompute) {
  TpAllReduces calls;
  calls.forward = 2 * num_blocks;
  calls.backward = (recompute == spec::Recompute::kFull ? 4 : 2) * num_blocks;
  return calls;
}

namespace {

// What one rank holds of one layer, and the collective it joins for it.
struct Holding {
  int64_t layer = 0;
  int64_t elements = 0;         // its parameters of the layer
  int64_t sharded = 0;          // of which split over TP ranks
  int collective = -1;          // the layer's all-reduce or reduce-scatter; -1 alone
  int all_gather = -1;          // ZeRO-1: the layer's all-gather
  int64_t chunk = 0;            // ZeRO-1: its chunk of the layer (elements)
};

}  // namespace

Result<StepProgram> BuildStepProgram(const spec::Plan& plan, const spec::ModelSpec& model,
                                     int64_t seq_len, const StepProgramOptions& options) {
  StepProgram program;
  program.schedule = plan.schedule;
  program.zero1 = plan.optimizer_sharding == spec::OptimizerSharding::kZero1;
  const int64_t L = model.num_blocks;
  const std::vector<int> world =
      options.world_devices.empty() ? spec::PlanDevices(plan) : options.world_devices;
  const int n = static_cast<int>(world.size());
  // Device id -> world rank (-1: not in the world); a table, since every op below looks it up.
  int max_device = -1;
  for (int d : world) {
    if (d < 0) return Err("step program: world device {} is negative", d);
    max_device = std::max(max_device, d);
  }
  for (const spec::PipelinePlan& pipe : plan.pipelines) {
    for (const spec::StagePlan& stage : pipe.stages) {
      for (int d : stage.devices) max_device = std::max(max_device, d);
    }
  }
  std::vector<int> rank_of_device(static_cast<size_t>(max_device + 1), -1);
  for (int r = 0; r < n; ++r)
    rank_of_device[static_cast<size_t>(world[static_cast<size_t>(r)])] = r;
  auto rank_of = [&](int device) {
    MOTLEY_CHECK(device >= 0 && rank_of_device[static_cast<size_t>(device)] >= 0,
                 "step program: a device outside the world");
    return rank_of_device[static_cast<size_t>(device)];
  };

  program.ranks.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    program.ranks[static_cast<size_t>(r)].rank = r;
    program.ranks[static_cast<size_t>(r)].device = world[static_cast<size_t>(r)];
  }
  MOTLEY_ASSIGN_OR_RETURN(program.schedules, PlanSchedules::Build(plan));
  const PlanSchedules& schedules = program.schedules;
  for (size_t k = 0; k < plan.pipelines.size(); ++k) {
    const spec::PipelinePlan& pipe = plan.pipelines[k];
    const Schedule& schedule = schedules.of(k);
    const size_t p = static_cast<size_t>(pipe.num_stages());  // device groups
    // Virtual stage s is chunk s / p of device group s % p (s = i without interleaving).
    for (size_t s = 0; s < pipe.stages.size(); ++s) {
      const spec::StagePlan& stage = pipe.stages[s];
      const size_t i = s % p;
      for (size_t j = 0; j < stage.devices.size(); ++j) {
        const int device = stage.devices[j];
        if (device < 0 || rank_of_device[static_cast<size_t>(device)] < 0) {
          return Err(
              "step program: pipelines[{}].stages[{}] uses device {}, which is not in "
              "the world",
              k, s, stage.devices[j]);
        }
        RankStep& rs =
            program.ranks[static_cast<size_t>(rank_of_device[static_cast<size_t>(device)])];
        if (s < p) {  // the device group's first chunk: the rank's own fields
          rs.pipeline = static_cast<int>(k);
          rs.stage = static_cast<int>(i);
          rs.tp_rank = static_cast<int>(j);
          rs.tp_degree = stage.tp_degree;
          if (options.with_actions) rs.actions = schedule.stages[i];
          rs.message_bytes = 4 * pipe.micro_batch_size * seq_len * model.hidden;
          rs.chunks.resize(static_cast<size_t>(pipe.chunks));
        }
        if (rs.pipeline != static_cast<int>(k) || rs.stage != static_cast<int>(i) ||
            rs.chunks.size() <= s / p) {  // spec::ValidatePlan refuses such a plan
          return Err(
              "step program: pipelines[{}].stages[{}] uses device {}, which is not in its "
              "device group {}",
              k, s, device, i);
        }
        ChunkStep& chunk = rs.chunks[s / p];
        chunk.virtual_stage = static_cast<int>(s);
        if (stage.tp_degree > 1) {
          chunk.tp_all_reduces = TpAllReducesPerMicroBatch(stage.num_blocks, stage.recompute);
        }
      }
      if (s < p && stage.tp_degree > 1) {  // every member's list, once all are in the world
        std::vector<int> members;
        for (int device : stage.devices) members.push_back(rank_of(device));
        for (int r : members) program.ranks[static_cast<size_t>(r)].tp_members = members;
      }
    }
    // Peers over each virtual stage boundary (spec/plan_topology.h), as world ranks.
    auto rank_at = [&](const spec::StagePlan& stage, int tp) {
      return rank_of(stage.devices[static_cast<size_t>(tp)]);
    };
    for (size_t s = 0; s + 1 < pipe.stages.size(); ++s) {
      const spec::StagePlan& a = pipe.stages[s];
      const spec::StagePlan& b = pipe.stages[s + 1];
      for (int x = 0; x < a.tp_degree; ++x) {
        ChunkStep& sender = program.ranks[static_cast<size_t>(rank_at(a, x))].chunks[s / p];
        for (int j : spec::BoundaryReceivers(x, a.tp_degree, b.tp_degree)) {
          sender.forward_destinations.push_back(rank_at(b, j));
        }
        sender.backward_source = rank_at(b, spec::BoundaryPeer(x, b.tp_degree));
      }
      for (int j = 0; j < b.tp_degree; ++j) {
        ChunkStep& receiver = program.ranks[static_cast<size_t>(rank_at(b, j))].chunks[(s + 1) / p];
        receiver.forward_source = rank_at(a, spec::BoundaryPeer(j, a.tp_degree));
        for (int x : spec::BoundaryReceivers(j, b.tp_degree, a.tp_degree)) {
          receiver.backward_destinations.push_back(rank_at(a, x));
        }
      }
    }
  }

  // Every rank's holdings, layer by layer, and the layer collectives in layer order, within a
  // layer in TP-rank order (spec::DataParallelGroups).
  std::vector<std::vector<Holding>> held(static_cast<size_t>(n));
  spec::LayerParamsMemo layer_params(model);
  std::vector<int> all_gathers;  // ZeRO-1 reduce-scatters whose all-gather follows the update
  const std::vector<spec::LayerGroup> groups = spec::DataParallelGroups(plan, L);
  program.collectives.reserve(2 * groups.size() + 3);  // with ZeRO-1 all-gathers and the world's
  {
    std::vector<size_t> holdings(static_cast<size_t>(n), 0);
    for (const spec::LayerGroup& group : groups) {
      for (int device : group.devices) ++holdings[static_cast<size_t>(rank_of(device))];
    }
    for (size_t r = 0; r < held.size(); ++r) held[r].reserve(holdings[r]);
  }
  for (const spec::LayerGroup& group : groups) {
    std::vector<int> members;
    members.reserve(group.devices.size());
    for (int device : group.devices) members.push_back(rank_of(device));
    int collective = -1;
    Collective c;  // pushed after the holdings, which read its chunks
    if (members.size() > 1) {
      c.layer = group.layer;
      c.mixed = group.mixed;
      c.tp_rank = group.tp_rank;
      c.elements = layer_params.Of(group.layer, group.tp_degree).total();
      const int shard_degree = program.zero1 ? spec::Zero1ShardDegree(group) : 1;
      c.kind = shard_degree > 1 ? StepOpKind::kLayerReduceScatter : StepOpKind::kLayerAllReduce;
      if (shard_degree > 1) {
        c.chunks = EvenCounts(c.elements, shard_degree);
        all_gathers.push_back(static_cast<int>(program.collectives.size()));
      }
      collective = static_cast<int>(program.collectives.size());
    }
    const std::vector<int64_t>& chunks = c.chunks;
    for (size_t q = 0; q < members.size(); ++q) {
      const RankStep& rs = program.ranks[static_cast<size_t>(members[q])];
      Holding h;
      h.layer = group.layer;
      const spec::LayerParams mine = layer_params.Of(group.layer, rs.tp_degree);
      h.elements = mine.total();
      h.sharded = mine.sharded;
      h.collective = collective;
      if (!chunks.empty()) h.chunk = chunks[q];
      held[static_cast<size_t>(members[q])].push_back(h);
    }
    if (collective >= 0) {
      c.members = std::move(members);
      program.collectives.push_back(std::move(c));
    }
  }
  // The world collectives, then each ZeRO-1 layer's all-gather (after the update).
  std::vector<int> all(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) all[static_cast<size_t>(r)] = r;
  auto world_collective = [&](StepOpKind kind, int64_t elements, std::vector<int64_t> chunks) {
    Collective c;
    c.kind = kind;
    c.element_bytes = 8;
    c.members = all;
    c.elements = elements;
    c.chunks = std::move(chunks);
    program.collectives.push_back(std::move(c));
    return static_cast<int>(program.collectives.size()) - 1;
  };
  const int loss_norm = world_collective(StepOpKind::kLossNormAllReduce, kLossNormDoubles, {});
  std::vector<int> all_gather_of(program.collectives.size(), -1);  // reduce-scatter -> all-gather
  for (int rs : all_gathers) {
    Collective c = program.collectives[static_cast<size_t>(rs)];
    c.kind = StepOpKind::kLayerAllGather;
    all_gather_of[static_cast<size_t>(rs)] = static_cast<int>(program.collectives.size());
    program.collectives.push_back(std::move(c));
  }
  const int64_t stride = StepMetricsDoublesPerRank(options.link_reports, n);
  const int metrics = world_collective(StepOpKind::kMetricsAllGather, stride * n,
                                       std::vector<int64_t>(static_cast<size_t>(n), stride));
  const int agreement = world_collective(StepOpKind::kPlanAgreement, kPlanAgreementDoubles, {});

  for (int r = 0; r < n; ++r) {
    RankStep& rs = program.ranks[static_cast<size_t>(r)];
    std::vector<Holding>& mine = held[static_cast<size_t>(r)];
    std::sort(mine.begin(), mine.end(),
              [](const Holding& a, const Holding& b) { return a.layer < b.layer; });
    auto push = [&rs](StepOpKind kind, int collective, int64_t layer, int64_t elements) {
      rs.ops.push_back(StepOp{kind, collective, layer, elements});
    };
    rs.ops.reserve(3 * mine.size() + 7);  // every op below, at most
    if (!rs.idle()) {
      int64_t params = 0, norm = 0, updated = 0;
      for (const Holding& h : mine) {
        params += h.elements;
        const bool zero1 = h.collective >= 0 &&
                           program.collectives[static_cast<size_t>(h.collective)].kind ==
                               StepOpKind::kLayerReduceScatter;
        if (!zero1) updated += h.elements;
        if (!zero1 && rs.pipeline == 0) norm += rs.tp_rank == 0 ? h.elements : h.sharded;
      }
      push(StepOpKind::kZeroGrads, -1, -1, params);
      push(StepOpKind::kPipeline, -1, -1, 0);
      for (const Holding& h : mine) {
        if (h.collective < 0) continue;
        push(program.collectives[static_cast<size_t>(h.collective)].kind, h.collective, h.layer,
             0);
      }
      push(StepOpKind::kGradNorm, -1, -1, norm);
      push(StepOpKind::kLossNormAllReduce, loss_norm, -1, 0);
      push(StepOpKind::kOptimizer, -1, -1, updated);
      for (const Holding& h : mine) {  // ZeRO-1: each layer's chunk updated, then gathered
        if (h.collective < 0 || all_gather_of[static_cast<size_t>(h.collective)] < 0) continue;
        push(StepOpKind::kOptimizer, -1, h.layer, h.chunk);
        push(StepOpKind::kLayerAllGather, all_gather_of[static_cast<size_t>(h.collective)], h.layer,
             0);
      }
    } else {
      push(StepOpKind::kLossNormAllReduce, loss_norm, -1, 0);
    }
    push(StepOpKind::kMetricsAllGather, metrics, -1, 0);
    push(StepOpKind::kPlanAgreement, agreement, -1, 0);
  }
  program.rank_of_device = std::move(rank_of_device);
  return program;
}

std::vector<std::pair<size_t, size_t>> ConcurrentCollectiveSets(const StepProgram& program) {
  std::vector<std::pair<size_t, size_t>> sets;
  const std::vector<Collective>& cs = program.collectives;
  for (size_t first = 0; first < cs.size();) {
    size_t end = first + 1;
    while (cs[first].layer >= 0 && end < cs.size() && cs[end].layer == cs[first].layer &&
           cs[end].kind == cs[first].kind) {
      ++end;
    }
    sets.emplace_back(first, end);
    first = end;
  }
  return sets;
}

std::vector<int> CollectiveDevices(const StepProgram& program, const Collective& collective) {
  std::vector<int> devices;
  devices.reserve(collective.members.size());
  for (int m : collective.members) devices.push_back(program.ranks[static_cast<size_t>(m)].device);
  return devices;
}

Status CheckStepProgram(const StepProgram& program) {
  const size_t nc = program.collectives.size();
  for (const RankStep& rs : program.ranks) {  // TP groups: every member lists the same group
    if (rs.tp_members.empty()) continue;
    const auto at = static_cast<size_t>(rs.tp_rank);
    if (static_cast<int>(rs.tp_members.size()) != rs.tp_degree || at >= rs.tp_members.size() ||
        rs.tp_members[at] != rs.rank) {
      return Err("step program: rank {}: TP group does not list it as TP rank {} of {}", rs.rank,
                 rs.tp_rank, rs.tp_degree);
    }
    for (int r : rs.tp_members) {
      const RankStep& other = program.ranks.at(static_cast<size_t>(r));
      bool same = other.tp_members == rs.tp_members && other.chunks.size() == rs.chunks.size();
      for (size_t c = 0; same && c < rs.chunks.size(); ++c) {
        same = other.chunks[c].tp_all_reduces.forward == rs.chunks[c].tp_all_reduces.forward &&
               other.chunks[c].tp_all_reduces.backward == rs.chunks[c].tp_all_reduces.backward;
      }
      if (!same) {
        return Err("step program: rank {}: TP group differs on member rank {}", rs.rank, r);
      }
    }
  }
  // Where each collective appears on each rank, in order.
  std::vector<std::vector<int>> joined(nc);
  for (const RankStep& rs : program.ranks) {
    int last = -1;
    for (size_t i = 0; i < rs.ops.size(); ++i) {
      const StepOp& op = rs.ops[i];
      const std::string where = fmt::format("rank {} op {} ({})", rs.rank, i, StepOpKindName(op.kind));
      if (!IsCollective(op.kind)) {
        if (op.collective != -1) return Err("step program: {}: a local op names a collective", where);
        continue;
      }
      if (op.collective < 0 || static_cast<size_t>(op.collective) >= nc) {
        return Err("step program: {}: collective {} out of range [0, {})", where, op.collective, nc);
      }
      if (op.collective <= last) {
        return Err("step program: {}: collective {} after collective {} (entry order must "
                   "ascend)",
                   where, op.collective, last);
      }
      last = op.collective;
      if (program.collectives[static_cast<size_t>(op.collective)].kind != op.kind) {
        return Err("step program: {}: collective {} is a {}", where, op.collective,
                   StepOpKindName(program.collectives[static_cast<size_t>(op.collective)].kind));
      }
      joined[static_cast<size_t>(op.collective)].push_back(rs.rank);
    }
  }
  for (size_t c = 0; c < nc; ++c) {
    const Collective& col = program.collectives[c];
    if (!std::is_sorted(col.members.begin(), col.members.end()) ||
        std::adjacent_find(col.members.begin(), col.members.end()) != col.members.end()) {
      return Err("step program: collective {} ({}): members not ascending and distinct", c,
                 StepOpKindName(col.kind));
    }
    if (joined[c] != col.members) {
      return Err("step program: collective {} ({} of layer {}): its members are not exactly the "
                 "ranks that list it",
                 c, StepOpKindName(col.kind), col.layer);
    }
    if (!col.chunks.empty()) {
      int64_t sum = 0;
      for (int64_t x : col.chunks) sum += x;
      if (sum != col.elements || col.chunks.size() != col.members.size()) {
        return Err("step program: collective {} ({}): chunks do not split its {} elements over "
                   "its {} members",
                   c, StepOpKindName(col.kind), col.elements, col.members.size());
      }
    }
  }
  return Status::Ok();
}

std::string StepProgramToString(const StepProgram& program, int64_t max_actions) {
  std::string out;
  for (const RankStep& rs : program.ranks) {
    if (rs.idle()) {
      out += fmt::format("rank {} (device {}): idle\n", rs.rank, rs.device);
    } else {
      out += fmt::format("rank {} (device {}): pipeline {} stage {}, tp {} of {}\n", rs.rank,
                         rs.device, rs.pipeline, rs.stage, rs.tp_rank, rs.tp_degree);
    }
    for (const StepOp& op : rs.ops) {
      out += fmt::format("  {}", StepOpKindName(op.kind));
      if (op.kind == StepOpKind::kPipeline) {
        const size_t shown = max_actions > 0
                                 ? std::min(rs.actions.size(), static_cast<size_t>(max_actions))
                                 : rs.actions.size();
        for (size_t a = 0; a < shown; ++a) out += " " + ActionToString(rs.actions[a]);
        if (shown < rs.actions.size()) out += fmt::format(" ... ({} more)", rs.actions.size() - shown);
        auto list = [](const std::vector<int>& ranks) {
          std::string l = "[";
          for (size_t q = 0; q < ranks.size(); ++q) l += fmt::format("{}{}", q == 0 ? "" : " ", ranks[q]);
          return l + "]";
        };
        std::vector<std::string> peers;
        for (size_t c = 0; c < rs.chunks.size(); ++c) {
          const ChunkStep& ch = rs.chunks[c];
          // Interleaved ranks name each chunk's peers: "chunk 1: from 3; ...".
          const std::string chunk = rs.chunks.size() > 1 ? fmt::format("chunk {}: ", c) : "";
          const size_t before = peers.size();
          if (ch.forward_source >= 0) peers.push_back(fmt::format("from {}", ch.forward_source));
          if (!ch.forward_destinations.empty())
            peers.push_back("to " + list(ch.forward_destinations));
          if (ch.backward_source >= 0) {
            peers.push_back(fmt::format("gradients from {}", ch.backward_source));
          }
          if (!ch.backward_destinations.empty()) {
            peers.push_back("gradients to " + list(ch.backward_destinations));
          }
          if (peers.size() > before) peers[before] = chunk + peers[before];
        }
        if (!peers.empty()) {
          out += " (";
          for (size_t q = 0; q < peers.size(); ++q) out += (q == 0 ? "" : "; ") + peers[q];
          out += fmt::format("; {} B)", rs.message_bytes);
        }
      } else if (!IsCollective(op.kind)) {
        out += fmt::format(" {}", op.elements);
      } else {
        const Collective& c = program.collectives[static_cast<size_t>(op.collective)];
        if (c.layer >= 0) out += fmt::format(" layer {}", c.layer);
        if (c.members.size() == program.ranks.size() && c.layer < 0) {
          out += " [world]";
        } else {
          out += " [";
          for (size_t q = 0; q < c.members.size(); ++q) {
            out += fmt::format("{}{}", q == 0 ? "" : " ", c.members[q]);
          }
          out += "]";
        }
        const size_t q = static_cast<size_t>(
            std::find(c.members.begin(), c.members.end(), rs.rank) - c.members.begin());
        out += fmt::format(" {} B", c.InputBytes(q));
        if (c.mixed) out += " (mixed TP, full size)";
      }
      out += "\n";
      if (op.kind == StepOpKind::kPipeline && !rs.tp_members.empty()) {
        std::string members;
        for (size_t q = 0; q < rs.tp_members.size(); ++q) {
          members += fmt::format("{}{}", q == 0 ? "" : " ", rs.tp_members[q]);
        }
        for (size_t c = 0; c < rs.chunks.size(); ++c) {
          const TpAllReduces& calls = rs.chunks[c].tp_all_reduces;
          out += fmt::format("    tp all-reduces [{}]{}: {} per forward, {} per backward, {} B\n",
                             members, rs.chunks.size() > 1 ? fmt::format(" chunk {}", c) : "",
                             calls.forward, calls.backward, rs.message_bytes);
        }
      }
    }
  }
  return out;
}

}  // namespace motley::sched
