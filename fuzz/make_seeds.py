#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/NAME/) from the examples and from
inputs of the tests, so that they can be regenerated after a format change:
    python3 fuzz/make_seeds.py
Files copied from examples/ keep their names; the others are written here. Idempotent."""
import hashlib
import json
import pathlib
import re
import shutil
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def out(name: str, file: str, data) -> None:
    path = CORPUS / name / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


def copy(name: str, sources, prefix: str = "") -> None:
    for src in sources:
        dst = CORPUS / name / (prefix + src.name)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)


# Run files: every example, the CLI tests' tiny run, the embedded default run.
copy("run_file", sorted((ROOT / "examples" / "runs").glob("*.yaml")))
copy("run_file", [ROOT / "src" / "straggler" / "testdata" / "emulated-8-run.yaml"], "testdata-")
default_run = re.search(r'kDefaultRunYaml = R"\((.*?)\)";',
                        (ROOT / "src" / "spec" / "run_file.cc").read_text(), re.S).group(1)
out("run_file", "default-run.yaml", default_run)
out("run_file", "tiny-cli-test.yaml", """cluster:
  name: local-cpu
  device_types:
    - {name: cpu, vendor: cpu, peak_flops: 100 GFLOPS, memory: 4 GiB, memory_bandwidth: 25 GB/s}
  nodes:
    - {name: local, device_type: cpu, device_count: 1}
model: {preset: tiny, num_blocks: 3, rope_theta: 500000}
train:
  global_batch: 4
  seq_len: 32
  steps: 5
  optimizer: {lr: 1.0e-3, warmup_steps: 1}
  data: {format: u16, train_path: a.bin, val_fraction: 0.1}
  val_every: 2
  val_batches: 1
  threads: 1
  checkpoint: {dir: ck, every_steps: 2, keep_last: 2}
""")

# Cluster files.
copy("cluster_yaml", sorted((ROOT / "examples" / "clusters").glob("*.yaml")))
copy("cluster_yaml", [ROOT / "src" / "straggler" / "testdata" / "emulated-8.yaml"], "testdata-")

# Plans (the fixture is examples/runs/local-hetero.yaml; the others exercise the parser).
copy("plan_json", [p for p in sorted((ROOT / "examples" / "plans").glob("*.json"))
                   if p.stat().st_size < 8192])
# Version 3: an interleaved pipeline (2 device groups, 2 chunks each) on the fixture's 6 blocks.
out("plan_json", "interleaved-local-hetero.json", """{"format": "motley-plan", "version": 3,
 "schedule": "1f1b", "pipelines": [{"micro_batches": 4, "micro_batch_size": 3, "chunks": 2,
 "stages": [
  {"first_block": 0, "num_blocks": 2, "has_embedding": true, "devices": [0]},
  {"first_block": 2, "num_blocks": 2, "devices": [1]},
  {"first_block": 4, "num_blocks": 1, "devices": [0]},
  {"first_block": 5, "num_blocks": 1, "has_head": true, "devices": [1]}]}]}
""")

# Scenarios against examples/clusters/emulated-8.yaml.
copy("scenario", sorted((ROOT / "examples" / "scenarios").glob("*.yaml")))
copy("scenario", [ROOT / "src" / "straggler" / "testdata" / "slow-device.yaml"], "testdata-")
out("scenario", "links.yaml", """events:
  - {step: 5, link: [0, 5], rate: 0.5}
  - {step: 7, link: ["node-a:1", "node-b:3"], rate: 0.25}
  - {step: 9, link_class: net, rate: 0.1}
  - {step: 12, link_class: shm, rate: 1}
""")

# Profiles: the documented example, under both device types of the fixture cluster.
doc = (ROOT / "docs" / "formats" / "profile.md").read_text()
example = re.search(r"```json\n(.*?)```", doc, re.S).group(1)
out("profile_json", "profile-md-example.json", example)
profile = json.loads(example)
profile["devices"][0]["device_type"] = "cpu-fast"
slow = json.loads(json.dumps(profile["devices"][0]))
slow["device_type"] = "cpu-slow"
slow["step_s_per_param"] = 1.5e-9
profile["devices"].append(slow)
out("profile_json", "local-hetero.json", json.dumps(profile, indent=2) + "\n")


# Checkpoints: sidecar, index and a safetensors file of two small tensors (fuzz/checkpoint_fuzz.cc).
def safetensors(tensors) -> bytes:
    header, data, offset = {}, b"", 0
    for name, shape, values in tensors:
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


MODEL = "model-00001-of-00001.safetensors"
st = safetensors([("model.norm.weight", [4], [1.0, 1.0, 1.0, 1.0]),
                  ("lm_head.weight", [2, 4], [0.5, -0.25, 0.125, 0.0, 1.0, 2.0, -3.0, 4.0])])
index = json.dumps({"metadata": {"total_size": len(st) - 8},
                    "weight_map": {"model.norm.weight": MODEL, "lm_head.weight": MODEL}}, indent=2)
sidecar = {
    "format": "motley-checkpoint", "version": 1, "step": 10, "consumed_samples": 80,
    "config_hash": "0123456789abcdef", "rng": {"seed": 1234}, "data_loader": {"next_step": 11},
    "plan": None,
    "stages": [{"stage": 0, "model_file": MODEL, "optimizer_file": None, "tensors": 2}],
    "files": {MODEL: {"bytes": len(st), "sha256": hashlib.sha256(st).hexdigest()},
              "model.safetensors.index.json": {"bytes": len(index),
                                               "sha256": hashlib.sha256(index.encode()).hexdigest()}},
}
SEP = b"\n#--\n"
out("checkpoint", "two-tensors", json.dumps(sidecar, indent=2).encode() + SEP + index.encode() + SEP + st)
sidecar_neg = dict(sidecar, step=-5)
out("checkpoint", "negative-step", json.dumps(sidecar_neg).encode() + SEP + index.encode() + SEP + st)


# Token files: format byte (0 text, 1 u16, 2 u32; bits 2.. the sequence length - 1), vocabulary
# (uint32 little-endian), then the file's bytes.
def token_seed(fmt: int, seq_len: int, vocab: int, body: bytes) -> bytes:
    return bytes([fmt | ((seq_len - 1) << 2)]) + struct.pack("<I", vocab - 1) + body


corpus = (ROOT / "data" / "corpus" / "kjv.txt").read_bytes()[:2048]
out("token_file", "kjv-text", token_seed(0, 8, 256, corpus))
out("token_file", "u16", token_seed(1, 4, 50304, struct.pack("<200H", *[(i * 7919) % 50304 for i in range(200)])))
out("token_file", "u32", token_seed(2, 16, 128000, struct.pack("<100I", *[(i * 104729) % 128000 for i in range(100)])))
out("token_file", "u16-above-vocab", token_seed(1, 2, 256, struct.pack("<4H", 1, 2, 300, 4)))
