// The planner (docs/architecture.md §8): searches layouts of TP groups into pipelines (identical
// where the cluster allows, mixed otherwise; island-major stage order so that data-parallel groups
// stay inside islands and only pipeline traffic crosses slow links), splits blocks per pipeline
// under memory limits and micro-batches across pipelines (plan/evaluate.h), ranks candidates with
// the predictor and confirms the best few with the simulator. Beside the answer it computes the
// baselines (uniform Megatron-style split over the whole cluster, best homogeneous sub-cluster,
// identical pipelines only) and the references (the homogeneous sum at each type's share of the
// batch, the compute bound, MFU over all devices, the exhaustive optimum on small instances,
// plan/references.h), and says why each device left out is. Infeasible requests return an error
// naming the binding constraint.
//
// Ownership: the predictor (and its cluster, model, train spec, compute model) must outlive the
// call. Thread safety: PlanCluster is reentrant; the progress callback runs on the caller's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "perf/predictor.h"
#include "spec/plan.h"

namespace motley::plan {

struct PlannerOptions {
  std::vector<int64_t> micro_batch_sizes = {1, 2, 4, 8};  // those dividing the global batch
  // Tried in order per layout; the first that fits memory is kept (lighter recompute is faster).
  std::vector<spec::Recompute> recompute = {spec::Recompute::kNone, spec::Recompute::kSelective,
                                            spec::Recompute::kFull};
  std::vector<int> tp_degrees = {1, 2, 4, 8};
  // Interleaved 1F1B degrees v (model chunks per device group) tried on a plan after its block
  // and micro-batch splits (plan/interleave.h): on every evaluation of small instances, on the
  // finalists at scale, on the uniform baseline and in the exhaustive oracle; kept where the
  // prediction is faster and fits memory (and, for finalists, the simulation is faster too).
  // Empty: one chunk only.
  std::vector<int> interleave_chunks = {2, 3, 4};
  spec::PipelineSchedule schedule = spec::PipelineSchedule::k1F1B;
  // Optimizer shardings of a plan with more than one pipeline (one pipeline has nothing to shard
  // across and takes kNone; an empty list means {kNone}). The search splits blocks and
  // micro-batches with the first (ZeRO-1 by default: the least memory, so the most layouts fit);
  // every plan the planner finishes (polished plans of small instances, the finalists at scale,
  // the uniform baseline) is also predicted at the others, and the exhaustive oracle enumerates
  // them all: the fastest that fits memory is kept (plan/sharding.h). {kNone}: plain data
  // parallelism; {kZero1}: ZeRO-1 always.
  std::vector<spec::OptimizerSharding> shardings = {spec::OptimizerSharding::kZero1,
                                                    spec::OptimizerSharding::kNone};
  // Candidates kept in the ranking (at least confirm_top): the finalists are the confirm_top of
  // them whose predictions are best once reshaped (plan/sharding.h). `motley plan --top N` widens
  // it above this default only.
  int rank_top = 10;
  int confirm_top = 6;   // of those, confirmed by the simulator (the choice goes by simulation)
  // Above the small-instance size, where the search polishes nothing, each candidate to be
  // confirmed is first polished by at most this many local-search moves (LayoutEvaluator::Polish,
  // Moves::kPerSplit), kept where the simulation finds it faster too, and the ranking is redone
  // (0 = off). A budget, not a model constant: on
  // the three-type 1,024- and 4,096-device clusters the chosen plan gained all it would within 6
  // moves (2.6% and 1.4% of simulated step time; 10, 12, 20 and 40 moves gained nothing more,
  // 3 moves 0.1% less at 1,024), and each move costs a prediction per distinct block split and
  // boundary.
  int finalist_polish_moves = 6;
  bool baselines = true;
  // Exhaustive reference when the cluster has at most this many TP groups at TP 1 and the search
  // enumerates at most exhaustive_max_plans one-chunk plans (0 = never; plan/exhaustive.h).
  int exhaustive_max_units = 6;
  int64_t exhaustive_max_plans = 200000;
  perf::StragglerRates rates;         // current straggler rates (re-planning)
  // Current per-link straggler rates (re-planning), applied by the predictor and the simulator.
  perf::LinkRates link_rates;
  std::vector<int> only_types;        // restrict to these device type indices (empty = all)
  bool identical_only = false;        // only layouts whose pipelines are all identical
  // Branch and bound: skip predicting a candidate whose proven lower bound cannot beat what the
  // search keeps (plan/evaluate.h EvalSettings::prune_above). The result is the same either way.
  bool prune = true;
  // Threads evaluating candidates, the uniform baseline's shapes and the simulator's
  // confirmations (0 = every core: ThreadsOrAllCores in core/thread_count.h). The
  // result is the same for any count (pruning is exact, and outcomes are applied in the one-thread
  // order); only evaluations_pruned may differ, as threads see the search's records a batch late.
  int threads = 1;
  std::function<void(std::string_view stage, double fraction)> progress;
};

struct Candidate {
  spec::Plan plan;
  perf::Prediction prediction;
  double simulated_s = 0;  // 0 when not simulated
  std::string description;
  // Tokens/s by the simulated time when there is one, else by the predicted time. Baselines and
  // the chosen plan are all simulated, so ratios between them compare like with like.
  double TokensPerSecond(int64_t tokens_per_step) const;
};

// The baselines every plan is compared with (`motley plan --baseline KIND` writes one as a plan).
enum class BaselineKind {
  kUniform,      // the best uniform Megatron-style split over the whole cluster (BestUniformPlan)
  kHomogeneous,  // the best plan on the devices of one type alone
  kIdentical,    // the best plan whose pipelines are all identical
};
// "uniform", "homogeneous", "identical".
const char* BaselineKindName(BaselineKind kind);
// Parses one of those names; the error lists them.
Result<BaselineKind> ParseBaselineKind(std::string_view name);
// Whether `name` is one of those names.
bool IsBaselineName(std::string_view name);

struct Baseline {
  std::string name;        // "uniform", "homogeneous (h100)", "identical pipelines"
  bool found = false;
  std::string why_not;     // when not found
  Candidate candidate;
  BaselineKind kind = BaselineKind::kUniform;
};

// One device type's share of the homogeneous sum (plan/references.h): its best plan alone at its
// share of the global batch.
struct TypeShare {
  int type = 0;  // index into the cluster's device types
  std::string type_name;
  int devices = 0;           // devices of the type
  int64_t global_batch = 0;  // its share: max(1, round(B * devices / all devices)) sequences
  double tokens_per_s = 0;   // its best plan's (simulated) tokens/s at that batch; 0: none fits
  std::string what;          // that plan's description, or why none fits
};

// Devices of one type the chosen plan leaves out, and why (plan/references.h).
struct LeftOutDevices {
  int type = 0;
  std::string type_name;
  std::vector<int> devices;  // ascending ids
  std::string reason;
};

struct PlanReport {
  Candidate best;                     // the simulator-confirmed choice among the top candidates
  std::vector<Candidate> ranked;      // by predicted iteration time
  std::vector<Baseline> baselines;
  int64_t tokens_per_step = 0;        // global batch * sequence length
  // References, in tokens/s (0 = not computed).
  double compute_bound_tokens_per_s = 0;   // sum of achievable FLOP/s / model FLOPs per token
  // The homogeneous sum (HETHUB's bound): sum over device types of the best plan of that type
  // alone at its share of the global batch (simulated); `homogeneous_shares` has the terms.
  double homogeneous_sum_tokens_per_s = 0;
  std::vector<TypeShare> homogeneous_shares;
  double exhaustive_tokens_per_s = 0;      // exhaustive optimum (small instances), predicted:
                                           // compare with ranked.front()'s predicted tokens/s
  // The chosen plan's MFU at its tokens/s (simulated when simulated): over the devices it uses,
  // and over every device of the cluster.
  double mfu_used = 0;
  double mfu_all = 0;
  std::vector<LeftOutDevices> left_out;  // by type; empty when every device is used
  int64_t layouts_considered = 0;
  int64_t evaluations = 0;
  int64_t evaluations_pruned = 0;  // of those, cut by the lower bound before prediction
};

Result<PlanReport> PlanCluster(const perf::Predictor& predictor, const PlannerOptions& options);

// The TP degrees of options.tp_degrees that device type `type` can take: at most its smallest
// node's devices, dividing the model's heads, kv heads, ffn width and vocabulary.
std::vector<int> ValidTp(const spec::ClusterSpec& cluster, const spec::ModelSpec& model,
                         const PlannerOptions& options, int type);

// The best uniform Megatron-style plan over the whole cluster (dp * pp * tp == all devices, even
// block and batch split), over the (dp, pp, tp, b, recompute) that fit; error when none fits.
Result<Candidate> BestUniformPlan(const perf::Predictor& predictor, const PlannerOptions& options);

// The achievable compute bound: sum over devices of the best FLOP/s the compute model grants one
// device on a block, over the model FLOPs per token (no plan can exceed it under that model).
// The device's best per-block FLOP/s is taken over the given micro-batch sizes and TP degrees.
double ComputeBoundTokensPerSecond(const perf::Predictor& predictor,
                                   const std::vector<int64_t>& micro_batch_sizes,
                                   const std::vector<int>& tp_degrees);

// The chosen plan (its description, tokens/s, MFU over the devices used and over all, predicted
// and simulated step), then one line per baseline (speed-up over it, its description), one of the
// references (ratio to each), the homogeneous sum's terms and the devices left out with why.
std::string SummarizeReport(const PlanReport& report);

// The baseline of `kind` in a report planned with baselines on; an error (naming why) when the
// planner found none of that kind. The plan's comment says which baseline it is.
Result<Candidate> FindBaseline(const PlanReport& report, BaselineKind kind);

}  // namespace motley::plan
