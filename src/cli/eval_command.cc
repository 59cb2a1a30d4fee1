// `motley eval RUN.yaml --checkpoint DIR [--data FILE] [--batches N]`: the mean loss and
// perplexity of a checkpoint (motley's, written under any plan, or a Hugging Face folder) for the
// run file's model, on the validation split of train.data or on a token file (src/train/
// evaluate.h). Writes nothing. The result goes to stdout (one JSON object with --json); errors
// (a run file, a checkpoint for another model, a data file) to stderr with the exit code of their
// StatusCode (docs/exit-codes.md).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/fail.h"
#include "core/thread_count.h"
#include "spec/run_file.h"
#include "train/evaluate.h"
#include "train/trainer.h"

namespace motley::cli {
namespace {

struct EvalArgs {
  std::string run_path;
  train::EvalOptions options;
  int threads = 0;
  bool json = false;
};

int RunEval(const EvalArgs& args) {
  Result<spec::RunFile> run = spec::LoadRunFile(args.run_path);
  if (!run.ok()) return Fail("eval", run.status());
  train::EvalOptions options = args.options;
  options.threads = ThreadsOrAllCores(args.threads > 0 ? args.threads : run->train.threads);
  Result<train::EvalResult> r = train::EvaluateCheckpoint(run->model, run->train, options);
  if (!r.ok()) return Fail("eval", r.status().WithContext(args.run_path));
  if (args.json) {
    nlohmann::ordered_json j;
    j["checkpoint"] = r->checkpoint;
    j["data"] = r->data_source;
    j["batches"] = r->batches;
    j["global_batch"] = r->global_batch;
    j["seq_len"] = r->seq_len;
    j["tokens"] = r->tokens;
    j["loss"] = r->loss;
    j["perplexity"] = r->perplexity;
    fmt::print("{}\n", j.dump());
    return 0;
  }
  fmt::print(
      "checkpoint: {}\n"
      "data: {}: {} batch(es) of {} x {} tokens ({} tokens)\n"
      "loss {:.6f} nats/token, perplexity {:.4f}\n",
      r->checkpoint, r->data_source, r->batches, r->global_batch, r->seq_len, r->tokens, r->loss,
      r->perplexity);
  return 0;
}

}  // namespace

void AddEvalCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval",
      "Mean loss and perplexity of a checkpoint (motley's, any plan, or a Hugging Face folder) "
      "for the run file's model, on the validation split or a token file; writes nothing.\n"
      "Example: motley eval examples/runs/tiny.yaml --checkpoint ckpt --batches 8");
  cmd->add_option("run", args->run_path, "Run file (YAML) whose model the checkpoint holds")
      ->type_name("RUN.yaml")
      ->required();
  cmd->add_option("--checkpoint", args->options.checkpoint,
                  "A checkpoint folder (step-N), a checkpoint root (its latest checkpoint), or a "
                  "Hugging Face folder (config.json + safetensors)")
      ->type_name("DIR")
      ->required();
  cmd->add_option("--data", args->options.data_path,
                  "Evaluate on this token file instead of the validation split of train.data")
      ->type_name("FILE");
  cmd->add_option("--data-format", args->options.data_format,
                  "Format of --data: text, u16 or u32 (default: train.data.format)")
      ->check(CLI::IsMember({"text", "u16", "u32"}));
  cmd->add_option("--batches", args->options.batches,
                  "Global batches of train.global_batch x train.seq_len tokens, spread evenly "
                  "over the data (default: train.val_batches)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", args->threads, "CPU threads (default: train.threads)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", args->json, "Print one JSON object (loss, perplexity, tokens, ...)");
  cmd->callback([args, &exit_code] { exit_code = RunEval(*args); });
}

}  // namespace motley::cli
