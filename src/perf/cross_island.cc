// See cross_island.h.
#include "perf/cross_island.h"

#include <set>

namespace motley::perf {

CrossIslandTraffic CountCrossIslandTraffic(const sched::StepProgram& program,
                                           const spec::ClusterSpec& cluster) {
  CrossIslandTraffic out;
  auto island_of_rank = [&](int rank) {
    return cluster.device(program.ranks[static_cast<size_t>(rank)].device).island;
  };
  for (const sched::RankStep& r : program.ranks) {
    if (r.idle()) continue;
    const int here = island_of_rank(r.rank);
    int64_t forward_away = 0;
    int64_t backward_away = 0;
    for (int dst : r.forward_destinations) forward_away += island_of_rank(dst) != here ? 1 : 0;
    for (int dst : r.backward_destinations) backward_away += island_of_rank(dst) != here ? 1 : 0;
    for (const sched::Action& a : r.actions) {
      const int64_t away = a.kind == sched::ActionKind::kSendForward    ? forward_away
                           : a.kind == sched::ActionKind::kSendBackward ? backward_away
                                                                        : 0;
      out.pipeline_messages += away;
      out.pipeline_bytes += away * r.message_bytes;
    }
  }
  for (const sched::Collective& c : program.collectives) {
    std::set<int> islands;
    for (int m : c.members) islands.insert(island_of_rank(m));
    if (islands.size() < 2) continue;
    const std::string kind(sched::StepOpKindName(c.kind));
    ++out.collectives[kind];
    out.collective_buffer_bytes[kind] += c.elements * c.element_bytes;
  }
  return out;
}

}  // namespace motley::perf
