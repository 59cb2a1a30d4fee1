// See cross_island.h.
#include "perf/cross_island.h"

#include <set>

namespace motley::perf {

CrossIslandTraffic CountCrossIslandTraffic(const sched::StepProgram& program,
                                           const spec::Plan& plan, const Predictor& predictor) {
  const spec::ClusterSpec& cluster = predictor.cluster();
  CrossIslandTraffic out;
  auto island_of_rank = [&](int rank) {
    return cluster.device(program.ranks[static_cast<size_t>(rank)].device).island;
  };
  for (const sched::RankStep& r : program.ranks) {
    if (r.idle()) continue;
    const int here = island_of_rank(r.rank);
    const auto message = static_cast<int64_t>(predictor.ActivationMessageBytes(
        plan.pipelines[static_cast<size_t>(r.pipeline)].micro_batch_size));
    int64_t forward_away = 0;
    int64_t backward_away = 0;
    for (int dst : r.forward_destinations) forward_away += island_of_rank(dst) != here ? 1 : 0;
    for (int dst : r.backward_destinations) backward_away += island_of_rank(dst) != here ? 1 : 0;
    for (const sched::Action& a : r.actions) {
      const int64_t away = a.kind == sched::ActionKind::kSendForward    ? forward_away
                           : a.kind == sched::ActionKind::kSendBackward ? backward_away
                                                                        : 0;
      out.pipeline_messages += away;
      out.pipeline_bytes += away * message;
    }
  }
  for (const sched::Collective& c : program.collectives) {
    std::set<int> islands;
    for (int m : c.members) islands.insert(island_of_rank(m));
    if (islands.size() < 2) continue;
    const std::string kind(sched::StepOpKindName(c.kind));
    ++out.collectives[kind];
    out.collective_buffer_bytes[kind] +=
        static_cast<int64_t>(static_cast<double>(c.elements) * predictor.ElementBytesOf(c));
  }
  return out;
}

}  // namespace motley::perf
