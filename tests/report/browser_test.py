#!/usr/bin/env python3
"""Browser test of motley's HTML reports (issue 16 acceptance): each report kind — plan
(`motley plan --report`), simulate (`motley simulate --report`), train (`motley train --report`,
two plans compared) and metrics comparison (`motley report`, single-device, parallel and a file
with timestamps and a resume record) — is loaded from file in headless Chromium; the page must log
no console message and reference no external resource, and every chart's SVG in the DOM that
Chromium dumps must hold one mark per metrics row or plan element it draws, counted here from the
metrics files, the plan files and the command output (not from the report code).

Usage: browser_test.py --motley BIN --source DIR --work DIR [--screenshots DIR]
Exit 0 on success, 1 on a failure, 77 (skipped) when Chromium is not installed or cannot run.
"""
import argparse
import html.parser
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

SKIP = 77
FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    print("FAIL: " + msg)


def run(cmd, cwd=None):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        print(p.stdout)
        print(p.stderr)
        raise SystemExit(f"command failed ({p.returncode}): {' '.join(map(str, cmd))}")
    return p.stdout


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Chromium:
    def __init__(self, binary, work):
        self.binary = binary
        self.profile = work / "chromium-profile"

    def base(self):
        return [self.binary, "--headless", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--user-data-dir=" + str(self.profile)]

    def dump_dom(self, page):
        p = subprocess.run(self.base() + ["--enable-logging=stderr", "--v=0", "--dump-dom",
                                          page.as_uri()],
                           capture_output=True, text=True, timeout=180)
        return p.returncode, p.stdout, p.stderr

    def screenshot(self, page, png):
        subprocess.run(self.base() + ["--hide-scrollbars", "--window-size=1200,3000",
                                      "--screenshot=" + str(png), page.as_uri()],
                       capture_output=True, text=True, timeout=180)


class Charts(html.parser.HTMLParser):
    """Per <svg data-chart=ID>: the count of elements whose class list has 'mark', and of
    'mark fwd' / 'mark bwd' per data-stage."""

    def __init__(self):
        super().__init__()
        self.charts = {}
        self.stack = []  # chart ids of the open <svg> elements (None for non-chart svgs)
        self.external = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href", "xlink:href"):
            if key in a and re.match(r"^(https?:)?//", a[key] or ""):
                self.external.append(f"<{tag} {key}={a[key]}>")
        if tag == "script":
            self.scripts += 1
        if tag == "svg":
            cid = a.get("data-chart")
            if cid is not None:
                self.charts[cid] = {"marks": 0, "fwd": {}, "bwd": {}}
            self.stack.append(cid)
            return
        classes = (a.get("class") or "").split()
        chart = next((c for c in reversed(self.stack) if c is not None), None)
        if chart is not None and "mark" in classes:
            self.charts[chart]["marks"] += 1
            for kind in ("fwd", "bwd"):
                if kind in classes:
                    stage = a.get("data-stage", "?")
                    d = self.charts[chart][kind]
                    d[stage] = d.get(stage, 0) + 1

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag == "svg":
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag == "svg" and self.stack:
            self.stack.pop()


def load_page(chromium, page, screenshots):
    code, dom, log = chromium.dump_dom(page)
    if code != 0 or "<html" not in dom:
        fail(f"{page.name}: Chromium could not load it (exit {code}): {log[-500:]}")
        return None
    console = [l for l in log.splitlines() if "CONSOLE" in l]
    for line in console:
        fail(f"{page.name}: console message: {line}")
    charts = Charts()
    charts.feed(dom)
    for e in charts.external:
        fail(f"{page.name}: external resource {e}")
    if charts.scripts:
        fail(f"{page.name}: {charts.scripts} script element(s)")
    if screenshots:
        chromium.screenshot(page, screenshots / (page.stem + ".png"))
    print(f"{page.name}: loaded, {len(console)} console messages, charts: " +
          ", ".join(f"{k}={v['marks']}" for k, v in charts.charts.items()))
    return charts.charts


def expect_marks(charts, page, chart, want):
    if charts is None:
        return
    if chart not in charts:
        fail(f"{page}: no chart '{chart}' (have {sorted(charts)})")
        return
    got = charts[chart]["marks"]
    if got != want:
        fail(f"{page}: chart '{chart}' has {got} marks, expected {want}")


def metrics_rows(path):
    rows = []
    for line in pathlib.Path(path).read_text().splitlines():
        if not line.strip():
            continue
        j = json.loads(line)
        if "event" in j:
            continue
        rows.append(j)
    return rows


def expect_run_charts(charts, page, files, prefix=""):
    """The run charts of report/run_report.h, counted from the metrics files."""
    loss = throughput = step_time = 0
    for f in files:
        rows = metrics_rows(f)
        vals = sum(1 for r in rows if "val_loss" in r)
        virtual = sum(1 for r in rows if r.get("clock") == "virtual")
        predicted = sum(1 for r in rows if "predicted_step_time_s" in r)
        loss += len(rows) + vals
        throughput += len(rows) + virtual
        step_time += len(rows) + predicted
    for chart, want in (("loss-step", loss), ("loss-wall", loss),
                        ("throughput-step", throughput), ("throughput-wall", throughput),
                        ("step-time", step_time)):
        expect_marks(charts, page, prefix + chart, want)


def plan_devices(plan_path):
    plan = json.loads(pathlib.Path(plan_path).read_text())
    devices = set()
    stages = {}
    for p, pipe in enumerate(plan["pipelines"]):
        for s, st in enumerate(pipe["stages"]):
            devices.update(st["devices"])
            stages[f"{p}-{s}"] = pipe["micro_batches"]
    return devices, stages


def expect_plan_charts(charts, page, plan_path, cluster_devices, prefix=""):
    devices, stages = plan_devices(plan_path)
    expect_marks(charts, page, prefix + "device-map", cluster_devices)
    expect_marks(charts, page, prefix + "utilisation", len(devices))
    if charts is None or prefix + "timeline" not in charts:
        fail(f"{page}: no chart '{prefix}timeline'")
        return
    timeline = charts[prefix + "timeline"]
    shown = set(timeline["fwd"]) | set(timeline["bwd"])
    want_pipes = min(8, len({s.split("-")[0] for s in stages}))
    if len({s.split("-")[0] for s in shown}) != want_pipes:
        fail(f"{page}: timeline shows pipelines {sorted(shown)}, expected the first {want_pipes}")
    for stage in shown:
        for kind in ("fwd", "bwd"):
            got = timeline[kind].get(stage, 0)
            if got != stages.get(stage):
                fail(f"{page}: timeline stage {stage} has {got} {kind} marks, expected "
                     f"{stages.get(stage)} (its micro-batches)")


def cluster_device_count(motley, run_file):
    out = run([motley, "validate", run_file])
    m = re.search(r"cluster: \S+: (\d+) device\(s\)", out)
    if not m:
        raise SystemExit(f"cannot read the device count from: {out}")
    return int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--motley", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--screenshots", default="")
    args = ap.parse_args()
    binary = find_chromium()
    if binary is None:
        print("SKIPPED: Chromium is not installed (scripts/test.sh installs the Debian package "
              "'chromium')")
        return SKIP
    work = pathlib.Path(args.work).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    chromium = Chromium(binary, work)
    probe = work / "probe.html"
    probe.write_text("<!DOCTYPE html><html><body>probe</body></html>")
    code, dom, log = chromium.dump_dom(probe)
    if code != 0 or "probe" not in dom:
        print(f"SKIPPED: Chromium cannot run here (exit {code}): {log[-400:]}")
        return SKIP
    screenshots = pathlib.Path(args.screenshots).resolve() if args.screenshots else None
    if screenshots:
        screenshots.mkdir(parents=True, exist_ok=True)
    src = pathlib.Path(args.source)
    motley = args.motley
    hetero = str(src / "examples/runs/hetero-4.yaml")
    devices = cluster_device_count(motley, hetero)

    # 1. plan report.
    plan_out = run([motley, "plan", hetero, "-o", work / "plan.json", "--report",
                    work / "plan.html", "--quiet"])
    charts = load_page(chromium, work / "plan.html", screenshots)
    expect_plan_charts(charts, "plan.html", work / "plan.json", devices)
    bars = 1 + len(re.findall(r"^  vs .*: [0-9.]+ tokens/s", plan_out, re.M))
    refs = re.search(r"^  references: (.*)$", plan_out, re.M)
    bars += len(refs.group(1).split("; ")) if refs else 0
    expect_marks(charts, "plan.html", "baselines", bars)

    # 2. simulate report of a hand-written plan.
    balanced = src / "examples/plans/hetero-4-balanced.json"
    run([motley, "simulate", hetero, balanced, "--report", work / "sim.html"])
    charts = load_page(chromium, work / "sim.html", screenshots)
    expect_plan_charts(charts, "sim.html", balanced, devices)

    # 3. train report: the chosen plan against the uniform baseline, 3 steps each.
    run([motley, "plan", hetero, "--baseline", "uniform", "-o", work / "uniform.json", "--quiet"])
    run([motley, "train", hetero, "--plan", work / "plan.json", "--compare",
         work / "uniform.json", "--steps", "3", "--metrics", work / "m.jsonl", "--report",
         work / "train.html"])
    runs = [work / "m.jsonl", work / "m.uniform.jsonl"]
    charts = load_page(chromium, work / "train.html", screenshots)
    expect_run_charts(charts, "train.html", runs)
    expect_plan_charts(charts, "train.html", work / "plan.json", devices, "plan0-")
    expect_plan_charts(charts, "train.html", work / "uniform.json", devices, "plan1-")

    # 4. metrics comparison: those two runs, a single-device run, and a resumed run's file with
    # timestamps and a resume record (the checkpoint issue's format).
    tiny = src / "examples/runs/tiny.yaml"
    run([motley, "train", tiny, "--steps", "4", "--metrics", work / "serial.jsonl"])
    stamped = work / "stamped.jsonl"
    lines = []
    for i, row in enumerate(metrics_rows(work / "serial.jsonl")):
        row["timestamp"] = f"2026-12-01T15:04:{5 + i:02d}.123Z"
        row["elapsed_s"] = 0.5 * (i + 1)
        lines.append(json.dumps(row))
        if i == 1:
            lines.append(json.dumps({"event": "resume", "step": 2, "from": "/tmp/ckpt/step-2",
                                     "timestamp": "2026-12-01T16:00:00.000Z"}))
    stamped.write_text("\n".join(lines) + "\n")
    files = runs + [work / "serial.jsonl", stamped]
    run([motley, "report"] + files + ["-o", work / "runs.html"])
    charts = load_page(chromium, work / "runs.html", screenshots)
    expect_run_charts(charts, "runs.html", files)

    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        return 1
    print("all report pages load in Chromium with the expected marks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
