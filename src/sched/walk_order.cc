// See walk_order.h.
#include "sched/walk_order.h"

#include <cstddef>

#include "core/check.h"

namespace motley::sched {

std::vector<WalkStep> RecordWalkOrder(const Schedule& schedule) {
  const int p = schedule.num_stages;
  const int64_t m = schedule.num_micro_batches;
  const int num_virtual = schedule.num_virtual_stages();
  MOTLEY_CHECK(p >= 1 && m >= 1 && static_cast<int>(schedule.stages.size()) == p,
               "walk order: bad schedule");
  const auto num_boundaries = static_cast<size_t>(num_virtual > 1 ? num_virtual - 1 : 0);
  const auto mu = static_cast<size_t>(m);
  // Whether message k has been sent over boundary b (b joins virtual stages b and b + 1):
  // activations [b * m + k] and gradients [b * m + k].
  std::vector<char> sent_forward(num_boundaries * mu, 0);
  std::vector<char> sent_backward(num_boundaries * mu, 0);
  size_t total = 0;
  for (const std::vector<Action>& list : schedule.stages) total += list.size();
  std::vector<WalkStep> order;
  order.reserve(total);
  auto step = [&](int group, const Action& a) {
    order.push_back(
        WalkStep{group, a.chunk * p + group, static_cast<int32_t>(a.micro_batch), a.kind});
  };
  std::vector<size_t> pc(static_cast<size_t>(p), 0);
  std::vector<char> posted(static_cast<size_t>(p), 0);
  std::vector<int> work;
  for (int i = p - 1; i >= 0; --i) work.push_back(i);
  while (!work.empty()) {
    const int i = work.back();
    work.pop_back();
    const auto iu = static_cast<size_t>(i);
    const std::vector<Action>& list = schedule.stages[iu];
    while (pc[iu] < list.size()) {
      const Action& a = list[pc[iu]];
      if (a.kind == ActionKind::kForward || a.kind == ActionKind::kBackward) {
        step(i, a);
        ++pc[iu];
        continue;
      }
      MOTLEY_CHECK(IsCommunication(a.kind), "walk order: a step action in the lists");
      size_t end = pc[iu];
      while (end < list.size() && IsCommunication(list[end].kind)) ++end;
      if (posted[iu] == 0) {
        for (size_t j = pc[iu]; j < end; ++j) {
          const Action& x = list[j];
          const int xs = x.chunk * p + i;
          const auto k = static_cast<size_t>(x.micro_batch);
          if (x.kind == ActionKind::kSendForward) {
            step(i, x);
            sent_forward[static_cast<size_t>(xs) * mu + k] = 1;
            work.push_back((xs + 1) % p);
          } else if (x.kind == ActionKind::kSendBackward) {
            step(i, x);
            sent_backward[static_cast<size_t>(xs - 1) * mu + k] = 1;
            work.push_back((xs - 1) % p);
          }
        }
        posted[iu] = 1;
      }
      bool blocked = false;
      for (size_t j = pc[iu]; j < end && !blocked; ++j) {
        const Action& x = list[j];
        const auto xs = static_cast<size_t>(x.chunk * p + i);
        const auto k = static_cast<size_t>(x.micro_batch);
        if (x.kind == ActionKind::kRecvForward) blocked = sent_forward[(xs - 1) * mu + k] == 0;
        if (x.kind == ActionKind::kRecvBackward) blocked = sent_backward[xs * mu + k] == 0;
      }
      if (blocked) break;
      for (size_t j = pc[iu]; j < end; ++j) {
        const Action& x = list[j];
        if (x.kind == ActionKind::kRecvForward || x.kind == ActionKind::kRecvBackward) step(i, x);
      }
      pc[iu] = end;
      posted[iu] = 0;
    }
  }
  for (int i = 0; i < p; ++i) {
    MOTLEY_CHECK(pc[static_cast<size_t>(i)] == schedule.stages[static_cast<size_t>(i)].size(),
                 "pipeline walk deadlocked");
  }
  return order;
}

}  // namespace motley::sched
