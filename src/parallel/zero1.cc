// See zero1.h.
#include "parallel/zero1.h"

#include <algorithm>

#include <fmt/core.h>

#include "core/even_counts.h"

namespace motley::parallel {

using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

Result<std::unique_ptr<Zero1Layer>> Zero1Layer::Create(tensor::Backend& backend,
                                                       model::ParameterSet& params,
                                                       std::vector<size_t> indices,
                                                       comm::Communicator& group,
                                                       bool counts_replicated_in_norm) {
  if (group.size() < 2) return Err("zero1: group {} has fewer than 2 members", group.name());
  std::unique_ptr<Zero1Layer> z(new Zero1Layer(backend, params, group));
  z->indices_ = std::move(indices);
  for (size_t i : z->indices_) {
    z->numel_ += params[i].value.numel();
    z->counts_in_norm_.push_back(params[i].info.sharded() || counts_replicated_in_norm);
  }
  // Every member must flatten the same layout: compare the element count first, then each size.
  Tensor sizes = tensor::HostTensor(Shape{static_cast<int64_t>(z->indices_.size()) + 1},
                                    DType::kF64);
  sizes.data<double>()[0] = static_cast<double>(z->numel_);
  for (size_t k = 0; k < z->indices_.size(); ++k) {
    sizes.data<double>()[k + 1] = static_cast<double>(params[z->indices_[k]].value.numel());
  }
  Tensor own = tensor::HostTensor(sizes.shape(), DType::kF64);
  std::copy(sizes.data<double>(), sizes.data<double>() + sizes.numel(), own.data<double>());
  MOTLEY_RETURN_IF_ERROR(group.AllReduce(own, comm::ReduceOp::kMax).WithContext("zero1 layout"));
  for (int64_t k = 0; k < own.numel(); ++k) {
    if (own.data<double>()[k] != sizes.data<double>()[k]) {
      const std::string what =
          k == 0 ? std::string("the layer's size")
                 : params[z->indices_[static_cast<size_t>(k - 1)]].name();
      return Err("zero1: the members of group {} disagree on {}", group.name(), what);
    }
  }
  const int g = group.size();
  z->counts_ = EvenCounts(z->numel_, g);
  for (int i = 0; i < group.rank(); ++i) z->offset_ += z->counts_[static_cast<size_t>(i)];
  z->count_ = z->counts_[static_cast<size_t>(group.rank())];
  int64_t cum = 0;
  for (size_t i : z->indices_) {
    const int64_t n = params[i].value.numel();
    const int64_t lo = std::max(cum, z->offset_);
    const int64_t hi = std::min(cum + n, z->offset_ + z->count_);
    if (lo < hi) {
      Segment s;
      s.param = i;
      s.begin = lo - cum;
      s.length = hi - lo;
      s.chunk_pos = lo - z->offset_;
      z->segments_.push_back(std::move(s));
    }
    cum += n;
  }
  if (!params[z->indices_.front()].m.defined()) {  // allocated without moments: zero chunks
    for (Segment& s : z->segments_) {
      s.m = backend.Zeros(Shape{s.length}, DType::kF32);
      s.v = backend.Zeros(Shape{s.length}, DType::kF32);
    }
  }
  z->flat_ = tensor::HostTensor(Shape{z->numel_}, DType::kF32);
  z->chunk_grad_ = tensor::HostTensor(Shape{std::max<int64_t>(z->count_, 1)}, DType::kF32);
  z->chunk_value_ = tensor::HostTensor(Shape{std::max<int64_t>(z->count_, 1)}, DType::kF32);
  return z;
}

Status Zero1Layer::ReduceGradients() {
  float* out = flat_.data<float>();
  for (size_t i : indices_) {
    const Tensor& g = params_[i].grad;
    backend_.CopyToHost(out, g, g.bytes());
    out += g.numel();
  }
  Tensor chunk = tensor::HostTensor(Shape{count_}, DType::kF32);
  MOTLEY_RETURN_IF_ERROR(group_.ReduceScatter(chunk, flat_, counts_, comm::ReduceOp::kSum)
                             .WithContext("zero1 gradient reduce-scatter"));
  std::copy(chunk.data<float>(), chunk.data<float>() + count_, chunk_grad_.data<float>());
  return Status::Ok();
}

double Zero1Layer::SquaredNormShare() const {
  double sum = 0.0;
  const float* g = chunk_grad_.data<float>();
  for (const Segment& s : segments_) {
    const auto k = static_cast<size_t>(
        std::find(indices_.begin(), indices_.end(), s.param) - indices_.begin());
    if (!counts_in_norm_[k]) continue;
    for (int64_t e = 0; e < s.length; ++e) {
      const double x = g[s.chunk_pos + e];
      sum += x * x;
    }
  }
  return sum;
}

void Zero1Layer::PackValues() {
  float* out = flat_.data<float>();
  for (size_t i : indices_) {
    const Tensor& v = params_[i].value;
    backend_.CopyToHost(out, v, v.bytes());
    out += v.numel();
  }
}

void Zero1Layer::AdoptMoments() {
  if (!params_[indices_.front()].m.defined()) return;  // the chunks are authoritative
  std::vector<float> host;
  for (Segment& s : segments_) {
    const model::Parameter& p = params_[s.param];
    host.resize(static_cast<size_t>(p.m.numel()));
    s.m = backend_.Empty(Shape{s.length}, DType::kF32);
    backend_.CopyToHost(host.data(), p.m, p.m.bytes());
    backend_.CopyFromHost(s.m, host.data() + s.begin, static_cast<size_t>(s.length) * 4);
    s.v = backend_.Empty(Shape{s.length}, DType::kF32);
    backend_.CopyToHost(host.data(), p.v, p.v.bytes());
    backend_.CopyFromHost(s.v, host.data() + s.begin, static_cast<size_t>(s.length) * 4);
  }
  for (size_t i : indices_) {
    params_[i].m = Tensor();
    params_[i].v = Tensor();
  }
}

Status Zero1Layer::Step(const tensor::AdamWParams& adamw, float weight_decay) {
  AdoptMoments();
  PackValues();
  tensor::AdamWParams a = adamw;
  for (Segment& s : segments_) {
    const model::Parameter& p = params_[s.param];
    int64_t flat_pos = offset_ + s.chunk_pos;
    Tensor value = backend_.Empty(Shape{s.length}, DType::kF32);
    Tensor grad = backend_.Empty(Shape{s.length}, DType::kF32);
    const auto bytes = static_cast<size_t>(s.length) * sizeof(float);
    backend_.CopyFromHost(value, flat_.data<float>() + flat_pos, bytes);
    backend_.CopyFromHost(grad, chunk_grad_.data<float>() + s.chunk_pos, bytes);
    a.weight_decay = p.info.weight_decay ? weight_decay : 0.0F;
    backend_.AdamW(value, grad, s.m, s.v, a);
    backend_.CopyToHost(chunk_value_.data<float>() + s.chunk_pos, value, bytes);
  }
  Tensor mine = tensor::HostTensor(Shape{count_}, DType::kF32);
  std::copy(chunk_value_.data<float>(), chunk_value_.data<float>() + count_, mine.data<float>());
  MOTLEY_RETURN_IF_ERROR(
      group_.AllGather(flat_, mine, counts_).WithContext("zero1 parameter all-gather"));
  const float* in = flat_.data<float>();
  for (size_t i : indices_) {
    Tensor& v = params_[i].value;
    backend_.CopyFromHost(v, in, v.bytes());
    in += v.numel();
  }
  return Status::Ok();
}

Status Zero1Layer::GatherMoments() {
  if (params_[indices_.front()].m.defined()) return Status::Ok();  // already whole
  Tensor mine = tensor::HostTensor(Shape{count_}, DType::kF32);
  for (const bool second : {false, true}) {
    for (const Segment& s : segments_) {
      const Tensor& src = second ? s.v : s.m;
      backend_.CopyToHost(mine.data<float>() + s.chunk_pos, src, src.bytes());
    }
    MOTLEY_RETURN_IF_ERROR(
        group_.AllGather(flat_, mine, counts_).WithContext("zero1 moment all-gather"));
    const float* in = flat_.data<float>();
    for (size_t i : indices_) {
      model::Parameter& p = params_[i];
      Tensor& dst = second ? p.v : p.m;
      dst = backend_.Empty(p.value.shape(), DType::kF32);
      backend_.CopyFromHost(dst, in, dst.bytes());
      in += dst.numel();
    }
  }
  for (Segment& s : segments_) {
    s.m = Tensor();
    s.v = Tensor();
  }
  return Status::Ok();
}

}  // namespace motley::parallel
