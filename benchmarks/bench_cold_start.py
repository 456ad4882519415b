"""Cold start: seconds from `streamlit run app.py` to a first visitor's heatmap drawn in Chromium (issue 36 §6),
against two floors measured in the same run.

Run:  python benchmarks/bench_cold_start.py [--reps 3]
Each rep, in turn:
  - floor 1: `python -c "import torch"` (what any page of this dashboard must import);
  - floor 2: a bare Streamlit page (benchmarks/floor_app.py: one Plotly heatmap) from `streamlit run` to its heatmap
    drawn, the visitor arriving as soon as /_stcore/health says ok;
  - the dashboard as the Docker image runs it (app.py and mha_viz copied to a folder and compiled to bytecode, as
    the Dockerfile does), the visitor arriving as soon as /_stcore/health says ok (no proxy), and again arriving
    when /ready says ok (behind deploy/haproxy.cfg or Docker's HEALTHCHECK);
  - the same without bytecode (PYTHONDONTWRITEBYTECODE=1 and no __pycache__: what the image did before).
Also the preload's steps timed one by one in a fresh process (with and without bytecode), each against that
process's own `import torch`.
Printed per variant: the median and each rep of start -> heatmap, with its ratio to both floors (target <= 6 s), and
where the time goes (server answering, /ready, the preload's imports and model from its MHA_VIZ_TIMINGS line).
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

from harness import CHROMIUM, CHROMIUM_ARGS, FIRST_GRID_JS, ROOT, check_chromium, free_port
from playwright.sync_api import sync_playwright

TARGET_S = 6.0
HEATMAP = f"({FIRST_GRID_JS})() && ({FIRST_GRID_JS})().n > 0"


def import_torch_s() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - t0


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200 and resp.read().strip() == b"ok"
    except (urllib.error.HTTPError, OSError):
        return False


# The preload's own steps (mha_viz/serve/start.py: import_heavy, then the model), timed one by one in a fresh process.
STEPS = """
import importlib, json, sys, time
out, t = {}, time.perf_counter()
def step(name, *modules, attrs=()):
    global t
    for m in modules:
        mod = importlib.import_module(m)
        for a in attrs:
            getattr(mod, a)
    now = time.perf_counter(); out[name] = out.get(name, 0) + now - t; t = now
step("torch", "torch")
step("transformers, config, tokenizer", "transformers", attrs=("AutoConfig", "AutoTokenizer"))
step("transformers' modeling code", "transformers", attrs=("AutoModel", "AutoModelForCausalLM", "PreTrainedModel"))
step("numpy, pandas, pyarrow", "numpy", "pandas", "pyarrow")
step("plotly", "plotly.graph_objects", "plotly.io", "plotly.subplots")
step("streamlit", "streamlit")
step("mha_viz's dashboard", "mha_viz.figures", "mha_viz.ui")
from mha_viz.serve.start import import_heavy
import_heavy(); step("the rest of import_heavy")
from mha_viz.ui.cache import get_model
get_model("", "cpu"); step("the model's load")
print(json.dumps(out))
"""


def preload_steps(folder: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(folder)}
    done = subprocess.run([sys.executable, "-c", STEPS], cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def copy_app(bytecode: bool) -> Path:
    """app.py, mha_viz and .streamlit in a fresh folder (the image's /app), compiled when ``bytecode``."""
    dest = Path(tempfile.mkdtemp(prefix="mha-viz-cold-"))
    shutil.copy2(ROOT / "app.py", dest / "app.py")
    shutil.copytree(ROOT / ".streamlit", dest / ".streamlit")
    shutil.copytree(ROOT / "mha_viz", dest / "mha_viz", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "benchmarks" / "floor_app.py", dest / "floor_app.py")
    if bytecode:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        subprocess.run([sys.executable, "-m", "compileall", "-q", "app.py", "mha_viz"], cwd=dest, env=env, check=True)
    return dest


def cold(browser, folder: Path, script: str, visit: str) -> dict[str, float]:
    """Start `streamlit run script` in ``folder``; a visitor opens the page once ``visit`` ("health" or "ready")
    answers ok. Seconds from the start to each step."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    timings = folder / f"timings-{port}.jsonl"
    env = {**os.environ, "MHA_VIZ_TIMINGS": str(timings), "PYTHONPATH": str(folder)}
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
        page.wait_for_function(HEATMAP, timeout=300_000, polling=50)
        page.wait_for_selector(".js-plotly-plot .heatmaplayer", timeout=60_000)
        out["heatmap"] = time.perf_counter() - t0
        page.close()
        for line in timings.read_text().splitlines() if timings.exists() else ():
            rec = json.loads(line)
            if rec["kind"] == "preload":
                out["imports"], out["model"] = rec["at"] - rec["s"] - wall0, rec["at"] - wall0
            elif rec["kind"] == "page" and "page_run" not in out:
                out["page_run"] = rec["s"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return out


def report(name: str, runs: list[dict[str, float]], torch_s: float, floor_s: float) -> None:
    heat = statistics.median(r["heatmap"] for r in runs)
    verdict = "ok" if heat <= TARGET_S else "MISSED"
    print(f"{name}: start -> heatmap {heat:.2f} s median (target <= {TARGET_S:.0f} s: {verdict}) = "
          f"{heat / torch_s:.2f} x import torch, {heat / floor_s:.2f} x the bare page")  # fmt: skip
    keys = ("health", "ready", "imports", "model", "page_run", "heatmap")
    for r in runs:
        print("    " + " | ".join(f"{k} {r[k]:.2f}" for k in keys if k in r))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    check_chromium()
    folders = {True: copy_app(True), False: copy_app(False)}
    variants = {  # name: (folder, script, the visitor comes when this answers ok)
        "bare Streamlit page (floor 2)": (folders[True], "floor_app.py", "health"),
        "dashboard, bytecode, visitor at /_stcore/health": (folders[True], "app.py", "health"),
        "dashboard, bytecode, visitor at /ready": (folders[True], "app.py", "ready"),
        "dashboard, no bytecode, visitor at /_stcore/health": (folders[False], "app.py", "health"),
    }
    torch_runs: list[float] = []
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    steps: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                for rep in range(args.reps):  # interleaved: the machine's load falls on every variant alike
                    torch_runs.append(import_torch_s())
                    for bytecode, folder in folders.items():
                        steps[bytecode].append(preload_steps(folder))
                    for name, (folder, script, visit) in variants.items():
                        runs[name].append(cold(browser, folder, script, visit))
                    print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)
            finally:
                browser.close()
    finally:
        for folder in folders.values():
            shutil.rmtree(folder, ignore_errors=True)
    torch_s = statistics.median(torch_runs)
    floor_s = statistics.median(r["heatmap"] for r in runs["bare Streamlit page (floor 2)"])
    print(f"floor 1: python -c 'import torch' {torch_s:.2f} s median ({', '.join(f'{t:.2f}' for t in torch_runs)})")
    print(f"floor 2: bare Streamlit page, start -> heatmap {floor_s:.2f} s median")
    for name in list(variants)[1:]:
        report(name, runs[name], torch_s, floor_s)
    print("the preload's steps, one by one in a fresh process (median s; x its own import torch):")
    for bytecode in (True, False):
        rows = steps[bytecode]
        total = statistics.median(sum(r.values()) for r in rows)
        print(f"  {'with' if bytecode else 'without'} bytecode for mha_viz: {total:.2f} s in all")
        for key in rows[0]:
            med = statistics.median(r[key] for r in rows)
            ratio = statistics.median(r[key] / r["torch"] for r in rows)
            print(f"    {key:34s} {med:6.2f} s  {ratio:5.2f} x torch")


if __name__ == "__main__":
    main()
