// See parallel_checkpoint.h.
#include "train/parallel_checkpoint.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "model/parameters.h"
#include "parallel/migration.h"
#include "spec/plan.h"
#include "train/checkpoint/checkpoint.h"
#include "train/trainer_checkpoint.h"

namespace motley::train {
namespace {

using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

// Outcomes travel as strings: "+" and the payload on success, "-", the StatusCode (a number),
// ":" and the message on failure, "" from a rank with nothing to say.
std::string Success(const std::string& payload) {
  return "+" + payload;
}
std::string Failure(const Status& s) {
  return fmt::format("-{}:{}", static_cast<int>(s.code()), s.message());
}
bool IsFailure(const std::string& outcome) {
  return !outcome.empty() && outcome[0] == '-';
}
// The Status of a failure outcome, its message prefixed with `where`.
Status FailureStatus(const std::string& outcome, const std::string& where) {
  const size_t colon = outcome.find(':');
  const int code = std::atoi(outcome.substr(1, colon - 1).c_str());
  const bool known =
      code > static_cast<int>(StatusCode::kOk) && code <= static_cast<int>(StatusCode::kInternal);
  return Status::Error(known ? static_cast<StatusCode>(code) : StatusCode::kUnknown,
                       fmt::format("{}: {}", where, outcome.substr(colon + 1)));
}

// A layout world rank's rank in the save's communicator.
int CommRank(const CheckpointWriters& writers, int q) {
  return writers.comm_rank_of.empty() ? q : writers.comm_rank_of.at(static_cast<size_t>(q));
}

// The shards of the writing pipeline's TP rank `q` that its stage's writer needs: the sharded
// tensors of q's parameter set, in the order q sends them (its set's order).
std::vector<model::ParamInfo> ShardInfos(const spec::ModelSpec& model,
                                         const parallel::WorldLayout& layout, int q) {
  std::vector<model::ParamInfo> infos = parallel::RankParamInfos(model, layout, q);
  std::erase_if(infos, [](const model::ParamInfo& p) { return !p.sharded(); });
  return infos;
}

// Phase 3, a non-zero TP rank of pipeline 0: its shards to the stage's writer.
Status SendShards(comm::Communicator& world, parallel::ParallelRank& rank, int writer) {
  const model::ParameterSet* params = rank.params();
  MOTLEY_CHECK(params != nullptr, "checkpoint: an idle rank holds no shards");
  for (const model::Parameter& p : *params) {
    if (!p.info.sharded()) continue;
    MOTLEY_CHECK(p.m.defined() && p.v.defined(), "checkpoint: moments not gathered");
    for (const Tensor* t : {&p.value, &p.m, &p.v}) {
      MOTLEY_RETURN_IF_ERROR(
          world.Send(*t, writer, kCheckpointTag)
              .WithContext(fmt::format("checkpoint: shard '{}' to rank {}", p.name(), writer)));
    }
  }
  return Status::Ok();
}

// Phase 3 and 4 on a writer (TP rank 0 of a stage of the writing pipeline): receives the other
// TP ranks' shards into host sets and writes the stage's files. A communication error is
// returned; a write failure is the outcome string.
Result<std::string> ReceiveAndWrite(comm::Communicator& world, const parallel::WorldLayout& layout,
                                    parallel::ParallelRank& rank, tensor::Backend& backend,
                                    const spec::ModelSpec& model, const std::string& tmp,
                                    const CheckpointWriters& writers) {
  const parallel::RankInfo& me = rank.info();
  backend::CpuBackend host(1);
  std::vector<model::ParameterSet> others;
  for (int q : layout.stage_ranks(writers.PipelineOf(me.stage), me.stage)) {
    if (q == me.rank) continue;
    others.push_back(model::ParameterSet::Allocate(host, ShardInfos(model, layout, q)));
    for (model::Parameter& p : others.back()) {
      for (Tensor* t : {&p.value, &p.m, &p.v}) {
        MOTLEY_RETURN_IF_ERROR(
            world.Recv(*t, CommRank(writers, q), kCheckpointTag)
                .WithContext(fmt::format("checkpoint: shard '{}' from rank {}", p.name(), q)));
      }
    }
  }
  std::vector<ShardSource> sources;
  for (const model::ParameterSet& set : others) sources.push_back(ShardSource{&host, &set});
  const int num_stages = static_cast<int>(
      layout.plan().pipelines[static_cast<size_t>(writers.PipelineOf(0))].num_stages());
  Result<StageFiles> files = WriteStageFiles(
      tmp, me.stage, num_stages, StageToSave(&backend, rank.params(), std::move(sources)),
      /*save_optimizer=*/true);
  if (!files.ok()) {
    return Failure(
        files.status().WithContext(fmt::format("stage {} (rank {})", me.stage, me.rank)));
  }
  return Success(StageFilesToJson(*files).dump());
}

}  // namespace

Result<std::vector<std::string>> AllGatherStrings(comm::Communicator& world,
                                                  const std::string& mine) {
  const int n = world.size();
  Tensor length = tensor::HostTensor(Shape{1}, DType::kF64);
  length.data<double>()[0] = static_cast<double>(mine.size());
  Tensor lengths = tensor::HostTensor(Shape{n}, DType::kF64);
  MOTLEY_RETURN_IF_ERROR(
      world.AllGather(lengths, length, std::vector<int64_t>(static_cast<size_t>(n), 1)));
  // The bytes packed 4 per i32 element (copies support every dtype).
  std::vector<int64_t> words(static_cast<size_t>(n));
  int64_t total = 0;
  for (int q = 0; q < n; ++q) {
    const auto bytes = static_cast<int64_t>(lengths.data<double>()[q]);
    words[static_cast<size_t>(q)] = (bytes + 3) / 4;
    total += words[static_cast<size_t>(q)];
  }
  std::vector<std::string> out(static_cast<size_t>(n));
  if (total == 0) return out;
  Tensor in = tensor::HostTensor(Shape{words[static_cast<size_t>(world.rank())]}, DType::kI32);
  if (!mine.empty()) std::memcpy(in.data<int32_t>(), mine.data(), mine.size());
  Tensor all = tensor::HostTensor(Shape{total}, DType::kI32);
  MOTLEY_RETURN_IF_ERROR(world.AllGather(all, in, words));
  const auto* bytes = reinterpret_cast<const char*>(all.data<int32_t>());
  size_t offset = 0;
  for (int q = 0; q < n; ++q) {
    out[static_cast<size_t>(q)].assign(bytes + offset,
                                       static_cast<size_t>(lengths.data<double>()[q]));
    offset += static_cast<size_t>(words[static_cast<size_t>(q)]) * 4;
  }
  return out;
}

Result<std::string> SaveParallelCheckpoint(comm::Communicator& world,
                                           const parallel::WorldLayout& layout,
                                           parallel::ParallelRank& rank, tensor::Backend& backend,
                                           const spec::ModelSpec& model,
                                           const spec::TrainSpec& train, int64_t step,
                                           const CheckpointWriters& writers) {
  const std::string where = fmt::format("checkpoint of step {}", step);
  const int r = world.rank();
  const parallel::RankInfo& me = rank.info();
  // 1. ZeRO-1 plans: the writers need every moment whole (a no-op without ZeRO-1). Collective
  // over the data-parallel groups, so only in the whole world.
  if (writers.comm_rank_of.empty()) {
    MOTLEY_RETURN_IF_ERROR(rank.GatherOptimizerState().WithContext(where));
  }

  // 2. Rank 0 begins; everyone learns the folder or the failure.
  std::string begun;
  if (r == 0) {
    Result<std::string> tmp = BeginCheckpoint(train.checkpoint.dir, step);
    begun = tmp.ok() ? Success(*tmp) : Failure(tmp.status());
  }
  MOTLEY_ASSIGN_OR_RETURN(std::vector<std::string> outcomes, AllGatherStrings(world, begun));
  if (outcomes[0].empty()) return Err("{}: rank 0 did not begin", where);
  if (IsFailure(outcomes[0])) return FailureStatus(outcomes[0], where);
  const std::string tmp = outcomes[0].substr(1);

  // 3 and 4. The writing pipeline's TP groups gather their shards on TP rank 0, which writes the
  // stage.
  std::string written;
  const int num_stages = static_cast<int>(
      layout.plan().pipelines[static_cast<size_t>(writers.PipelineOf(0))].num_stages());
  if (!me.idle() && me.stage < num_stages && me.pipeline == writers.PipelineOf(me.stage)) {
    const int writer = layout.stage_ranks(me.pipeline, me.stage).front();
    if (me.rank != writer) {
      MOTLEY_RETURN_IF_ERROR(SendShards(world, rank, CommRank(writers, writer)).WithContext(where));
    } else {
      MOTLEY_ASSIGN_OR_RETURN(written,
                              ReceiveAndWrite(world, layout, rank, backend, model, tmp, writers));
    }
  }
  MOTLEY_ASSIGN_OR_RETURN(outcomes, AllGatherStrings(world, written));
  for (const std::string& o : outcomes) {
    if (IsFailure(o)) {
      if (r == 0) AbortCheckpoint(tmp);  // a failed save removes what it wrote
      return FailureStatus(o, where);
    }
  }

  // 5. Rank 0 commits; everyone learns the folder or the failure.
  std::string committed;
  std::vector<StageFiles> stages;
  for (const std::string& o : outcomes) {
    if (o.empty() || r != 0 || !committed.empty()) continue;
    const nlohmann::json j =
        nlohmann::json::parse(o.substr(1), nullptr, /*allow_exceptions=*/false);
    Result<StageFiles> files = StageFilesFromJson(j);
    if (files.ok()) {
      stages.push_back(std::move(*files));
    } else {
      committed = Failure(files.status());
      AbortCheckpoint(tmp);
    }
  }
  if (r == 0 && committed.empty()) {
    std::sort(stages.begin(), stages.end(),
              [](const StageFiles& a, const StageFiles& b) { return a.stage < b.stage; });
    SaveOptions save;
    save.keep_last = std::max<int64_t>(1, train.checkpoint.keep_last);
    const CheckpointMetadata md =
        MakeCheckpointMetadata(model, train, step, layout.global_batch(),
                               nlohmann::json::parse(spec::PlanToJson(layout.plan()), nullptr,
                                                     /*allow_exceptions=*/false));
    Result<std::string> dir = CommitCheckpoint(train.checkpoint.dir, tmp, md, stages, save);
    committed = dir.ok() ? Success(*dir) : Failure(dir.status());
  }
  MOTLEY_ASSIGN_OR_RETURN(outcomes, AllGatherStrings(world, committed));
  if (outcomes[0].empty()) return Err("{}: rank 0 did not commit", where);
  if (IsFailure(outcomes[0])) return FailureStatus(outcomes[0], where);
  return outcomes[0].substr(1);
}

}  // namespace motley::train
