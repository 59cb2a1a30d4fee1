#!/usr/bin/env python3
"""Benchmark: motley's predictor against published training runs (bench/data/published_runs.csv).

For each row this writes the cluster (DGX A100 nodes named by device and link presets), the run
file (the GPT model expressed as a Llama block: SwiGLU width 8h/3 rounded to a multiple of the TP
degree; fp16; unfused attention with the published attention dropout; sequence parallelism as
published) and the plan (Megatron's
uniform layout: TP inside a node, then DP, then PP; the published micro-batch size, recompute and
interleaving: with v chunks the layers split evenly over the p v virtual stages, virtual stage s on
pipeline group s mod p, as Megatron-LM's virtual pipeline), runs `motley predict`, and prints the predicted against the published iteration time
with the signed error, then the mean |error| and the largest. A published TFLOP/s per GPU is turned
into an iteration time with the paper's own FLOP count (bench/data/README.md).

Interleaved rows are marked `i` (vV). Not expressible yet, so marked in the output: PyTorch DDP's
overlap of the gradient all-reduce with the backward (rows with dp_overlap = torch; motley reduces
after the backward, mark `o`). `--no-interleave` runs every row as plain 1F1B (the table before
interleaving ran).

    bench/published_runs.py [--motley build/motley] [--keep DIR] [--only ID,ID]

Exit status 0 when every row was predicted (the errors are reported, not judged).
"""
import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEVICES_PER_NODE = 8  # DGX A100


def megatron_flops(row):
    """Narayanan et al. 2021, eq. (3): F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))."""
    b, s, l, h, v = (int(row[k]) for k in ("global_batch", "seq_len", "layers", "hidden", "vocab"))
    return 96.0 * b * s * l * h * h * (1 + s / (6.0 * h) + v / (16.0 * l * h))


def model_flops(row):
    """Korthikanti et al. 2022: model FLOPs without recompute, 72 B s l h^2 (1 + s/(6h) +
    V/(12 l h)): the numerator of motley's MFU."""
    b, s, l, h, v = (int(row[k]) for k in ("global_batch", "seq_len", "layers", "hidden", "vocab"))
    return 72.0 * b * s * l * h * h * (1 + s / (6.0 * h) + v / (12.0 * l * h))


def published_time(row):
    if row["published_time_s"]:
        return float(row["published_time_s"])
    return megatron_flops(row) / (float(row["published_tflops_per_gpu"]) * 1e12 * int(row["gpus"]))


def swiglu_width(hidden, tp):
    """8h/3 (the GPT MLP's 4h width at equal parameters) rounded to the nearest multiple of tp."""
    return max(tp, round(8 * hidden / 3 / tp) * tp)


def cluster_yaml(row):
    nodes = int(row["gpus"]) // DEVICES_PER_NODE
    nics = ", ".join(["ib-hdr"] * DEVICES_PER_NODE)
    return f"""# {row['id']}: {nodes} DGX A100 nodes (Selene), written by bench/published_runs.py
name: selene-{nodes}
device_types:
  - {{preset: a100-80g, name: a100}}
link_classes:
  - {{preset: nvlink}}
  - {{preset: ib-hdr}}
nodes:
  - {{name: dgx, repeat: {nodes}, device_type: a100, device_count: {DEVICES_PER_NODE},
     intra_link: nvlink, nics: [{nics}]}}
islands:
  - {{name: selene, nodes: [dgx], link: ib-hdr}}
"""


def run_yaml(row):
    h, tp = int(row["hidden"]), int(row["tp"])
    sp = "true" if row["sequence_parallel"] == "true" else "false"
    return f"""# {row['id']} ({row['source']}): GPT {row['params_b']}B as a Llama block
cluster: cluster.yaml
model:
  name: gpt-{row['params_b']}b
  num_blocks: {row['layers']}
  hidden: {h}
  num_heads: {row['heads']}
  ffn_hidden: {swiglu_width(h, tp)}
  vocab_size: {row['vocab']}
  max_seq_len: {row['seq_len']}
train:
  global_batch: {row['global_batch']}
  seq_len: {row['seq_len']}
  steps: 1
  data: {{format: u16, train_path: none.bin}}
  val_every: 0
  precision: fp16
  attention: unfused
  sequence_parallel: {sp}
  attention_dropout: {row['attention_dropout']}
"""


def plan_json(row, interleave=True):
    tp, pp, gpus = int(row["tp"]), int(row["pp"]), int(row["gpus"])
    v = int(row["chunks"]) if interleave else 1
    dp = gpus // (tp * pp)
    mbs = int(row["micro_batch"])
    batch = int(row["global_batch"])
    assert dp * tp * pp == gpus and batch % (dp * mbs) == 0, row["id"]
    layers = int(row["layers"])
    virtual = pp * v
    split = [layers // virtual + (1 if i < layers % virtual else 0) for i in range(virtual)]
    pipelines = []
    for d in range(dp):
        stages, first = [], 0
        for s in range(virtual):
            group = s % pp
            base = (group * dp + d) * tp  # Megatron's rank order: TP fastest, then DP, then PP
            stages.append({"first_block": first, "num_blocks": split[s], "has_embedding": s == 0,
                           "has_head": s == virtual - 1,
                           "devices": list(range(base, base + tp)), "tp_degree": tp,
                           "recompute": row["recompute"]})
            first += split[s]
        pipe = {"micro_batches": batch // dp // mbs, "micro_batch_size": mbs, "stages": stages}
        if v > 1:
            pipe["chunks"] = v
        pipelines.append(pipe)
    return json.dumps({"format": "motley-plan", "version": 3 if v > 1 else 2, "schedule": "1f1b",
                       "optimizer_sharding": "none",
                       "comment": f"{row['id']}: tp={tp} pp={pp} dp={dp} b={mbs} v={v}",
                       "pipelines": pipelines})


def predict(motley, folder):
    out = subprocess.run([motley, "predict", os.path.join(folder, "run.yaml"),
                          os.path.join(folder, "plan.json")], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"motley predict failed in {folder}:\n{out.stderr}")
    m = re.search(r"^iteration ([0-9.eE+-]+) s .*MFU ([0-9.]+)%", out.stdout, re.M)
    return float(m.group(1)), float(m.group(2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--motley", default=os.environ.get("MOTLEY", "build/motley"))
    ap.add_argument("--data", default=os.path.join(HERE, "data", "published_runs.csv"))
    ap.add_argument("--keep", help="write each row's files under this folder and keep them")
    ap.add_argument("--only", help="comma-separated row ids")
    ap.add_argument("--no-interleave", action="store_true",
                    help="run interleaved rows as plain 1F1B")
    args = ap.parse_args()
    if not os.access(args.motley, os.X_OK):
        sys.exit(f"no motley binary at {args.motley} (build it first, or pass --motley)")
    with open(args.data) as f:
        rows = list(csv.DictReader(f))
    if args.only:
        keep = set(args.only.split(","))
        rows = [r for r in rows if r["id"] in keep]
    work = args.keep or tempfile.mkdtemp(prefix="motley_published.")
    print(f"{'row':<18} {'tp':>2} {'pp':>3} {'dp':>3} {'b':>3} {'recompute':<9} "
          f"{'published s':>11} {'predicted s':>11} {'error':>8} {'MFU pred/pub':>13}  notes")
    errors = []
    for row in rows:
        folder = os.path.join(work, row["id"])
        os.makedirs(folder, exist_ok=True)
        for name, text in (("cluster.yaml", cluster_yaml(row)), ("run.yaml", run_yaml(row)),
                           ("plan.json", plan_json(row, not args.no_interleave))):
            with open(os.path.join(folder, name), "w") as f:
                f.write(text)
        published = published_time(row)
        predicted, mfu = predict(args.motley, folder)
        err = (predicted - published) / published
        errors.append(err)
        tp, pp, gpus = int(row["tp"]), int(row["pp"]), int(row["gpus"])
        pub_mfu = 100 * model_flops(row) / (published * 312e12 * gpus)
        notes = []
        if int(row["chunks"]) > 1:
            notes.append(f"i: interleaved v{row['chunks']}" +
                         (", run as 1F1B" if args.no_interleave else ""))
        if row["dp_overlap"] == "torch":
            notes.append("o: published DP overlapped with backward")
        print(f"{row['id']:<18} {tp:>2} {pp:>3} {gpus // (tp * pp):>3} {row['micro_batch']:>3} "
              f"{row['recompute']:<9} {published:11.3f} {predicted:11.3f} {100 * err:+7.1f}% "
              f"{mfu:6.1f}/{pub_mfu:4.1f}%  {'; '.join(notes)}")
    mean = sum(abs(e) for e in errors) / len(errors)
    worst = max(errors, key=abs)
    print(f"\nmean |error| {100 * mean:.1f}%, max |error| {100 * abs(worst):.1f}% "
          f"(signed {100 * worst:+.1f}%) over {len(errors)} rows; mean signed "
          f"{100 * sum(errors) / len(errors):+.1f}%")
    if not args.keep:
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
