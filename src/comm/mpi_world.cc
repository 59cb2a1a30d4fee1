// See mpi_world.h.
#include "comm/mpi_world.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/core.h>

#include "comm/ring_communicator.h"
#include "comm/transport.h"

namespace motley::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kHeartbeatTag = 1;
constexpr int kAbortTag = 2;
constexpr int kLostTag = 3;  // "<world rank>|<reason>": a peer found silent

std::string MpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

struct MpiRequest : TransportRequest {
  uint64_t context = 0;
  MPI_Request header = MPI_REQUEST_NULL;
  MPI_Request payload = MPI_REQUEST_NULL;
  Envelope expect;
  void* data = nullptr;
  bool has_reduce = false;
  ReduceSpec reduce;
  std::unique_ptr<std::vector<char>> staging;  // receive buffer of a reducing receive
  bool header_checked = false;
  bool done = false;
};

class MpiTransport final : public Transport {
 public:
  MpiTransport(const CommOptions& options, bool threaded) : options_(options) {
    MPI_Comm_dup(MPI_COMM_WORLD, &data_);
    MPI_Comm_dup(MPI_COMM_WORLD, &control_);
    MPI_Comm_dup(MPI_COMM_WORLD, &survivors_);  // the channel of survivor contexts
    MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(survivors_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(data_, &rank_);
    MPI_Comm_size(data_, &size_);
    int flag = 0;
    int* ub = nullptr;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    tag_ub_ = flag != 0 && ub != nullptr ? *ub : 32767;
    contexts_[1] = data_;
    last_heard_ = std::vector<std::atomic<int64_t>>(static_cast<size_t>(size_));
    for (auto& t : last_heard_) t = NowNs();
    if (threaded) {
      heartbeat_ = std::thread([this] { HeartbeatLoop(); });
      // Let the thread make its first MPI calls (and first beat) before the world is used: the
      // first calls from a new thread can be slow, and a peer must not look silent meanwhile.
      const auto until = Clock::now() + std::chrono::seconds(10);
      while (!first_beat_done_ && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }

  ~MpiTransport() override {
    stop_ = true;
    if (heartbeat_.joinable()) heartbeat_.join();
    for (auto& [ctx, comm] : contexts_) {
      if (ctx != 1 && survivor_contexts_.count(ctx) == 0) MPI_Comm_free(&comm);
    }
    MPI_Comm_free(&data_);
    MPI_Comm_free(&control_);
    MPI_Comm_free(&survivors_);
  }

  int world_rank() const override { return rank_; }
  int world_size() const override { return size_; }
  const char* backend_name() const override { return "mpi"; }
  bool CanAccess(const tensor::Device& device) const override { return device.host_addressable(); }

  Result<TransportRequestPtr> PostSend(int dst, uint64_t context, int64_t tag, const void* data,
                                       const Envelope& envelope) override {
    MOTLEY_ASSIGN_OR_RETURN(auto target, CommOf(context, dst));
    const auto [comm, peer] = target;
    auto req = std::make_shared<MpiRequest>();
    req->is_send = true;
    req->peer = dst;
    req->context = context;
    req->envelope = envelope;
    const int mtag = MpiTag(tag);
    int rc = MPI_Isend(&req->envelope, sizeof(Envelope), MPI_BYTE, peer, mtag, comm, &req->header);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Isend(data, static_cast<int>(envelope.bytes), MPI_BYTE, peer, mtag, comm,
                     &req->payload);
    }
    if (rc != MPI_SUCCESS) return Err("MPI_Isend to world rank {}: {}", dst, MpiError(rc));
    return TransportRequestPtr(req);
  }

  Result<TransportRequestPtr> PostRecv(int src, uint64_t context, int64_t tag, void* data,
                                       const Envelope& expect, const ReduceSpec* reduce) override {
    MOTLEY_ASSIGN_OR_RETURN(auto source, CommOf(context, src));
    const auto [comm, peer] = source;
    auto req = std::make_shared<MpiRequest>();
    req->peer = src;
    req->context = context;
    req->expect = expect;
    req->data = data;
    void* target = data;
    if (reduce != nullptr) {
      req->has_reduce = true;
      req->reduce = *reduce;
      req->staging = TakeScratch(expect.bytes);
      target = req->staging->data();
    }
    const int mtag = MpiTag(tag);
    int rc = MPI_Irecv(&req->envelope, sizeof(Envelope), MPI_BYTE, peer, mtag, comm, &req->header);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Irecv(target, static_cast<int>(expect.bytes), MPI_BYTE, peer, mtag, comm,
                     &req->payload);
    }
    if (rc != MPI_SUCCESS) return Err("MPI_Irecv from world rank {}: {}", src, MpiError(rc));
    return TransportRequestPtr(req);
  }

  Status WaitAll(const std::vector<TransportRequestPtr>& requests, Deadline deadline,
                 const WaitInfo& info) override {
    std::vector<MpiRequest*> reqs;
    for (const auto& r : requests) reqs.push_back(static_cast<MpiRequest*>(r.get()));
    const std::string where = fmt::format("{} on group '{}'", info.op,
                                          info.group != nullptr ? *info.group : std::string("?"));
    auto sleep = std::chrono::microseconds(10);
    for (int spins = 0;; ++spins) {
      bool all = true;
      for (MpiRequest* r : reqs) {
        Status s = Progress(*r);
        if (!s.ok()) return Fail(reqs, s.WithContext(where));
        all = all && r->done;
      }
      if (all) return Status::Ok();
      if (heartbeat_.joinable() == false) DrainControl();
      if (Status a = abort_status(); !a.ok()) return Fail(reqs, a.WithContext(where));
      for (MpiRequest* r : reqs) {
        if (Status c = context_status(r->context); !c.ok()) {
          return Fail(reqs, c.WithContext(where));
        }
      }
      const auto now = Clock::now();
      // Judge peers only while this process's own heartbeat thread runs on time: a process
      // that was itself stopped (SIGSTOP) first catches up with the news it missed.
      const bool self_fresh =
          static_cast<double>(NowNs() - self_beat_.load()) * 1e-9 < options_.heartbeat_interval_s;
      for (MpiRequest* r : reqs) {
        if (r->done || !heartbeat_.joinable() || !self_fresh) continue;
        const double silent = SecondsSince(r->peer);
        if (silent > options_.silence_timeout_s) {
          DeclareLost(r->peer, fmt::format("world rank {} is silent (no heartbeat for {:.2f} s; "
                                           "found by world rank {})",
                                           r->peer, silent, rank_));
          return Fail(reqs, Err(StatusCode::kUnavailable,
                                "{}: peer lost: {} is silent (no heartbeat for {:.2f} s)", where,
                                DescribePeer(info, r->peer), silent));
        }
      }
      if (now >= deadline) {
        int peer = -1;
        for (MpiRequest* r : reqs) {
          if (!r->done) { peer = r->peer; break; }
        }
        return Fail(reqs, Err("{}: deadline passed waiting for {}: {}", where,
                              DescribePeer(info, peer),
                              heartbeat_.joinable()
                                  ? fmt::format("it is alive (heartbeat {:.2f} s ago) but slow",
                                                SecondsSince(peer))
                                  : std::string("no heartbeat thread, liveness unknown")));
      }
      if (spins > 16) {  // back-off sleeps instead of a spinning wait
        std::this_thread::sleep_for(sleep);
        sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
      }
    }
  }

  Status CreateContext(uint64_t context, const std::vector<int>& members) override {
    MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    MPI_Comm_group(data_, &world_group);
    MPI_Group_incl(world_group, static_cast<int>(members.size()), members.data(), &group);
    MPI_Comm comm = MPI_COMM_NULL;
    const int rc = MPI_Comm_create_group(data_, group, static_cast<int>(context % 32768), &comm);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    if (rc != MPI_SUCCESS) return Err("MPI_Comm_create_group: {}", MpiError(rc));
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    std::lock_guard<std::mutex> lock(mu_);
    contexts_[context] = comm;
    members_[context] = members;
    return Status::Ok();
  }

  void Abort(const std::string& reason) override {
    const std::string text = fmt::format("world rank {} called Abort: {}", rank_, reason);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return;
      aborted_ = true;
      abort_reason_ = text;
    }
    TellEveryPeer(text, kAbortTag);
  }

  Status abort_status() const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_) return Status::Ok();
    return Err("aborted: {}", abort_reason_);
  }

  std::vector<int> lost_ranks() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return std::vector<int>(lost_.begin(), lost_.end());
  }

  Status context_status(uint64_t context) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (lost_.count(rank_) != 0) {
      return Err(StatusCode::kUnavailable, "this rank (world rank {}) was declared lost: {}", rank_,
                 lost_reason_);
    }
    if (lost_.empty() || survivor_contexts_.count(context) != 0) return Status::Ok();
    return Err(StatusCode::kUnavailable, "peer lost: {}", lost_reason_);
  }

  Status OpenSurvivorContext(uint64_t context, const std::vector<int>& members) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (int m : members) {
      if (lost_.count(m) != 0) return Err("world rank {} is lost", m);
    }
    survivor_contexts_.insert(context);
    contexts_[context] = survivors_;
    members_[context] = members;
    return Status::Ok();
  }

 private:
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
  }
  double SecondsSince(int peer) const {
    return static_cast<double>(NowNs() - last_heard_[static_cast<size_t>(peer)].load()) * 1e-9;
  }
  int MpiTag(int64_t tag) const {
    if (tag <= kMaxUserTag) return static_cast<int>(tag);
    const int64_t span = static_cast<int64_t>(tag_ub_) - kMaxUserTag;
    return static_cast<int>(kMaxUserTag + 1 + (tag - kMaxUserTag - 1) % span);
  }
  // The MPI communicator of `context` and the rank of `world_rank` in it.
  Result<std::pair<MPI_Comm, int>> CommOf(uint64_t context, int world_rank) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return Err("aborted: {}", abort_reason_);
    if (world_rank < 0 || world_rank >= size_) {
      return Err("world rank {} out of range [0, {})", world_rank, size_);
    }
    auto it = contexts_.find(context);
    if (it == contexts_.end()) return Err("mpi: unknown communicator context {:x}", context);
    if (context == 1) return std::make_pair(it->second, world_rank);
    const std::vector<int>& m = members_[context];
    if (survivor_contexts_.count(context) != 0) {  // on a dup of the world: world ranks
      if (std::find(m.begin(), m.end(), world_rank) == m.end()) {
        return Err("world rank {} is not among the survivors", world_rank);
      }
      return std::make_pair(it->second, world_rank);
    }
    auto pos = std::find(m.begin(), m.end(), world_rank);
    if (pos == m.end()) return Err("world rank {} is not in this group", world_rank);
    return std::make_pair(it->second, static_cast<int>(pos - m.begin()));
  }

  Status Progress(MpiRequest& r) {
    if (r.done) return Status::Ok();
    int flag = 0;
    MPI_Status status;
    if (!r.header_checked) {
      int rc = MPI_Test(&r.header, &flag, &status);
      if (rc != MPI_SUCCESS) return Err("MPI_Test: {}", MpiError(rc));
      if (flag == 0) return Status::Ok();
      r.header_checked = true;
      if (!r.is_send) MOTLEY_RETURN_IF_ERROR(CheckEnvelope(r.expect, r.envelope, r.peer));
    }
    // (status.MPI_ERROR is not set by single-completion calls; errors come back as rc.)
    int rc = MPI_Test(&r.payload, &flag, &status);
    if (rc != MPI_SUCCESS) {
      return Err("payload {} world rank {}: {}", r.is_send ? "to" : "from", r.peer, MpiError(rc));
    }
    if (flag == 0) return Status::Ok();
    if (r.has_reduce && r.expect.bytes > 0) {
      MOTLEY_RETURN_IF_ERROR(ReduceInto(r.data, r.staging->data(), r.expect.bytes, r.reduce));
    }
    if (r.staging) scratch_.push_back(std::move(r.staging));
    r.done = true;
    return Status::Ok();
  }

  // Reducing receives land in reused buffers: no allocation or page faults per step.
  std::unique_ptr<std::vector<char>> TakeScratch(size_t bytes) {
    std::unique_ptr<std::vector<char>> buf;
    if (!scratch_.empty()) {
      buf = std::move(scratch_.back());
      scratch_.pop_back();
    } else {
      buf = std::make_unique<std::vector<char>>();
    }
    if (buf->size() < bytes) buf->resize(bytes);
    return buf;
  }

  Status Fail(const std::vector<MpiRequest*>& reqs, const Status& error) {
    for (MpiRequest* r : reqs) {
      for (MPI_Request* m : {&r->header, &r->payload}) {
        if (*m == MPI_REQUEST_NULL) continue;
        if (!r->is_send) MPI_Cancel(m);
        MPI_Request_free(m);
      }
      r->done = true;
    }
    return error;
  }

  void DrainControl() {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, control_, &flag, &st) != MPI_SUCCESS || !flag) {
        return;
      }
      int count = 0;
      MPI_Get_count(&st, MPI_CHAR, &count);
      std::string text(static_cast<size_t>(count), '\0');
      MPI_Recv(text.data(), count, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, control_,
               MPI_STATUS_IGNORE);
      last_heard_[static_cast<size_t>(st.MPI_SOURCE)] = NowNs();
      if (st.MPI_TAG == kLostTag) {
        const size_t bar = text.find('|');
        const int lost = bar == std::string::npos ? -1 : std::atoi(text.substr(0, bar).c_str());
        // A rank told it was declared lost (it was stopped, and runs again) is out of the job.
        if (lost >= 0 && lost < size_) MarkLost(lost, text.substr(bar + 1));
      }
      if (st.MPI_TAG == kAbortTag) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!aborted_) {
          aborted_ = true;
          abort_reason_ = text;
        }
      }
    }
  }

  void HeartbeatLoop() {
    std::vector<MPI_Request> beats;
    char byte = 0;
    auto next = Clock::now();
    while (!stop_) {
      const int64_t now = NowNs();
      if (static_cast<double>(now - self_beat_.load()) * 1e-9 > 2.0 * options_.heartbeat_interval_s) {
        // This process was stopped or starved: what it missed is not the peers' silence, so
        // every peer gets a fresh silence_timeout_s to be heard again.
        for (auto& t : last_heard_) t = now;
      }
      DrainControl();
      self_beat_ = NowNs();
      if (Clock::now() >= next) {
        std::erase_if(beats, [](MPI_Request& r) {
          int flag = 0;
          MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
          return flag != 0;
        });
        for (int p = 0; p < size_; ++p) {
          if (p == rank_) continue;
          MPI_Request r = MPI_REQUEST_NULL;
          MPI_Isend(&byte, 0, MPI_CHAR, p, kHeartbeatTag, control_, &r);
          beats.push_back(r);
        }
        next += std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(options_.heartbeat_interval_s));
        first_beat_done_ = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (MPI_Request& r : beats) MPI_Request_free(&r);
  }

  // Records `peer` as lost (the first reason is kept); true when it was not known before.
  bool MarkLost(int peer, const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    if (lost_.count(peer) != 0) return false;
    if (lost_.empty()) lost_reason_ = reason;
    lost_.insert(peer);
    return true;
  }

  // A peer found silent here: recorded, and every other rank is told (so that its waits fail at
  // once, naming the lost rank, instead of at their deadlines); the lost rank too, should it run
  // again (a stopped process that is continued): it is then out of the job.
  void DeclareLost(int peer, const std::string& reason) {
    if (!MarkLost(peer, reason)) return;
    TellEveryPeer(fmt::format("{}|{}", peer, reason), kLostTag);
  }

  // Sends `text` to every other rank on the control communicator with `tag`. Small messages go
  // out eagerly: it polls the sends for up to a second, then lets go of those still pending (a
  // lost peer never receives).
  void TellEveryPeer(const std::string& text, int tag) {
    std::vector<MPI_Request> sent;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      MPI_Request r = MPI_REQUEST_NULL;
      MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_CHAR, p, tag, control_, &r);
      sent.push_back(r);
    }
    const auto until = Clock::now() + std::chrono::seconds(1);
    for (MPI_Request& r : sent) {
      int flag = 0;
      while (MPI_Test(&r, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag == 0 &&
             Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if (flag == 0) MPI_Request_free(&r);
    }
  }

  CommOptions options_;
  MPI_Comm data_ = MPI_COMM_NULL;
  MPI_Comm control_ = MPI_COMM_NULL;
  MPI_Comm survivors_ = MPI_COMM_NULL;
  std::set<int> lost_;                    // guarded by mu_
  std::string lost_reason_;               // the first loss, for every failed operation
  std::set<uint64_t> survivor_contexts_;  // opened after a loss; they stay usable
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<std::vector<char>>> scratch_;
  std::map<uint64_t, MPI_Comm> contexts_;
  std::map<uint64_t, std::vector<int>> members_;  // context -> world ranks in its rank order
  bool aborted_ = false;
  std::string abort_reason_;
  std::vector<std::atomic<int64_t>> last_heard_;
  std::atomic<int64_t> self_beat_{NowNs()};  // last run of this process's heartbeat thread
  std::atomic<bool> stop_{false};
  std::atomic<bool> first_beat_done_{false};
  std::thread heartbeat_;
};

}  // namespace

Result<std::unique_ptr<Communicator>> MpiWorld::Connect(int* argc, char*** argv,
                                                        CommOptions options, Emulation emulation) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized == 0) {
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      return Err("MPI_Init_thread failed");
    }
  } else {
    MPI_Query_thread(&provided);
  }
  return MakeRingWorld(std::make_shared<MpiTransport>(options, provided == MPI_THREAD_MULTIPLE),
                       options, emulation);
}

void MpiWorld::AbortJob(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; in case an implementation does
}

void MpiWorld::Finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized == 0) MPI_Finalize();
}

}  // namespace motley::comm
