#!/usr/bin/env python3
"""Hugging Face interop of motley checkpoints, checked with the real client (issue 15).

Run by CTest (tests/hf/hf_interop_test.sh) with the Python of the virtual environment that
scripts/test.sh makes (Debian's python3-torch plus transformers==4.40.2, safetensors, numpy<2 from
PyPI), offline (HF_HUB_OFFLINE=1). Usage: hf_interop_test.py MOTLEY_BINARY

1. motley -> transformers: a model trained 10 steps by motley loads with from_pretrained from the
   checkpoint folder as written (strictly: no missing, unexpected or mismatched keys); its loss on
   fixed batches equals `motley eval`'s within 1e-5 relative, and 64 greedy tokens equal
   `motley generate`'s.
2. transformers -> motley, untied and tied: a random LlamaForCausalLM saved by save_pretrained in
   BF16 starts a motley run with --init-from; motley's loss of step 1 equals transformers' on the
   same weights cast to fp32 within 1e-5 relative, and so does `motley eval` on the folder; after
   20 motley steps transformers loads the result strictly and its loss on a fixed batch equals
   `motley eval`'s within 1e-5.
"""
import json
import os
import subprocess
import sys
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

REL_TOL = 1e-5
B, T = 4, 32       # train.global_batch, train.seq_len
EVAL_BATCHES = 2
MODEL = dict(num_blocks=2, hidden=64, num_heads=4, num_kv_heads=2, ffn_hidden=128,
             vocab_size=256, max_seq_len=128, rope_theta=10000.0, norm_eps=1e-5)
PROMPT = b"In the beginning"
NEW_TOKENS = 64

MOTLEY = sys.argv[1]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def motley(*args):
    r = subprocess.run([MOTLEY, *args], capture_output=True)
    if r.returncode != 0:
        sys.exit("motley {} failed ({}):\n{}\n{}".format(
            " ".join(args), r.returncode, r.stdout.decode(errors="replace"),
            r.stderr.decode(errors="replace")))
    return r


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def write_u16(path, ids):
    np.asarray(ids, dtype="<u2").tofile(path)


def run_file(path, data, ckpt_dir, steps):
    model = "\n".join("  {}: {}".format(k, v) for k, v in MODEL.items())
    text = """cluster:
  name: local-cpu
  device_types:
    - {{name: cpu, vendor: cpu, peak_flops: 100 GFLOPS, memory: 4 GiB, memory_bandwidth: 25 GB/s}}
  nodes:
    - {{name: local, device_type: cpu, device_count: 1}}
model:
  name: hf-test
{model}
train:
  global_batch: {B}
  seq_len: {T}
  steps: {steps}
  val_every: 0
  val_batches: {batches}
  threads: 1
  optimizer: {{lr: 0.001, min_lr: 0.0001, warmup_steps: 0}}
{data}  checkpoint: {{dir: {ckpt}, every_steps: 0, keep_last: 2}}
""".format(model=model, B=B, T=T, steps=steps, batches=EVAL_BATCHES, data=data, ckpt=ckpt_dir)
    with open(path, "w") as f:
        f.write(text)
    return path


def validation_offsets(batch, num_batches, num_tokens):
    """train::ValidationBatchOffsets (src/train/batch_sampler.cc)."""
    last_start = num_tokens - T - 1
    samples = num_batches * B
    return [0 if samples == 1 else (batch * B + i) * last_start // (samples - 1) for i in range(B)]


def hf_loss(model, tokens, offsets_per_batch):
    """Mean token cross-entropy over the batches: inputs [o, o+T), targets [o+1, o+T+1)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for offsets in offsets_per_batch:
            x = torch.tensor([tokens[o:o + T] for o in offsets], dtype=torch.long)
            y = torch.tensor([tokens[o + 1:o + T + 1] for o in offsets], dtype=torch.long)
            logits = model(x).logits.float()
            ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                   y.reshape(-1), reduction="none")
            total += float(ce.double().sum())
            count += ce.numel()
    return total / count


def eval_batches(tokens):
    return [validation_offsets(b, EVAL_BATCHES, len(tokens)) for b in range(EVAL_BATCHES)]


def load_strict(folder, **kwargs):
    model, info = LlamaForCausalLM.from_pretrained(folder, output_loading_info=True, **kwargs)
    problems = {k: v for k, v in info.items() if v}
    check(not problems, "transformers loads {} strictly {}".format(folder, problems or ""))
    return model.eval()


def motley_eval(run, checkpoint, data):
    r = motley("eval", run, "--checkpoint", checkpoint, "--data", data, "--data-format", "u16",
               "--batches", str(EVAL_BATCHES), "--json")
    return json.loads(r.stdout)["loss"]


def greedy(model, prompt, n):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids], dtype=torch.long)).logits[0, -1, :256]
            ids.append(int(torch.argmax(logits)))  # the first maximum, as motley's lowest id
    return bytes(ids)


def motley_to_hf(tmp, fixed, fixed_path):
    print("== motley -> transformers")
    run = run_file(os.path.join(tmp, "a.yaml"), "", os.path.join(tmp, "ck_a"), 10)
    motley("train", run)
    folder = os.path.join(tmp, "ck_a", "step-00000010")
    model = load_strict(folder)
    want = motley_eval(run, folder, fixed_path)
    got = hf_loss(model, fixed, eval_batches(fixed))
    check(rel(got, want) <= REL_TOL,
          "loss: transformers {:.9f}, motley eval {:.9f} (rel {:.2e})".format(got, want,
                                                                             rel(got, want)))
    check_greedy(run, folder, model)


def check_greedy(run, folder, model):
    # --temperature 0: greedy (generate samples at temperature 0.8 among the top 40 by default).
    r = motley("generate", run, "--checkpoint", folder, "--prompt", PROMPT.decode(), "--tokens",
               str(NEW_TOKENS), "--temperature", "0")
    motley_text = r.stdout[:-1] if r.stdout.endswith(b"\n") else r.stdout
    hf_text = greedy(model, PROMPT, NEW_TOKENS)
    check(motley_text == hf_text,
          "{} greedy tokens: motley {!r}, transformers {!r}".format(NEW_TOKENS, motley_text,
                                                                    hf_text))


def hf_to_motley(tmp, fixed, fixed_path, tied):
    name = "tied" if tied else "untied"
    print("== transformers (BF16, {}) -> motley".format(name))
    torch.manual_seed(7 if tied else 8)
    config = LlamaConfig(vocab_size=MODEL["vocab_size"], hidden_size=MODEL["hidden"],
                         intermediate_size=MODEL["ffn_hidden"],
                         num_hidden_layers=MODEL["num_blocks"],
                         num_attention_heads=MODEL["num_heads"],
                         num_key_value_heads=MODEL["num_kv_heads"],
                         max_position_embeddings=MODEL["max_seq_len"],
                         rms_norm_eps=MODEL["norm_eps"], rope_theta=MODEL["rope_theta"],
                         tie_word_embeddings=tied)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # norm weights away from 1 so that a skipped norm would show
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    hf_dir = os.path.join(tmp, "hf_" + name)
    model.to(torch.bfloat16).save_pretrained(hf_dir)
    with safe_open(os.path.join(hf_dir, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        dtypes = {f.get_tensor(k).dtype for k in keys}
    check(dtypes == {torch.bfloat16}, "saved in BF16: {}".format(dtypes))
    check(("lm_head.weight" in keys) != tied,
          "lm_head.weight {} the file".format("absent from" if tied else "in"))

    reference = load_strict(hf_dir, torch_dtype=torch.float32)  # the BF16 weights cast to fp32
    train_tokens = [int(t) for t in np.random.RandomState(11).randint(0, 256, T + 1)]
    train_path = os.path.join(tmp, "train_{}.bin".format(name))
    write_u16(train_path, train_tokens)  # T + 1 tokens: every sample of every step is this one
    data = "  data: {{format: u16, train_path: {}, val_path: {}}}\n".format(train_path, fixed_path)
    ckpt = os.path.join(tmp, "ck_" + name)
    run = run_file(os.path.join(tmp, name + ".yaml"), data, ckpt, 20)

    want = hf_loss(reference, fixed, eval_batches(fixed))
    got = motley_eval(run, hf_dir, fixed_path)
    check(rel(got, want) <= REL_TOL,
          "motley eval of the BF16 folder {:.9f}, transformers fp32 {:.9f} (rel {:.2e})".format(
              got, want, rel(got, want)))

    metrics = os.path.join(tmp, "m_{}.jsonl".format(name))
    out = motley("train", run, "--init-from", hf_dir, "--metrics", metrics).stdout.decode()
    check("BF16 weights converted to fp32" in out, "the load message names the conversion")
    check(("tied embeddings (tie_word_embeddings): lm_head.weight untied" in out) == tied,
          "the load message says untied: {}".format(tied))
    lines = [json.loads(line) for line in open(metrics)]
    step1 = next(line["loss"] for line in lines if line.get("step") == 1 and "loss" in line)
    want1 = hf_loss(reference, train_tokens, [[0] * B])
    check(rel(step1, want1) <= REL_TOL,
          "--init-from: motley's step-1 loss {:.9f}, transformers {:.9f} (rel {:.2e})".format(
              step1, want1, rel(step1, want1)))

    folder = os.path.join(ckpt, "step-00000020")
    trained = load_strict(folder)
    got = hf_loss(trained, fixed, eval_batches(fixed))
    want = motley_eval(run, folder, fixed_path)
    check(rel(got, want) <= REL_TOL,
          "after 20 steps: transformers {:.9f}, motley eval {:.9f} (rel {:.2e})".format(
              got, want, rel(got, want)))
    check(abs(got - hf_loss(reference, fixed, eval_batches(fixed))) > 1e-4,
          "the 20 steps changed the model")
    check_greedy(run, folder, trained)


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="motley-hf-") as tmp:
        fixed = [int(t) for t in np.random.RandomState(5).randint(0, 256, 600)]
        fixed_path = os.path.join(tmp, "fixed.bin")
        write_u16(fixed_path, fixed)
        motley_to_hf(tmp, fixed, fixed_path)
        for tied in (False, True):
            hf_to_motley(tmp, fixed, fixed_path, tied)
    if failures:
        sys.exit("{} check(s) failed:\n  {}".format(len(failures), "\n  ".join(failures)))
    print("all checks passed")


if __name__ == "__main__":
    main()
