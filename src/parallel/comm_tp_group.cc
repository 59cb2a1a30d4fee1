// See comm_tp_group.h.
#include "parallel/comm_tp_group.h"

namespace motley::parallel {

void CommTpGroup::AllReduceSum(tensor::Tensor& data) {
  if (!status_.ok()) return;
  const Seconds start = clock_.Now();
  status_ = comm_->AllReduce(data, comm::ReduceOp::kSum).WithContext("tensor-parallel all-reduce");
  comm_s_ += clock_.Since(start);
}

}  // namespace motley::parallel
