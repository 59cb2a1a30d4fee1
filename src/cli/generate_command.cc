// `motley generate RUN.yaml --checkpoint DIR --prompt TEXT [--tokens N] [--temperature T]
// [--top-k K] [--seed S] [--threads N]`: samples text from a checkpoint (any plan wrote it) or a
// Hugging Face folder with the run file's model (src/train/generate.h): by default at temperature
// 0.8 among the 40 most likely bytes; `--temperature 0` is greedy. The text (prompt + sampled
// bytes) goes to stdout, the load message to stderr; errors (unreadable run file, a checkpoint that
// does not verify or is for another model) to stderr with the exit code of their StatusCode.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/core.h>

#include "cli/cli_help.h"
#include "cli/commands.h"
#include "cli/fail.h"
#include "cli/validators.h"
#include "core/thread_count.h"
#include "spec/limits.h"
#include "spec/run_file.h"
#include "train/generate.h"
#include "train/trainer.h"

namespace motley::cli {
namespace {

// --tokens: 1Mi sampled tokens (a megabyte of text from the byte tokenizer).
constexpr int64_t kMaxGeneratedTokens = int64_t{1} << 20;
// --temperature: logits / T; above 100 sampling is uniform to within 1% for logits within +-1.
constexpr double kMaxTemperature = 100.0;

struct GenerateArgs {
  std::string run_path;
  std::string checkpoint;
  std::string prompt;
  int64_t tokens = 200;
  float temperature = 0.8F;
  int64_t top_k = 40;
  uint64_t seed = 0;
  int threads = 0;
};

int RunGenerate(const GenerateArgs& args) {
  Result<spec::RunFile> run = spec::LoadRunFile(args.run_path);
  if (!run.ok()) {
    return Fail("generate", run.status());
  }
  train::GenerateOptions options;
  options.prompt = args.prompt;
  options.max_new_tokens = args.tokens;
  options.temperature = args.temperature;
  options.top_k = args.top_k;
  options.seed = args.seed;
  const int threads = ThreadsOrAllCores(args.threads > 0 ? args.threads : run->train.threads);
  std::string loaded;
  Result<std::string> text =
      train::GenerateFromCheckpoint(run->model, args.checkpoint, options, threads, &loaded);
  if (!text.ok()) {
    return Fail("generate", text.status());
  }
  fmt::print(stderr, "motley generate: loaded {}\n", loaded);  // stdout holds only the text
  fmt::print("{}\n", *text);
  return 0;
}

}  // namespace

void AddGenerateCommand(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Sample text from a checkpoint with the run file's model: the prompt's bytes, then up to "
      "--tokens byte tokens drawn at --temperature among the --top-k most likely (greedy with "
      "--temperature 0).");
  cmd->add_option("run", args->run_path, "Run file (YAML) whose model the checkpoint holds")
      ->type_name("RUN.yaml")
      ->required();
  cmd->add_option("--checkpoint", args->checkpoint,
                  "A checkpoint folder (step-N), a checkpoint root (its latest checkpoint), or a "
                  "Hugging Face folder (config.json + safetensors)")
      ->type_name("DIR")
      ->required();
  cmd->add_option("--prompt", args->prompt, "Text to continue (non-empty)")
      ->type_name("TEXT")
      ->required();
  cmd->add_option("--tokens", args->tokens, "Tokens to sample (default 200)")
      ->check(IntRange(0, kMaxGeneratedTokens))
      ->type_name("N");
  cmd->add_option("--temperature", args->temperature,
                  "Softmax temperature (default 0.8); 0 picks the most likely token (greedy)")
      ->check(FiniteRange(0, kMaxTemperature))
      ->type_name("T");
  cmd->add_option("--top-k", args->top_k,
                  "Draw among the K most likely tokens only (default 40; 0: all)")
      ->check(IntRange(0, spec::kMaxVocab))
      ->type_name("K");
  cmd->add_option("--seed", args->seed, "Seed of the sampling stream (temperature > 0)")
      ->type_name("S");
  cmd->add_option("--threads", args->threads, "CPU threads (default: train.threads)")
      ->check(IntRange(1, spec::kMaxThreads))
      ->type_name("N");
  SetExamples(cmd, {"motley train examples/runs/tiny.yaml --checkpoint-dir /tmp/ckpt && motley "
                    "generate examples/runs/tiny.yaml --checkpoint /tmp/ckpt --prompt \"In the "
                    "beginning\"",
                    "motley generate examples/runs/tiny.yaml --checkpoint /tmp/ckpt --prompt "
                    "\"And God said\" --temperature 0   # greedy"});
  cmd->callback([args, &exit_code] { exit_code = RunGenerate(*args); });
}

}  // namespace motley::cli
