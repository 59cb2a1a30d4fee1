// See predictor.h. Predict itself (the step model) is in predict_step.cc; this file holds the
// building blocks it shares with the simulator and the planner.
//
// Pipeline closed form (the planner's fast estimate; Predict walks the action lists instead), 1F1B with p stages, m micro-batches, per-stage forward f_i and backward b_i,
// boundary transfer c_j between stages j and j+1 (blocking rendezvous p2p as the schedule's
// execution contract prescribes):
//   T = sum_i (f_i + b_i) + 2 * sum_j c_j + (m - 1) * max_i (f_i + b_i + c_{i-1} + c_i)
// The first two terms are the fill and drain of one micro-batch, the last the steady state of the
// bottleneck stage, which exchanges with both neighbours once per micro-batch (AMP, Li et al.
// 2022, with the communication of each period made explicit). Stage i's last backward ends at
// T - sum_{j<i} (b_j + c_j). GPipe: the forward and backward phases each have their own
// bottleneck: T = sum_i (f_i + b_i) + 2 sum_j c_j + (m-1) (max_i (f_i + c..) + max_i (b_i + c..)).
//
// Data-parallel groups: Predict times the step program's per-layer collectives
// (sched/step_program.h); the memory estimate's ZeRO-1 degree is read from the same program.
#include "perf/predictor.h"

#include <algorithm>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "core/throughput.h"
#include "perf/comm_model.h"
#include "sched/plan_schedules.h"
#include "sched/schedule.h"
#include "sched/step_program.h"
#include "spec/plan_topology.h"

namespace motley::perf {

double GroupRate(const StragglerRates& rates, const std::vector<int>& devices) {
  double rate = 1.0;
  if (rates.empty()) return rate;
  for (int d : devices) {
    if (d >= 0 && d < static_cast<int>(rates.size())) rate = std::max(rate, rates[static_cast<size_t>(d)]);
  }
  return rate;
}

PipelineTiming PipelineClosedForm(const std::vector<StageCost>& stages,
                                  const std::vector<Seconds>& p2p_s, int64_t micro_batches,
                                  spec::PipelineSchedule schedule) {
  const size_t p = stages.size();
  MOTLEY_CHECK(p >= 1 && p2p_s.size() + 1 >= p && micro_batches >= 1, "bad pipeline");
  auto c = [&](size_t j) { return j < p - 1 ? p2p_s[j] : 0.0; };
  Seconds fill = 0;
  Seconds worst = 0;
  Seconds worst_f = 0;
  Seconds worst_b = 0;
  for (size_t i = 0; i < p; ++i) {
    const Seconds around = (i > 0 ? c(i - 1) : 0.0) + c(i);
    fill += stages[i].forward_s + stages[i].backward_s + 2.0 * c(i);
    worst = std::max(worst, stages[i].forward_s + stages[i].backward_s + around);
    worst_f = std::max(worst_f, stages[i].forward_s + around);
    worst_b = std::max(worst_b, stages[i].backward_s + around);
  }
  const double steady = static_cast<double>(micro_batches - 1);
  PipelineTiming timing;
  timing.time_s = fill + steady * (schedule == spec::PipelineSchedule::k1F1B ? worst
                                                                             : worst_f + worst_b);
  timing.last_backward_end_s.resize(p);
  Seconds back = 0;
  for (size_t i = 0; i < p; ++i) {
    timing.last_backward_end_s[i] = timing.time_s - back;
    back += stages[i].backward_s + c(i);
  }
  return timing;
}

double EqualStagePhaseSlots(int64_t groups, int64_t micro_batches, int chunks) {
  MOTLEY_CHECK(groups >= 1 && micro_batches >= 1 && chunks >= 1, "bad pipeline");
  return static_cast<double>(micro_batches) +
         static_cast<double>(groups - 1) / static_cast<double>(chunks);
}

Predictor::Predictor(const spec::ClusterSpec& cluster, const spec::ModelSpec& model,
                     const spec::TrainSpec& train, const ComputeModel& compute,
                     PerfSettings settings)
    : cluster_(cluster),
      model_(model),
      train_(train),
      compute_(compute),
      settings_(settings),
      network_(cluster, settings.nic_contention) {}

Bytes Predictor::ActivationMessageBytes(int64_t micro_batch_size) const {
  return static_cast<double>(micro_batch_size * train_.seq_len * model_.hidden) *
         ActivationElementBytes(settings_);
}

StageCost Predictor::StageCostOfShape(int device_type, int tp, const spec::LinkClass* intra_link,
                                      int64_t num_blocks, bool has_embedding, bool has_head,
                                      int64_t micro_batch_size, spec::Recompute recompute,
                                      double rate) const {
  const int64_t b = micro_batch_size;
  const int64_t s = train_.seq_len;
  const PassTimes block = compute_.Block(device_type, tp, b, s);
  Seconds recompute_s = 0;
  if (recompute == spec::Recompute::kFull) recompute_s = block.forward_s;
  if (recompute == spec::Recompute::kSelective) {
    recompute_s = compute_.AttentionRecompute(device_type, tp, b, s);
  }
  // Megatron TP: the step program's all-reduces of one (b, s, h) activation per block (with SP:
  // reduce-scatter + all-gather pairs of the same volume).
  Seconds tp_ar = 0;
  if (tp > 1 && intra_link != nullptr) {
    tp_ar = RingAllReduceTime(ActivationMessageBytes(b), tp, *intra_link);
  }
  const sched::TpAllReduces per_block = sched::TpAllReducesPerMicroBatch(1, recompute);
  const double n = static_cast<double>(num_blocks);
  StageCost cost;
  cost.forward_s = n * (block.forward_s + static_cast<double>(per_block.forward) * tp_ar);
  cost.backward_s =
      n * (block.backward_s + recompute_s + static_cast<double>(per_block.backward) * tp_ar);
  if (has_embedding) {
    const PassTimes e = compute_.Embedding(device_type, tp, b, s);
    cost.forward_s += e.forward_s;
    cost.backward_s += e.backward_s;
  }
  if (has_head) {
    const PassTimes hd = compute_.Head(device_type, tp, b, s);
    cost.forward_s += hd.forward_s;
    cost.backward_s += hd.backward_s;
  }
  // A pipeline's first stage holds the embedding and its last the head (ValidatePlan).
  const PassTimes copies = compute_.StageCopies(device_type, tp, b, s, !has_embedding, !has_head);
  cost.forward_s += copies.forward_s;
  cost.backward_s += copies.backward_s;
  cost.forward_s *= rate;
  cost.backward_s *= rate;
  return cost;
}

StageCost Predictor::StageCostOf(const spec::StagePlan& stage, int64_t micro_batch_size,
                                 spec::Recompute recompute, const StragglerRates& rates,
                                 const LinkRates& links) const {
  MOTLEY_CHECK(!stage.devices.empty(), "stage without devices");
  const int first = stage.devices.front();
  const spec::LinkClass intra_link =
      stage.devices.size() > 1 ? LinkOf(first, stage.devices[1], links) : spec::LinkClass{};
  const spec::LinkClass* intra = stage.devices.size() > 1 ? &intra_link : nullptr;
  return StageCostOfShape(cluster_.device(first).type, stage.tp_degree, intra, stage.num_blocks,
                          stage.has_embedding, stage.has_head, micro_batch_size, recompute,
                          GroupRate(rates, stage.devices));
}

Predictor::AllReduceSetTiming Predictor::TimeAllReduceSet(
    const std::vector<std::vector<int>>& groups, Bytes bytes, const LinkRates& links) const {
  std::vector<std::vector<CollectiveFlows>> candidates;
  size_t algorithms = 0;
  for (const std::vector<int>& devices : groups) {
    candidates.push_back(AllReduceCandidates(cluster_, devices, bytes));
    algorithms = std::max(algorithms, candidates.back().size());
  }
  const CollectiveFlows none;
  const FlowPathFn path = [&](int a, int b) { return PathOf(a, b, links); };
  AllReduceSetTiming best;
  Seconds best_s = 0;
  for (size_t a = 0; a < algorithms; ++a) {
    std::vector<const CollectiveFlows*> chosen;
    for (const std::vector<CollectiveFlows>& c : candidates) {
      chosen.push_back(c.empty() ? &none : &c[std::min(a, c.size() - 1)]);
    }
    std::vector<Seconds> times = ConcurrentCollectiveTimes(network_, chosen, path);
    const Seconds slowest = times.empty() ? 0.0 : *std::max_element(times.begin(), times.end());
    if (a == 0 || slowest < best_s) {
      best_s = slowest;
      best.time_s = std::move(times);
      best.flows.clear();
      for (const CollectiveFlows* f : chosen) best.flows.push_back(*f);
    }
  }
  if (algorithms == 0) best.time_s.assign(groups.size(), 0.0);
  if (best.flows.empty()) best.flows.assign(groups.size(), none);
  return best;
}

Seconds Predictor::LocalOpTime(int device_type, double rate, const sched::StepOp& op) const {
  const double elements = static_cast<double>(op.elements);
  switch (op.kind) {
    case sched::StepOpKind::kZeroGrads: return rate * compute_.ZeroGrads(device_type, elements);
    case sched::StepOpKind::kGradNorm: return rate * compute_.GradNorm(device_type, elements);
    case sched::StepOpKind::kOptimizer:
      return OptimizerTime(device_type, elements, rate) +
             (op.layer >= 0 ? 1.5 * StagingTime(device_type, rate, elements) : 0.0);
    default: return 0.0;
  }
}

FlopsPerSecond Predictor::PeakFlopsSum(const std::vector<int>& devices) const {
  FlopsPerSecond sum = 0;
  for (int d : devices) {
    const spec::DeviceType& type = cluster_.device_type_of(d);
    const FlopsPerSecond peak = type.PeakFlops(settings_.precision);
    sum += peak > 0 ? peak : type.peak_fp32_flops;
  }
  return sum;
}

Seconds Predictor::OptimizerTime(int device_type, double params_per_device, double rate) const {
  return rate * compute_.OptimizerStep(device_type, params_per_device);
}

spec::LinkClass Predictor::LinkOf(int a, int b, const LinkRates& links) const {
  spec::LinkClass link = cluster_.LinkBetween(a, b);
  const double rate = links.At(a, b);
  if (rate != 1.0) {
    link.latency_s *= rate;
    link.bandwidth /= rate;
  }
  return link;
}

FlowPath Predictor::PathOf(int a, int b, const LinkRates& links) const {
  FlowPath path = network_.Path(a, b, cluster_.LinkBetween(a, b));
  const double rate = links.At(a, b);
  if (rate != 1.0) {
    path.latency_s *= rate;
    path.cap /= rate;
  }
  return path;
}

double LinkRates::At(int a, int b) const {
  if (slowdown.empty()) return 1.0;
  const auto it = slowdown.find({std::min(a, b), std::max(a, b)});
  return it == slowdown.end() ? 1.0 : it->second;
}

void LinkRates::Set(int a, int b, double rate) {
  const std::pair<int, int> key{std::min(a, b), std::max(a, b)};
  if (rate == 1.0) {
    slowdown.erase(key);
  } else {
    slowdown[key] = rate;
  }
}

bool Predictor::RunsAsTheRuntime() const {
  return settings_.precision == spec::Precision::kFp32 && !settings_.flash_attention &&
         !settings_.sequence_parallel;
}

namespace {

// The largest piece of rank `rank`'s ZeRO-1 chunks that lies within one tensor (zero1.cc updates
// a chunk tensor by tensor, with two temporaries of each piece).
int64_t LargestZero1Segment(const spec::ModelSpec& model, const sched::StepProgram& program,
                            int rank) {
  const sched::RankStep& rs = program.ranks[static_cast<size_t>(rank)];
  int64_t largest = 0;
  for (const sched::StepOp& op : rs.ops) {
    if (op.kind != sched::StepOpKind::kLayerReduceScatter) continue;
    const sched::Collective& c = program.collectives[static_cast<size_t>(op.collective)];
    const auto q = static_cast<size_t>(
        std::find(c.members.begin(), c.members.end(), rank) - c.members.begin());
    int64_t begin = 0;
    for (size_t i = 0; i < q; ++i) begin += c.chunks[i];
    const int64_t end = begin + c.chunks[q];
    int64_t at = 0;
    for (const spec::LayerTensor& t : spec::LayerTensorsPerTpRank(model, c.layer, rs.tp_degree)) {
      largest = std::max(largest, std::min(end, at + t.elements) - std::max(begin, at));
      at += t.elements;
    }
  }
  return largest;
}

// The memory model's input for one stage of `pipe` at sequence length `seq_len`, with
// `in_flight` micro-batches' activations held; dp_degree and sharding are left to the caller.
StageMemoryInput StageMemoryInputOf(const spec::StagePlan& st, const spec::PipelinePlan& pipe,
                                    int64_t seq_len, int64_t in_flight) {
  StageMemoryInput in;
  in.num_blocks = st.num_blocks;
  in.has_embedding = st.has_embedding;
  in.has_head = st.has_head;
  in.tp = st.tp_degree;
  in.micro_batch_size = pipe.micro_batch_size;
  in.seq_len = seq_len;
  in.in_flight = in_flight;
  return in;
}

// Prediction::memory_violation for stage i of pipeline k.
std::string MemoryViolationText(const spec::ClusterSpec& cluster, size_t k, size_t i,
                                const spec::StagePlan& st, const spec::PipelinePlan& pipe,
                                int64_t in_flight, const StageMemory& memory, Bytes capacity) {
  const int type = cluster.device(st.devices.front()).type;
  return fmt::format(
      "pipelines[{}].stages[{}] ({} blocks{}{}, tp {}, b {}, {} in flight) needs {:.2f} GiB "
      "per '{}' device but it has {:.2f} GiB (weights {:.2f}, grads {:.2f}, optimizer "
      "{:.2f}, activations {:.2f}, buffers {:.2f})",
      k, i, st.num_blocks, st.has_embedding ? " + embedding" : "", st.has_head ? " + head" : "",
      st.tp_degree, pipe.micro_batch_size, in_flight, memory.total() / kGiB,
      cluster.device_types[static_cast<size_t>(type)].name, capacity / kGiB, memory.weights / kGiB,
      memory.gradients / kGiB, memory.optimizer / kGiB, memory.activations / kGiB,
      memory.buffers / kGiB);
}

}  // namespace

Prediction Predictor::PredictIfFits(const spec::Plan& plan, const StragglerRates& rates,
                                    const LinkRates& links) const {
  PlanMemoryCheck memory = CheckPlanMemory(plan);
  if (memory.verdict != MemoryVerdict::kOver) return Predict(plan, rates, links);
  Prediction over;
  over.fits_memory = false;
  over.memory_violation = std::move(memory.violation);
  over.iteration_s = std::numeric_limits<double>::infinity();
  return over;
}

Predictor::PlanMemoryCheck Predictor::CheckPlanMemory(const spec::Plan& plan) const {
  const int64_t L = model_.num_blocks;
  const size_t layers = static_cast<size_t>(spec::NumGradientLayers(L));
  const bool zero1 = plan.optimizer_sharding == spec::OptimizerSharding::kZero1;
  const std::vector<spec::LayerHolding> holdings =
      zero1 ? spec::LayerHoldings(plan, L) : std::vector<spec::LayerHolding>();
  const bool runtime = RunsAsTheRuntime();
  // The runtime rounds each layer's chunk up where the stage estimate rounds their sum: at most
  // one element per layer, of the two moments and the segment (fp32).
  const Bytes margin = runtime ? 16.0 * static_cast<double>(layers + 1) : 0.0;
  PlanMemoryCheck out;
  out.verdict = MemoryVerdict::kFits;
  Bytes worst_excess = 0;
  for (const spec::PipelinePlan& pipe : plan.pipelines) {
    // A device holds every chunk of its group: this per-stage check would see one chunk; the
    // full prediction (FillMemoryAndRates) sums them.
    if (pipe.chunks > 1) return {MemoryVerdict::kUnknown, ""};
  }
  for (size_t k = 0; k < plan.pipelines.size(); ++k) {
    const spec::PipelinePlan& pipe = plan.pipelines[k];
    for (size_t i = 0; i < pipe.stages.size(); ++i) {
      const spec::StagePlan& st = pipe.stages[i];
      // The list's count in closed form: a search checks many shapes it never walks, and
      // building their lists here (the process-wide store's churn) cost more than the walks.
      StageMemoryInput in = StageMemoryInputOf(
          st, pipe, train_.seq_len,
          sched::InFlightWithoutInterleaving(plan.schedule, pipe.num_stages(), static_cast<int>(i),
                                             pipe.micro_batches));
      int dp = 0;
      if (zero1) {
        spec::ForEachGradientLayerOf(st, L, [&](int64_t l) {
          const int degree = spec::Zero1ShardDegree(holdings[static_cast<size_t>(l)]);
          dp = dp == 0 ? degree : std::min(dp, degree);
        });
      }
      in.dp_degree = std::max(dp, 1);
      in.recompute = st.recompute;
      in.sharding = plan.optimizer_sharding;
      const Bytes capacity =
          cluster_.device_types[static_cast<size_t>(cluster_.device(st.devices.front()).type)]
              .memory_bytes;
      if (runtime) {
        if (StageMemoryForPlanning(in, plan.schedule) + margin > capacity) {
          return {MemoryVerdict::kUnknown, ""};
        }
        continue;
      }
      // As FillMemoryAndRates: the worst over-capacity stage, the first of equals.
      const StageMemory memory = StageMemoryPerDevice(model_, in, settings_);
      const Bytes excess = memory.total() - capacity;
      if (excess > 0 && excess > worst_excess) {
        worst_excess = excess;
        out.verdict = MemoryVerdict::kOver;
        out.violation =
            MemoryViolationText(cluster_, k, i, st, pipe, in.in_flight, memory, capacity);
      }
    }
  }
  return out;
}

Bytes Predictor::StageMemoryForPlanning(const StageMemoryInput& in,
                                        spec::PipelineSchedule schedule) const {
  if (!RunsAsTheRuntime()) return StageMemoryPerDevice(model_, in, settings_).total();
  RankTensorsInput r;
  r.num_blocks = in.num_blocks;
  r.has_embedding = in.has_embedding;
  r.has_head = in.has_head;
  r.tp = in.tp;
  r.micro_batch_size = in.micro_batch_size;
  r.seq_len = in.seq_len;
  r.recompute = in.recompute;
  r.activation_slots = in.in_flight;
  // sched::PipelineBuffersHeld of 1F1B and GPipe lists: none on a single stage, one on the
  // first, two in the middle, and on the last two (1F1B) or one (GPipe).
  const bool single = in.has_embedding && in.has_head;
  r.transfer_buffers = single            ? 0
                       : in.has_embedding ? 1
                       : in.has_head && schedule == spec::PipelineSchedule::kGPipe ? 1
                                                                                  : 2;
  const int64_t params =
      spec::StageParamsPerTpRank(model_, in.num_blocks, in.has_embedding, in.has_head, in.tp);
  const bool zero1 = in.sharding == spec::OptimizerSharding::kZero1 && in.dp_degree > 1;
  r.moment_elements = zero1 ? (params + in.dp_degree - 1) / in.dp_degree : params;
  if (zero1) {
    // Gradient layers (spec/plan_topology.h): 0 the embedding, 1..L the blocks, L+1 the head.
    std::vector<int64_t> layers;
    if (in.has_embedding) layers.push_back(0);
    if (in.num_blocks > 0) layers.push_back(1);
    if (in.has_head) layers.push_back(model_.num_blocks + 1);
    int64_t largest = 0;
    for (int64_t layer : layers) {
      for (const spec::LayerTensor& t : spec::LayerTensorsPerTpRank(model_, layer, in.tp)) {
        largest = std::max(largest, t.elements);
      }
    }
    r.zero1_segment = (largest + in.dp_degree - 1) / in.dp_degree;
  }
  return RuntimeRankMemory(model_, r).total();
}

Bytes Predictor::RecomputeMemoryChange(const spec::Plan& plan, int pipeline, int stage,
                                       spec::Recompute to) const {
  const spec::PipelinePlan& pipe = plan.pipelines[static_cast<size_t>(pipeline)];
  const spec::StagePlan& st = pipe.stages[static_cast<size_t>(stage)];
  const int64_t in_flight = sched::InFlightWithoutInterleaving(plan.schedule, pipe.num_stages(),
                                                               stage, pipe.micro_batches);
  // Only the activations depend on the recompute: the rest of the two estimates cancel.
  StageMemoryInput in = StageMemoryInputOf(st, pipe, train_.seq_len, in_flight);
  auto bytes = [&](spec::Recompute r) {
    in.recompute = r;
    return StageMemoryForPlanning(in, plan.schedule);
  };
  return bytes(to) - bytes(st.recompute);
}

void Predictor::FillMemoryAndRates(const spec::Plan& plan, const sched::StepProgram& program,
                                   Prediction* pred) const {
  Bytes worst_mem_excess = 0;
  const bool runtime = RunsAsTheRuntime();
  const sched::PlanSchedules& schedules = program.schedules;
  for (size_t k = 0; k < plan.pipelines.size(); ++k) {
    const spec::PipelinePlan& pipe = plan.pipelines[k];
    const auto p = static_cast<size_t>(pipe.num_stages());
    // Each virtual stage's own bytes on its devices (its chunk's Stage; the rank's optimizer
    // state, ZeRO-1 temporaries and transfer buffers counted with chunk 0), then per device group
    // the sum over its chunks: a device holds every chunk of its group.
    std::vector<StageMemory> own(pipe.stages.size());
    for (size_t i = 0; i < pipe.stages.size(); ++i) {
      const spec::StagePlan& st = pipe.stages[i];
      const bool rank_level = i < p;  // chunk 0 of its group
      StageMemoryInput in = StageMemoryInputOf(st, pipe, train_.seq_len, schedules.in_flight(k, i));
      // ZeRO-1's sharding degree for the estimate: the smallest over the chunk's layers (1 where
      // a layer is not sharded: held alone, or mixed TP degrees).
      std::vector<int64_t> layers;
      spec::ForEachGradientLayerOf(st, model_.num_blocks, [&](int64_t l) { layers.push_back(l); });
      in.dp_degree = 0;
      for (int device : st.devices) {
        const sched::RankStep& rs =
            program.ranks[static_cast<size_t>(program.RankOfDevice(device))];
        int64_t sharded_layers = 0;
        for (const sched::StepOp& op : rs.ops) {
          if (op.kind != sched::StepOpKind::kLayerReduceScatter ||
              std::find(layers.begin(), layers.end(), op.layer) == layers.end()) {
            continue;
          }
          ++sharded_layers;
          const auto members = static_cast<int64_t>(
              program.collectives[static_cast<size_t>(op.collective)].members.size());
          in.dp_degree = in.dp_degree == 0 ? members : std::min(in.dp_degree, members);
        }
        if (sharded_layers < static_cast<int64_t>(layers.size())) in.dp_degree = 1;
      }
      in.dp_degree = std::max<int64_t>(in.dp_degree, 1);
      in.recompute = st.recompute;
      in.sharding = plan.optimizer_sharding;
      if (runtime) {
        RankTensorsInput r;
        r.num_blocks = st.num_blocks;
        r.has_embedding = st.has_embedding;
        r.has_head = st.has_head;
        r.tp = st.tp_degree;
        r.micro_batch_size = pipe.micro_batch_size;
        r.seq_len = train_.seq_len;
        r.recompute = st.recompute;
        r.activation_slots = in.in_flight;
        r.transfer_buffers = rank_level ? schedules.buffers_held(k, i) : 0;
        for (int device : st.devices) {
          const int rank = program.RankOfDevice(device);
          r.moment_elements = 0;
          r.zero1_segment = 0;
          if (rank_level) {
            for (const sched::StepOp& op : program.ranks[static_cast<size_t>(rank)].ops) {
              if (op.kind == sched::StepOpKind::kOptimizer) r.moment_elements += op.elements;
            }
            r.zero1_segment = LargestZero1Segment(model_, program, rank);
          }
          const StageMemory mine = RuntimeRankMemory(model_, r);
          if (mine.total() > own[i].total()) own[i] = mine;
        }
      } else {
        own[i] = StageMemoryPerDevice(model_, in, settings_);
      }
    }
    for (size_t g = 0; g < p; ++g) {
      StageMemory device;
      int64_t in_flight = 0;
      for (int c = 0; c < pipe.chunks; ++c) {
        const auto i = static_cast<size_t>(pipe.virtual_stage(static_cast<int>(g), c));
        device.weights += own[i].weights;
        device.gradients += own[i].gradients;
        device.optimizer += own[i].optimizer;
        device.activations += own[i].activations;
        device.buffers += own[i].buffers;
        in_flight += schedules.in_flight(k, i);
      }
      const spec::StagePlan& st = pipe.stages[g];
      const int type = cluster_.device(st.devices.front()).type;
      const Bytes capacity = cluster_.device_types[static_cast<size_t>(type)].memory_bytes;
      for (int c = 0; c < pipe.chunks; ++c) {
        StagePrediction& sp =
            pred->stages[k][static_cast<size_t>(pipe.virtual_stage(static_cast<int>(g), c))];
        sp.device_type = type;
        sp.memory = device;
        sp.capacity = capacity;
      }
      auto& peak = pred->peak_memory_per_type[static_cast<size_t>(type)];
      peak = std::max(peak, device.total());
      const Bytes excess = device.total() - capacity;
      if (excess > 0 && excess > worst_mem_excess) {
        worst_mem_excess = excess;
        pred->fits_memory = false;
        pred->memory_violation =
            MemoryViolationText(cluster_, k, g, st, pipe, in_flight, device, capacity);
      }
    }
  }
  pred->model_flops = spec::ModelFlopsPerIteration(model_, train_.global_batch, train_.seq_len);
  const double peak_sum = PeakFlopsSum(spec::PlanDevices(plan));
  if (pred->iteration_s > 0) {
    pred->tokens_per_s = TokensPerSecond(train_.global_batch * train_.seq_len, pred->iteration_s);
    pred->mfu =
        spec::Mfu(spec::ModelFlopsPerToken(model_, train_.seq_len), pred->tokens_per_s, peak_sum);
  }
}

}  // namespace motley::perf
