// See comm_tp_group.h.
#include "parallel/comm_tp_group.h"

#include <chrono>

namespace motley::parallel {

void CommTpGroup::AllReduceSum(tensor::Tensor& data) {
  if (!status_.ok()) return;
  const auto start = std::chrono::steady_clock::now();
  status_ = comm_->AllReduce(data, comm::ReduceOp::kSum).WithContext("tensor-parallel all-reduce");
  comm_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace motley::parallel
