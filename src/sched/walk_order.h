// The order in which one pipeline's action lists can run, recorded once per schedule so that a
// timed walk replays it instead of searching for the next group that can move.
//
// A walk of the lists (the predictor's pipeline phase, perf/step_model.cc) runs each device group
// as far as its receives allow: a compute action advances the group's clock; a batch of
// communication actions posts its sends when the group reaches it and completes once every
// receive of the batch has arrived. Which group moves next depends only on which messages have
// been sent, never on the times, so the order is a property of the schedule: RecordWalkOrder
// finds it once with a work list, and a replay of its steps in order performs the same
// arithmetic, in the same order, as the work-list walk would for any costs. Every group's own
// steps keep its list's order, so each directed pair of groups sees its sends in the order the
// sender posts them.
// Pure functions and plain values; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "sched/schedule.h"

namespace motley::sched {

// One step of the replay, on device group `group` (0 <= group < p), about virtual stage
// `virtual_stage` (chunk * p + group) and micro-batch `micro_batch`:
//   kForward / kBackward: the group computes (its clock advances by the stage's cost);
//   kSendForward / kSendBackward: the group posts the message at its clock (when it reaches the
//     batch holding the send, before the batch's receives complete);
//   kRecvForward / kRecvBackward: the group's clock waits for the message (when every receive of
//     its batch has arrived; one step per receive, in list order).
struct WalkStep {
  int32_t group = 0;
  int32_t virtual_stage = 0;
  int32_t micro_batch = 0;
  ActionKind kind = ActionKind::kForward;
};

// The replay order of `schedule`'s action lists (forward, backward, send and receive actions
// only: schedules built with_step_actions are refused). MOTLEY_CHECKs that the lists run to
// their ends (a schedule that deadlocks has no walk).
std::vector<WalkStep> RecordWalkOrder(const Schedule& schedule);

}  // namespace motley::sched
