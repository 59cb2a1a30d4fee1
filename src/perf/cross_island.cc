// See cross_island.h.
#include "perf/cross_island.h"

#include <set>
#include <vector>

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
    std::vector<int64_t> forward_away(r.chunks.size(), 0);  // by model chunk
    std::vector<int64_t> backward_away(r.chunks.size(), 0);
    for (size_t c = 0; c < r.chunks.size(); ++c) {
      for (int dst : r.chunks[c].forward_destinations) {
        forward_away[c] += island_of_rank(dst) != here ? 1 : 0;
      }
      for (int dst : r.chunks[c].backward_destinations) {
        backward_away[c] += island_of_rank(dst) != here ? 1 : 0;
      }
    }
    for (const sched::Action& a : r.actions) {
      const auto c = static_cast<size_t>(a.chunk);
      const int64_t away = a.kind == sched::ActionKind::kSendForward    ? forward_away[c]
                           : a.kind == sched::ActionKind::kSendBackward ? backward_away[c]
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
