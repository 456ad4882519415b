"""Cold start: seconds from `streamlit run app.py` to a first visitor's heatmap drawn in Chromium (issue 36 §6),
against two floors measured in the same run.

Run:  python benchmarks/bench_cold_start.py [--reps 3] [--before REV] [--no-bytecode]
Each rep, in turn:
  - floor 1: `python -c "import torch"` (what any page of this dashboard must import);
  - floor 2: a bare Streamlit page (benchmarks/floor_app.py: one Plotly heatmap) from `streamlit run` to its heatmap
    drawn, the visitor arriving as soon as /_stcore/health says ok;
  - the dashboard as the Docker image runs it (app.py and mha_viz copied to a folder and compiled to bytecode, as
    the Dockerfile does), the visitor arriving as soon as /_stcore/health says ok (no proxy), and again arriving
    when /ready says ok (behind deploy/haproxy.cfg or Docker's HEALTHCHECK);
  - the dashboard's cold servers draw the stored first page (mha_viz/serve/light.py) from a store that a start
    before the reps wrote (each tree its own, MHA_VIZ_PAGE_STORE); once more with no store (an empty folder each
    time) for a visitor at /_stcore/health; `live` is when the live page's map (lesson_first) was drawn;
  - with --before REV (e.g. HEAD): the same two for app.py and mha_viz as committed at REV (`git archive`), so a
    change is measured against what it changes in one run, on the same machine load;
  - with --no-bytecode: the working tree's dashboard without bytecode (what the image did before it compiled).
Also the preload's steps timed one by one in a fresh process (wall and process CPU), each against that process's
own `import torch`.
Printed per variant: the median and each rep of start -> heatmap, with its ratio to both floors (target <= 6 s), and
where the time goes (server answering, /ready answering, the preload's imports and model from its MHA_VIZ_TIMINGS
line, the page's own run); every figure with the machine's 1-minute load average when it was taken (`load`): on
this 2-core machine other work changes wall times several-fold, so compare figures of one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import CHROMIUM, CHROMIUM_ARGS, FIRST_GRID_JS, ROOT, check_chromium, copy_at, free_port
from playwright.sync_api import sync_playwright

TARGET_S = 6.0
HEATMAP = f"({FIRST_GRID_JS})() && ({FIRST_GRID_JS})().n > 0"


def import_torch_s() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - t0


def cpu_s(pid: int) -> float:
    """The process's CPU seconds so far (user + system, every thread): /proc/<pid>/stat. Wall seconds on this
    shared 2-core machine swing several-fold with other work; a process's own CPU seconds far less."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14 and 15)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200 and resp.read().strip() == b"ok"
    except (urllib.error.HTTPError, OSError):
        return False


# The preload's own steps (mha_viz/serve/start.py: import_heavy, then the model), timed one by one in a fresh process.
STEPS = """
import importlib, json, os, sys, time
out, t, c = {}, time.perf_counter(), time.process_time()
def step(name, *modules, attrs=()):
    global t, c
    for m in modules:
        mod = importlib.import_module(m)
        for a in attrs:
            getattr(mod, a)
    now, cpu = time.perf_counter(), time.process_time()
    out[name] = out.get(name, 0) + now - t; out["cpu " + name] = out.get("cpu " + name, 0) + cpu - c; t, c = now, cpu
from mha_viz.runtime import before_torch  # as app.py, before torch loads
from mha_viz.runtime.gcpause import gc_paused
before_torch()
paused = gc_paused(); paused.__enter__()  # as import_heavy imports: no collection meanwhile
t, c = time.perf_counter(), time.process_time()
step("torch", "torch")
step("transformers, config, tokenizer", "transformers", attrs=("AutoConfig", "AutoTokenizer"))
step("transformers' modeling code", "transformers", attrs=("AutoModel", "AutoModelForCausalLM", "PreTrainedModel"))
step("numpy, pandas, pyarrow", "numpy", "pandas", "pyarrow")
step("plotly", "plotly.graph_objects", "plotly.io", "plotly.subplots")
step("streamlit", "streamlit")
step("mha_viz's dashboard", "mha_viz.figures", "mha_viz.ui")
from mha_viz.serve.start import import_heavy
import_heavy(); step("the rest of import_heavy")
from mha_viz.serve import start
paused.__exit__(None, None, None)
start._load(); step("start._load: the model, the stored page's check")  # as the preload thread, after import_heavy
assert not start.FAILED, start.FAILED
out["load"] = os.getloadavg()[0]
print(json.dumps(out))
"""


def preload_steps(folder: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(folder), "MHA_VIZ_PAGE_STORE": str(folder / "first-page-store")}
    done = subprocess.run([sys.executable, "-c", STEPS], cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def copy_app(bytecode: bool, rev: str | None = None) -> Path:
    """app.py, mha_viz and .streamlit in a fresh folder (the image's /app), compiled when ``bytecode``: the working
    tree's, or as committed at ``rev`` (read with `git archive`)."""
    dest = Path(tempfile.mkdtemp(prefix="mha-viz-cold-"))
    if rev is None:
        shutil.copy2(ROOT / "app.py", dest / "app.py")
        shutil.copytree(ROOT / ".streamlit", dest / ".streamlit")
        shutil.copytree(ROOT / "mha_viz", dest / "mha_viz", ignore=shutil.ignore_patterns("__pycache__"))
    else:
        copy_at(rev, dest)
    shutil.copy2(ROOT / "benchmarks" / "floor_app.py", dest / "floor_app.py")
    if bytecode:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        subprocess.run([sys.executable, "-m", "compileall", "-q", "app.py", "mha_viz"], cwd=dest, env=env, check=True)
    return dest


LIVE_MAP = ".st-key-lesson_first .js-plotly-plot .heatmaplayer"  # the live Lesson's first map (ui/views/lesson.py)


def record_store(browser, folder: Path) -> None:
    """A start whose preload writes the tree's stored first page (serve/record.py), when the tree has one."""
    if (folder / "mha_viz" / "serve" / "page_store.py").exists():
        cold(browser, folder, "app.py", "ready", folder / "first-page-store")
        if not (folder / "first-page-store" / "first-page.json").exists():
            raise RuntimeError(f"the preload stored no first page in {folder}")


def cold(browser, folder: Path, script: str, visit: str, store: Path | None = None) -> dict[str, float]:
    """Start `streamlit run script` in ``folder``; a visitor opens the page once ``visit`` ("health" or "ready")
    answers ok. Seconds from the start to each step. ``store``: the stored first page's folder (None: an empty
    one)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    timings = folder / f"timings-{port}.jsonl"
    store = store or folder / f"no-store-{port}"
    env = {**os.environ, "MHA_VIZ_TIMINGS": str(timings), "PYTHONPATH": str(folder), "MHA_VIZ_PAGE_STORE": str(store)}
    env.pop("MHA_VIZ_NO_PRELOAD", None)
    cmd = [sys.executable, "-m", "streamlit", "run", script, "--server.headless", "true", "--server.port", str(port),
           "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]  # fmt: skip
    log = folder / f"server-{port}.log"
    wall0 = time.time()
    t0 = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT)
    out: dict[str, float] = {}
    try:
        for step, path in (("health", "/_stcore/health"), ("ready", "/ready")):
            while not answers(url + path):
                if proc.poll() is not None or time.perf_counter() - t0 > 300:
                    raise RuntimeError(f"{script} did not answer {path}: {log.read_text()[-2000:]}")
                time.sleep(0.05)
            out[step] = time.perf_counter() - t0
            if step == visit:
                break
        page = browser.new_page(viewport={"width": 1500, "height": 1200})
        page.goto(url)
        try:
            page.wait_for_function(HEATMAP, timeout=300_000, polling=50)
        except Exception:
            raise RuntimeError(f"{script} drew no heatmap; the server said: {log.read_text()[-2000:]}") from None
        page.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=60_000)
        out["heatmap"] = time.perf_counter() - t0
        out["cpu"] = cpu_s(proc.pid)  # the server's CPU seconds from its start to the heatmap drawn
        out["load"] = os.getloadavg()[0]
        if script == "app.py":
            page.wait_for_selector(LIVE_MAP, timeout=300_000)
            out["live"] = time.perf_counter() - t0
        page.close()
        for line in timings.read_text().splitlines() if timings.exists() else ():
            rec = json.loads(line)
            if rec["kind"] == "preload":
                out["imports"], out["model"] = rec["at"] - rec["s"] - wall0, rec["at"] - wall0
            elif rec["kind"] == "page" and "page_run" not in out:  # started at page_at; its own part: own
                out["page_at"], out["page_run"] = rec["at"] - rec["s"] - wall0, rec["s"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return out


def report(name: str, runs: list[dict[str, float]], torch_s: float, floor: list[dict[str, float]]) -> None:
    heat, cpu = statistics.median(r["heatmap"] for r in runs), statistics.median(r["cpu"] for r in runs)
    floor_s, floor_cpu = statistics.median(r["heatmap"] for r in floor), statistics.median(r["cpu"] for r in floor)
    verdict = "ok" if heat <= TARGET_S else "MISSED"
    print(f"{name}: start -> heatmap {heat:.2f} s median (target <= {TARGET_S:.0f} s: {verdict}) = "
          f"{heat / torch_s:.2f} x import torch, {heat / floor_s:.2f} x the bare page; the server's CPU "
          f"{cpu:.2f} s = {cpu / floor_cpu:.2f} x the bare page's")  # fmt: skip
    keys = ("health", "ready", "imports", "model", "page_at", "page_run", "heatmap", "live", "cpu", "load")
    for r in runs:
        print("    " + " | ".join(f"{k} {r[k]:.2f}" for k in keys if k in r))


def compare(runs: dict[str, list[dict[str, float]]], before: str) -> None:
    """The working tree against REV, per visitor: each rep's ratio (reps are interleaved, so a rep's two figures
    saw the same machine load), then their median."""
    for visit in ("/_stcore/health", "/ready"):
        now, then = runs[f"dashboard now, visitor at {visit}"], runs[f"dashboard at {before}, visitor at {visit}"]
        for key, what in (("heatmap", "start -> heatmap"), ("cpu", "the server's CPU")):
            each = [a[key] / b[key] for a, b in zip(now, then, strict=True)]
            print(f"now / at {before}, visitor at {visit}, {what}: {statistics.median(each):.2f} median "
                  f"({', '.join(f'{x:.2f}' for x in each)})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--before", metavar="REV", help="also the dashboard as committed at REV (e.g. HEAD)")
    ap.add_argument("--no-bytecode", action="store_true", help="also the working tree's dashboard without bytecode")
    args = ap.parse_args()
    check_chromium()
    trees = {"now": copy_app(True)}  # which dashboard: its folder
    if args.before:
        trees[f"at {args.before}"] = copy_app(True, args.before)
    variants: dict[str, tuple] = {"bare Streamlit page (floor 2)": (trees["now"], "floor_app.py", "health")}
    for tree, folder in trees.items():  # name: (folder, script, the visitor comes when this answers ok[, store])
        variants[f"dashboard {tree}, visitor at /_stcore/health"] = (folder, "app.py", "health", "stored")
        variants[f"dashboard {tree}, visitor at /ready"] = (folder, "app.py", "ready", "stored")
    variants["dashboard now, no stored page, visitor at /_stcore/health"] = (trees["now"], "app.py", "health")
    if args.no_bytecode:
        trees["now, no bytecode"] = copy_app(False)
        variants["dashboard now, no bytecode, visitor at /_stcore/health"] = (trees["now, no bytecode"], "app.py",
                                                                               "health")  # fmt: skip
    torch_runs: list[float] = []
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    steps: dict[str, list[dict[str, float]]] = {tree: [] for tree in trees}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                for folder in trees.values():  # the run before the reps writes each tree's stored first page
                    record_store(browser, folder)
                for rep in range(args.reps):  # interleaved: the machine's load falls on every variant alike
                    torch_runs.append(import_torch_s())
                    for tree, folder in trees.items():
                        steps[tree].append(preload_steps(folder))
                    for name, (folder, script, visit, *stored) in variants.items():
                        store = folder / "first-page-store" if stored else None
                        runs[name].append(cold(browser, folder, script, visit, store))
                    print(f"rep {rep + 1}/{args.reps} done (load {os.getloadavg()[0]:.1f})", file=sys.stderr)
            finally:
                browser.close()
    finally:
        for folder in trees.values():
            shutil.rmtree(folder, ignore_errors=True)
    torch_s = statistics.median(torch_runs)
    floor = runs["bare Streamlit page (floor 2)"]
    floor_s = statistics.median(r["heatmap"] for r in floor)
    print(f"floor 1: python -c 'import torch' {torch_s:.2f} s median ({', '.join(f'{t:.2f}' for t in torch_runs)})")
    each = ", ".join(f"{r['heatmap']:.2f} (CPU {r['cpu']:.2f}) at load {r['load']:.1f}" for r in floor)
    print(f"floor 2: bare Streamlit page, start -> heatmap {floor_s:.2f} s median ({each})")
    for name in list(variants)[1:]:
        report(name, runs[name], torch_s, floor)
    if args.before:
        compare(runs, args.before)
    print("the preload's steps, one by one in a fresh process (median s, wall and process CPU; x its import torch):")
    for tree, rows in steps.items():
        names = [k for k in rows[0] if not k.startswith("cpu ") and k != "load"]
        total = statistics.median(sum(r[k] for k in names) for r in rows)
        cpu = statistics.median(sum(r["cpu " + k] for k in names) for r in rows)
        loads = ", ".join(f"{r['load']:.1f}" for r in rows)
        print(f"  dashboard {tree}: {total:.2f} s wall, {cpu:.2f} s CPU in all (load {loads})")
        for key in names:
            med, med_cpu = statistics.median(r[key] for r in rows), statistics.median(r["cpu " + key] for r in rows)
            ratio = statistics.median(r[key] / r["torch"] for r in rows)
            print(f"    {key:42s} {med:6.2f} s  {med_cpu:6.2f} s CPU  {ratio:5.2f} x torch")


if __name__ == "__main__":
    main()
