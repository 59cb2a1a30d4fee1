// The op cost table moved to spec/op_costs.h so that the predictor (perf/) can count ops exactly as
// this backend charges them; this header keeps the backend's `costs::` spelling.
#pragma once

#include "spec/op_costs.h"

namespace motley::backend {
namespace costs = spec::costs;
}  // namespace motley::backend
