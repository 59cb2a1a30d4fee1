// See migration.h.
#include "parallel/migration.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <span>
#include <string_view>

#include <fmt/core.h>

#include "core/check.h"
#include "model/shards.h"

namespace motley::parallel {

using tensor::DType;
using tensor::Shape;
using tensor::Tensor;

namespace {

// A holder's range along `dim` of the full tensor: its TP shard, or the whole extent.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
};
Range RangeOf(const model::ParamInfo& info, int dim) {
  if (info.sharded()) {
    MOTLEY_CHECK(info.shard_dim == dim, "migration: one tensor sharded along two dimensions");
    return {info.shard_offset, info.shard_offset + info.shape[dim]};
  }
  return {0, info.shape[dim]};
}

Shape WithDim(const Shape& shape, int dim, int64_t n) {
  std::vector<int64_t> dims = shape.dims();
  dims[static_cast<size_t>(dim)] = n;
  return Shape(dims);
}

struct Holder {
  int rank = 0;
  model::ParamInfo info;
};

std::string PlanName(const WorldLayout& layout) {
  return layout.plan().source.empty() ? std::string("plan") : layout.plan().source;
}

// Copies the piece `move` of the holder's local tensor `local` (of `info`) to `out`.
void ExtractPiece(const model::ParamInfo& info, const std::vector<float>& local,
                  const MigrationMove& move, float* out) {
  const auto n = static_cast<size_t>(move.shape.numel());
  if (move.dim < 0) {
    MOTLEY_CHECK(local.size() == n, "migration: whole-tensor piece of a different size");
    std::copy(local.begin(), local.end(), out);
    return;
  }
  model::ExtractSlice(local, info.shape, move.dim, move.begin - RangeOf(info, move.dim).begin,
                      std::span<float>(out, n), move.shape);
}

// Copies `in` (the piece `move`) into the new holder's local tensor `local` (of `info`).
void PlacePiece(const model::ParamInfo& info, std::vector<float>& local, const MigrationMove& move,
                const float* in) {
  const auto n = static_cast<size_t>(move.shape.numel());
  if (move.dim < 0) {
    MOTLEY_CHECK(local.size() == n, "migration: whole-tensor piece of a different size");
    std::copy(in, in + n, local.begin());
    return;
  }
  model::PlaceSlice(local, info.shape, move.dim, move.begin - RangeOf(info, move.dim).begin,
                    std::span<const float>(in, n), move.shape);
}

// The new state of one tensor, filled piece by piece in host memory.
struct Target {
  model::Parameter* param = nullptr;
  std::vector<float> value, m, v;
  int64_t filled = 0;  // elements placed (per state)
};

}  // namespace

int64_t MigrationPlan::NetworkBytes() const {
  int64_t total = 0;
  for (const MigrationMove& m : moves) {
    if (!m.local()) total += m.bytes();
  }
  return total;
}

int64_t MigrationPlan::SentBytes(int rank) const {
  int64_t total = 0;
  for (const MigrationMove& m : moves) {
    if (!m.local() && m.source == rank) total += m.bytes();
  }
  return total;
}

int64_t MigrationPlan::ReceivedBytes(int rank) const {
  int64_t total = 0;
  for (const MigrationMove& m : moves) {
    if (!m.local() && m.dest == rank) total += m.bytes();
  }
  return total;
}

model::StageLayout StageLayoutOf(const WorldLayout& layout, int r, int chunk) {
  const RankInfo& me = layout.rank(r);
  const spec::StagePlan& sp = layout.stage_of(r, chunk);
  model::StageLayout s;
  s.first_block = sp.first_block;
  s.num_blocks = sp.num_blocks;
  s.has_embedding = sp.has_embedding;
  s.has_head = sp.has_head;
  s.tp_rank = me.tp_rank;
  s.tp_degree = me.tp_degree;
  s.recompute = sp.recompute;
  return s;
}

std::vector<model::ParamInfo> RankParamInfos(const spec::ModelSpec& model,
                                             const WorldLayout& layout, int r) {
  std::vector<model::ParamInfo> out;
  for (int c = 0; c < layout.pipeline_of(r).chunks; ++c) {
    for (model::ParamInfo& p : model::StageParamInfos(model, StageLayoutOf(layout, r, c))) {
      out.push_back(std::move(p));
    }
  }
  return out;
}

Result<MigrationPlan> PlanMigration(const WorldLayout& from, const WorldLayout& to,
                                    const spec::ModelSpec& model,
                                    const TransferTimeFn& transfer_time) {
  if (from.size() != to.size() || from.devices() != to.devices()) {
    return Err(
        "{} -> {}: migration: the plans are laid out over different worlds ({} and {} "
        "ranks); build both layouts over the running world's devices",
        PlanName(from), PlanName(to), from.size(), to.size());
  }
  std::map<std::string, std::vector<Holder>> holders;
  for (const RankInfo& info : from.ranks()) {
    if (info.idle()) continue;
    for (model::ParamInfo& p : RankParamInfos(model, from, info.rank)) {
      std::string name = p.name;
      holders[name].push_back(Holder{info.rank, std::move(p)});
    }
  }
  MigrationPlan plan;
  plan.world_size = to.size();
  // Estimated seconds each rank spends sending so far.
  std::vector<double> busy(static_cast<size_t>(to.size()), 0.0);
  auto cost = [&](int source, int dest, int64_t bytes) {
    return transfer_time ? transfer_time(source, dest, bytes) : static_cast<double>(bytes);
  };
  for (const RankInfo& info : to.ranks()) {
    if (info.idle()) continue;
    for (const model::ParamInfo& p : RankParamInfos(model, to, info.rank)) {
      auto it = holders.find(p.name);
      if (it == holders.end()) {
        return Err("{} -> {}: migration: no rank holds '{}' under the old plan", PlanName(from),
                   PlanName(to), p.name);
      }
      const std::vector<Holder>& hs = it->second;
      const Shape full = p.FullShape();
      int dim = p.sharded() ? p.shard_dim : -1;
      for (const Holder& h : hs) {
        if (!(h.info.FullShape() == full)) {
          return Err(
              "{} -> {}: migration: '{}' has shape {} under the old plan and {} under the "
              "new one",
              PlanName(from), PlanName(to), p.name, h.info.FullShape().str(), full.str());
        }
        if (dim < 0 && h.info.sharded()) dim = h.info.shard_dim;
      }
      // The holder to take a piece from: the new holder itself when it qualifies, else the one
      // whose sends would finish first (the first, i.e. lowest rank, on a tie). `piece_bytes(h)`:
      // the bytes h would send, or -1 when h does not qualify.
      auto pick = [&](auto piece_bytes) -> const Holder* {
        const Holder* best = nullptr;
        double best_finish = 0.0;
        for (const Holder& h : hs) {
          const int64_t bytes = piece_bytes(h);
          if (bytes < 0) continue;
          if (h.rank == info.rank) return &h;
          const double finish = busy[static_cast<size_t>(h.rank)] + cost(h.rank, info.rank, bytes);
          if (best == nullptr || finish < best_finish) {
            best = &h;
            best_finish = finish;
          }
        }
        return best;
      };
      auto add = [&](const Holder& h, int d, int64_t begin, int64_t end, Shape shape) {
        MigrationMove m{p.name, h.rank, info.rank, d, begin, end, shape};
        if (!m.local()) busy[static_cast<size_t>(h.rank)] += cost(h.rank, info.rank, m.bytes());
        plan.moves.push_back(std::move(m));
      };
      const int64_t bytes_per_element = 3 * static_cast<int64_t>(sizeof(float));
      if (dim < 0) {
        const int64_t whole = bytes_per_element * full.numel();
        add(*pick([whole](const Holder&) { return whole; }), -1, 0, 0, full);
        continue;
      }
      const Range want = RangeOf(p, dim);
      const int64_t per_index = bytes_per_element * full.numel() / full[dim];
      for (int64_t x = want.begin; x < want.end;) {
        const Holder* h = pick([&](const Holder& c) -> int64_t {
          const Range r = RangeOf(c.info, dim);
          if (r.begin > x || x >= r.end) return -1;
          return per_index * (std::min(want.end, r.end) - x);
        });
        if (h == nullptr) {
          return Err(
              "{} -> {}: migration: no rank of the old plan holds '{}' at index {} of "
              "dimension {}",
              PlanName(from), PlanName(to), p.name, x, dim);
        }
        const int64_t end = std::min(want.end, RangeOf(h->info, dim).end);
        add(*h, dim, x, end, WithDim(full, dim, end - x));
        x = end;
      }
    }
  }
  return plan;
}

const StateSnapshot::Entry* StateSnapshot::Find(const std::string& name) const {
  for (const Entry& e : entries) {
    if (e.info.name == name) return &e;
  }
  return nullptr;
}

StateSnapshot SnapshotState(tensor::Backend& backend, const model::ParameterSet* params) {
  StateSnapshot s;
  if (params == nullptr) return s;
  s.entries.reserve(params->size());
  for (const model::Parameter& p : *params) {
    StateSnapshot::Entry e;
    e.info = p.info;
    const auto n = static_cast<size_t>(p.value.numel());
    e.value.resize(n);
    e.m.resize(n);
    e.v.resize(n);
    backend.CopyToHost(e.value.data(), p.value, p.value.bytes());
    backend.CopyToHost(e.m.data(), p.m, p.m.bytes());
    backend.CopyToHost(e.v.data(), p.v, p.v.bytes());
    s.entries.push_back(std::move(e));
  }
  return s;
}

Result<MigrationStats> Migrate(const MigrationPlan& plan, int rank, int64_t step,
                               comm::Communicator& world, tensor::Backend& backend,
                               const StateSnapshot& old_state, model::ParameterSet* new_params,
                               RankClock clock) {
  const Seconds start = clock.Now();
  MigrationStats stats;
  if (world.size() != plan.world_size || world.rank() != rank) {
    return Err("migration: the plan is for {} ranks, the communicator has {} (rank {} vs {})",
               plan.world_size, world.size(), world.rank(), rank);
  }
  // Every rank at the same optimizer step (max of step and of -step).
  Tensor steps = tensor::HostTensor(Shape{2}, DType::kF64);
  steps.data<double>()[0] = static_cast<double>(step);
  steps.data<double>()[1] = -static_cast<double>(step);
  MOTLEY_RETURN_IF_ERROR(
      world.AllReduce(steps, comm::ReduceOp::kMax).WithContext("migration: step check"));
  const double hi = steps.data<double>()[0], lo = -steps.data<double>()[1];
  if (hi != lo) {
    return Err("migration: the ranks are at different optimizer steps ({} to {})", lo, hi);
  }

  std::map<std::string, Target> targets;
  if (new_params != nullptr) {
    for (model::Parameter& p : *new_params) {
      const auto n = static_cast<size_t>(p.value.numel());
      Target& t = targets[p.name()];
      t.param = &p;
      t.value.assign(n, 0.0F);
      t.m.assign(n, 0.0F);
      t.v.assign(n, 0.0F);
    }
  }
  auto target_of = [&](const MigrationMove& m) -> Result<Target*> {
    auto it = targets.find(m.name);
    if (it == targets.end()) {
      return Err("migration: rank {} receives '{}' but its new stage has no such tensor", rank,
                 m.name);
    }
    return &it->second;
  };
  auto place = [](Target& t, const MigrationMove& m, const float* in) {
    const int64_t n = m.shape.numel();
    const model::ParamInfo& info = t.param->info;
    PlacePiece(info, t.value, m, in);
    PlacePiece(info, t.m, m, in + n);
    PlacePiece(info, t.v, m, in + 2 * n);
    t.filled += n;
  };

  // Message sizes (floats) per peer.
  const int size = world.size();
  std::vector<int64_t> send_floats(static_cast<size_t>(size), 0);
  std::vector<int64_t> recv_floats(static_cast<size_t>(size), 0);
  for (const MigrationMove& m : plan.moves) {
    if (m.local()) continue;
    if (m.source == rank) send_floats[static_cast<size_t>(m.dest)] += 3 * m.shape.numel();
    if (m.dest == rank) recv_floats[static_cast<size_t>(m.source)] += 3 * m.shape.numel();
  }
  std::vector<Tensor> recv_bufs(static_cast<size_t>(size));
  std::vector<Tensor> send_bufs(static_cast<size_t>(size));
  std::vector<comm::Request> requests;
  for (int q = 0; q < size; ++q) {
    const auto qi = static_cast<size_t>(q);
    if (recv_floats[qi] == 0) continue;
    recv_bufs[qi] = tensor::HostTensor(Shape{recv_floats[qi]}, DType::kF32);
    MOTLEY_ASSIGN_OR_RETURN(comm::Request r, world.IRecv(recv_bufs[qi], q, kMigrationTag));
    requests.push_back(std::move(r));
    ++stats.messages_received;
    stats.received_bytes += static_cast<int64_t>(recv_bufs[qi].bytes());
  }
  // Pack what this rank sends (and copy what it keeps).
  std::vector<int64_t> cursor(static_cast<size_t>(size), 0);
  std::vector<float> local;
  for (const MigrationMove& m : plan.moves) {
    if (m.source != rank) continue;
    const StateSnapshot::Entry* e = old_state.Find(m.name);
    if (e == nullptr) {
      return Err("migration: rank {} should send '{}' but held no such tensor under the old plan",
                 rank, m.name);
    }
    const int64_t n = m.shape.numel();
    float* out = nullptr;
    if (m.local()) {
      local.resize(static_cast<size_t>(3 * n));
      out = local.data();
    } else {
      const auto di = static_cast<size_t>(m.dest);
      if (!send_bufs[di].defined()) {
        send_bufs[di] = tensor::HostTensor(Shape{send_floats[di]}, DType::kF32);
      }
      out = send_bufs[di].data<float>() + cursor[di];
      cursor[di] += 3 * n;
    }
    ExtractPiece(e->info, e->value, m, out);
    ExtractPiece(e->info, e->m, m, out + n);
    ExtractPiece(e->info, e->v, m, out + 2 * n);
    if (m.local()) {
      MOTLEY_ASSIGN_OR_RETURN(Target * t, target_of(m));
      place(*t, m, out);
      stats.local_bytes += m.bytes();
    }
  }
  for (int q = 0; q < size; ++q) {
    const auto qi = static_cast<size_t>(q);
    if (send_floats[qi] == 0) continue;
    MOTLEY_ASSIGN_OR_RETURN(comm::Request r, world.ISend(send_bufs[qi], q, kMigrationTag));
    requests.push_back(std::move(r));
    ++stats.messages_sent;
    stats.sent_bytes += static_cast<int64_t>(send_bufs[qi].bytes());
  }
  for (comm::Request& r : requests) {
    MOTLEY_RETURN_IF_ERROR(world.Wait(r).WithContext(fmt::format("migration: rank {}", rank)));
  }
  // Unpack in the plan's order (the order the senders packed in).
  std::fill(cursor.begin(), cursor.end(), 0);
  for (const MigrationMove& m : plan.moves) {
    if (m.dest != rank || m.local()) continue;
    const auto si = static_cast<size_t>(m.source);
    MOTLEY_ASSIGN_OR_RETURN(Target * t, target_of(m));
    place(*t, m, recv_bufs[si].data<float>() + cursor[si]);
    cursor[si] += 3 * m.shape.numel();
  }
  for (auto& [name, t] : targets) {
    model::Parameter& p = *t.param;
    MOTLEY_CHECK(t.filled == p.value.numel(),
                 fmt::format("migration: '{}' on rank {} got {} of {} elements", name, rank,
                             t.filled, p.value.numel()));
    backend.CopyFromHost(p.value, t.value.data(), p.value.bytes());
    // A ZeRO-1 stage is built without these moments: they arrive whole and its next step shards
    // them (parallel/zero1.h).
    if (!p.m.defined()) p.m = backend.Empty(p.value.shape(), tensor::DType::kF32);
    if (!p.v.defined()) p.v = backend.Empty(p.value.shape(), tensor::DType::kF32);
    backend.CopyFromHost(p.m, t.m.data(), p.m.bytes());
    backend.CopyFromHost(p.v, t.v.data(), p.v.bytes());
  }
  stats.seconds = clock.Since(start);
  return stats;
}

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

uint64_t NameHash(std::string_view name) {  // FNV-1a, 64-bit
  uint64_t h = 0xCBF29CE484222325ULL;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001B3ULL;
  }
  return h;
}

// Adds the elements of one local tensor (of `info`) to the hash and the sum. kind: 0 value, 1 m,
// 2 v. Each element is hashed with its index in the full tensor.
void Accumulate(const model::ParamInfo& info, const std::vector<float>& data, uint64_t kind,
                uint64_t name_hash, uint64_t& hash, double& sum) {
  int64_t inner = 1, n_local = 1, n_full = 1, offset = 0;
  if (info.sharded()) {
    for (int i = info.shard_dim + 1; i < info.shape.rank(); ++i) inner *= info.shape[i];
    n_local = info.shape[info.shard_dim];
    n_full = info.full_shape[info.shard_dim];
    offset = info.shard_offset;
  }
  const int64_t block = n_local * inner;
  for (size_t l = 0; l < data.size(); ++l) {
    const auto li = static_cast<int64_t>(l);
    const int64_t g = info.sharded() ? ((li / block) * n_full + offset) * inner + li % block : li;
    uint32_t bits = 0;
    std::memcpy(&bits, &data[l], sizeof(bits));
    const uint64_t where = SplitMix64(name_hash ^ SplitMix64(static_cast<uint64_t>(g) * 3 + kind));
    hash += SplitMix64(where ^ bits);
    sum += static_cast<double>(data[l]);
  }
}

}  // namespace

Result<std::vector<StateChecksum>> ChecksumState(const WorldLayout& layout, int rank,
                                                 comm::Communicator& world,
                                                 tensor::Backend& backend,
                                                 const model::ParameterSet* params) {
  // Per rank: pipeline, hash low and high 32 bits, value / m / v sums, elements.
  constexpr int64_t kFields = 7;
  Tensor mine = tensor::HostTensor(Shape{kFields}, DType::kF64);
  double* f = mine.data<double>();
  std::fill(f, f + kFields, 0.0);
  const RankInfo& me = layout.rank(rank);
  f[0] = me.pipeline;
  if (!me.idle() && params != nullptr) {
    uint64_t hash = 0;
    StateSnapshot snap = SnapshotState(backend, params);
    for (const StateSnapshot::Entry& e : snap.entries) {
      // Replicated tensors count once per replica (TP rank 0); shards from every TP rank.
      if (!e.info.sharded() && me.tp_rank != 0) continue;
      const uint64_t h = NameHash(e.info.name);
      Accumulate(e.info, e.value, 0, h, hash, f[3]);
      Accumulate(e.info, e.m, 1, h, hash, f[4]);
      Accumulate(e.info, e.v, 2, h, hash, f[5]);
      f[6] += static_cast<double>(e.value.size());
    }
    f[1] = static_cast<double>(hash & 0xFFFFFFFFULL);
    f[2] = static_cast<double>(hash >> 32);
  }
  Tensor all = tensor::HostTensor(Shape{kFields * world.size()}, DType::kF64);
  const std::vector<int64_t> counts(static_cast<size_t>(world.size()), kFields);
  MOTLEY_RETURN_IF_ERROR(world.AllGather(all, mine, counts).WithContext("state checksum"));
  std::vector<StateChecksum> out(layout.plan().pipelines.size());
  const double* a = all.data<double>();
  for (int q = 0; q < world.size(); ++q) {
    const double* v = a + static_cast<size_t>(q) * kFields;
    if (v[0] < 0) continue;
    StateChecksum& c = out.at(static_cast<size_t>(v[0]));
    c.hash += static_cast<uint64_t>(v[1]) | (static_cast<uint64_t>(v[2]) << 32);
    c.value_sum += v[3];
    c.m_sum += v[4];
    c.v_sum += v[5];
    c.elements += static_cast<int64_t>(v[6]);
  }
  return out;
}

}  // namespace motley::parallel
