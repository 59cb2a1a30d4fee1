// `motley profile RUN.yaml -o PROFILE.json [--micro-batches 1,2,4] [--tp 1] [--device-type NAME]
// [--threads N] [--repeats N] [--companions N]`:
// measures one block's, the embedding's and the head's forward and
// backward times of the run's model on this machine's CPU backend (train/profiler.h) for each
// micro-batch size at the run's sequence length, prints one progress line per point, and writes
// the profile file the predictor reads (docs/formats/profile.md; `--profile` of motley plan,
// predict and simulate). The file is read back and checked against the model before the command
// reports success. Errors go to stderr with exit code 1.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "cli/cli_help.h"
#include "cli/commands.h"
#include "cli/fail.h"
#include "cli/validators.h"
#include "core/thread_count.h"
#include "perf/profile.h"
#include "spec/limits.h"
#include "spec/run_file.h"
#include "train/memory_check.h"
#include "train/profiler.h"
#include "train/trainer.h"

namespace motley::cli {
namespace {

struct ProfileArgs {
  std::string run_path;
  std::string out_path;
  std::vector<int64_t> micro_batches = {1, 2, 4};
  int tp = 1;
  std::string device_type;
  int threads = 0;
  int repeats = 7;
  int companions = 0;
};

Status RunProfileOrError(const ProfileArgs& args) {
  MOTLEY_ASSIGN_OR_RETURN(spec::RunFile run, spec::LoadRunFile(args.run_path));
  std::string type = args.device_type;
  if (type.empty()) {
    if (run.cluster.device_types.empty()) return Err("{}: the cluster has no device types", args.run_path);
    type = run.cluster.device_types.front().name;
  } else if (run.cluster.FindDeviceType(type) == nullptr) {
    return Err(StatusCode::kInvalidArgument,
               "--device-type: '{}' is not a device type of cluster '{}'", type, run.cluster.name);
  }
  train::ProfileOptions options;
  options.micro_batch_sizes = args.micro_batches;
  options.seq_len = run.train.seq_len;
  options.tp = args.tp;
  options.threads = ThreadsOrAllCores(args.threads > 0 ? args.threads : run.train.threads);
  options.repeats = args.repeats;
  options.companions = args.companions;
  options.progress = [](const std::string& line) {
    fmt::print("  {}\n", line);
    std::fflush(stdout);
  };
  fmt::print("motley profile: model '{}' (hidden {}, {} heads, F {}, V {}), T={}, tp {}, {} CPU "
             "thread(s), {} micro-batch size(s), device type '{}', {} companion(s)\n",
             run.model.name, run.model.hidden, run.model.num_heads, run.model.ffn_hidden,
             run.model.vocab_size, options.seq_len, options.tp, options.threads,
             options.micro_batch_sizes.size(), type, options.companions);
  std::fflush(stdout);
  // Before anything is allocated: one block with the embedding and the head at the largest size,
  // on this host (train/memory_check.h), for the timed copy and each companion. (A TP degree that
  // does not split the model is ProfileModel's error.)
  if (run.model.SplitsForTensorParallel(args.tp)) {
    model::StageLayout layout{0, 1, true, true};
    layout.tp_degree = args.tp;
    int64_t largest = 0;
    for (const int64_t b : options.micro_batch_sizes) largest = std::max(largest, b);
    MOTLEY_ASSIGN_OR_RETURN(
        train::StageMemory need,
        train::StageMemoryAtLeast(run.model, layout, largest, run.train.seq_len));
    need.parameter_bytes *= 1 + options.companions;
    need.activation_bytes *= 1 + options.companions;
    MOTLEY_RETURN_IF_ERROR(train::CheckFits(
        fmt::format("this host (profiling micro-batch {} x {})", largest, run.train.seq_len), need,
        0, static_cast<double>(train::HostMemoryBytes())));
  }
  MOTLEY_ASSIGN_OR_RETURN(std::vector<train::ProfilePoint> points,
                          train::ProfileModel(run.model, options));
  perf::Profile profile;
  profile.hidden = run.model.hidden;
  profile.num_heads = run.model.num_heads;
  profile.num_kv_heads = run.model.num_kv_heads;
  profile.ffn_hidden = run.model.ffn_hidden;
  profile.vocab_size = run.model.vocab_size;
  profile.precision = "fp32";
  profile.comment = fmt::format(
      "motley profile of {} on the CPU backend, {} thread(s) (OpenMP and OpenBLAS), {} "
      "companion(s), median of {}",
      args.run_path, options.threads, options.companions, options.repeats);
  perf::DeviceProfile device;
  device.device_type = type;
  for (const train::ProfilePoint& p : points) {
    perf::ProfileEntry e;
    e.tp = p.tp;
    e.micro_batch_size = p.micro_batch_size;
    e.seq_len = p.seq_len;
    e.block_forward_s = p.block.forward_s;
    e.block_backward_s = p.block.backward_s;
    e.embedding_forward_s = p.embedding.forward_s;
    e.embedding_backward_s = p.embedding.backward_s;
    e.head_forward_s = p.head.forward_s;
    e.head_backward_s = p.head.backward_s;
    device.entries.push_back(e);
  }
  MOTLEY_ASSIGN_OR_RETURN(device.step_s_per_param, train::ProfileStepPerParam(run.model, options));
  fmt::print("  per-step work (zero grads, norm, AdamW): {:.3f} ns per parameter\n",
             1e9 * device.step_s_per_param);
  profile.devices.push_back(std::move(device));
  MOTLEY_RETURN_IF_ERROR(perf::SaveProfile(profile, args.out_path));
  // Read it back as the predictor will.
  MOTLEY_ASSIGN_OR_RETURN(perf::Profile back, perf::LoadProfile(args.out_path));
  MOTLEY_RETURN_IF_ERROR(perf::CheckProfileMatchesModel(back, run.model));
  fmt::print("wrote {} ({} entries)\n", args.out_path, points.size());
  return Status::Ok();
}

}  // namespace

void AddProfileCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ProfileArgs>();
  CLI::App* cmd = app.add_subcommand(
      "profile",
      "Measure per-block forward and backward times (and the embedding's and the head's) of the "
      "run's model on this machine's CPU backend for a grid of micro-batch sizes; write the "
      "profile file that motley plan/predict/simulate --profile read.");
  cmd->add_option("run", args->run_path, "Run file (YAML): the model and the sequence length")
      ->type_name("RUN.yaml")
      ->required();
  cmd->add_option("-o,--output", args->out_path, "Profile file to write (JSON)")
      ->type_name("PROFILE.json")
      ->required();
  cmd->add_option("--micro-batches", args->micro_batches,
                  "Micro-batch sizes to measure, comma-separated (default 1,2,4)")
      ->delimiter(',')
      ->check(IntRange(1, spec::kMaxTokensPerStep))
      ->type_name("B,...");
  cmd->add_option("--tp", args->tp,
                  "TP degree: time one rank's shard, no communication (default 1)")
      ->check(IntRange(1, spec::kMaxHeads))
      ->type_name("T");
  cmd->add_option("--device-type", args->device_type,
                  "Device type name the times are filed under (default: the cluster's first)")
      ->type_name("NAME");
  cmd->add_option("--threads", args->threads, "CPU threads (default: train.threads)")
      ->check(IntRange(1, spec::kMaxThreads))
      ->type_name("N");
  cmd->add_option("--repeats", args->repeats,
                  "Timed passes per point; the median is kept (default 7)")
      ->check(IntRange(1, 1000000))
      ->type_name("N");
  cmd->add_option("--companions", args->companions,
                  "Threads that run the same work untimed beside the timed one, as the other "
                  "ranks of a plan load the machine (default 0; 1 for plans on both cores of a "
                  "2-core machine)")
      ->check(IntRange(0, spec::kMaxThreads))
      ->type_name("N");
  SetExamples(cmd, {"motley profile examples/runs/small.yaml -o profile.json && motley predict "
                    "examples/runs/small.yaml plan.json --profile profile.json"});
  cmd->callback([args, &exit_code] {
    const Status s = RunProfileOrError(*args);
    exit_code = s.ok() ? 0 : Fail("profile", s);
  });
}

}  // namespace motley::cli
