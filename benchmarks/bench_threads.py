"""torch's threads on a quiet and on a busy machine (issue 22 §4): a whole-model view's work (Head importance on
MiniLM: 73 passes; SmolLM2's trace of a 512-token text), each in a fresh process, with torch's default of every core,
with one thread, and with runtime.threads.adapt (the cores other processes leave free, measured before the work, as
the CLI does and the app does before each run). Quiet, then with two busy processes beside it (users' machines are
shared).

Run:  python benchmarks/bench_threads.py [--repeats 3]
Printed per work and machine state: median seconds of each setting, and the ratios adaptive / one thread (target on
a busy machine: <= 1.2, "never slower than one thread would be") and adaptive / default (quiet: ~1, it keeps every
core when they are free).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Busy  # noqa: E402

WORK = {
    "importance (MiniLM)": """
from mha_viz.config import Config
from mha_viz.studies import importance as im
from mha_viz.pipeline.road import load
lm = load(Config())
scorer = im.Scorer(lm, ["The animal didn't cross the street because it was too tired"])
run = lambda: im.head_importance(scorer)
""",
    "trace 512 tokens (SmolLM2)": """
from mha_viz.config import Config
from mha_viz.pipeline.road import load, traces
config = Config(model="smollm2")
lm = load(config)
text = " ".join(["The animal didn't cross the street because it was too tired."] * 40)
run = lambda: traces(config, text, lm=lm)
""",
}
TIMED = """
import time, torch
from mha_viz.runtime import threads
n = threads.adapt(probe=True) if ADAPT else None
t = time.perf_counter()
run()
print(f"{time.perf_counter() - t:.4f} {torch.get_num_threads()}")
"""
SETTINGS = {"default": {"OMP_NUM_THREADS": str(os.cpu_count())}, "one thread": {"OMP_NUM_THREADS": "1"}, "adaptive": {}}


def once(work: str, setting: str) -> tuple[float, int]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MHA_VIZ_TORCH_THREADS")}
    env.update(SETTINGS[setting], PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false")
    code = WORK[work] + f"\nADAPT = {setting == 'adaptive'}\n" + TIMED
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    seconds, n = out.stdout.split()[-2:]
    return float(seconds), int(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"{os.cpu_count()} cores")
    for busy in (0, 2):
        with Busy(busy):
            for work in WORK:
                got = {s: [once(work, s) for _ in range(args.repeats)] for s in SETTINGS}
                med = {s: statistics.median(t for t, _ in v) for s, v in got.items()}
                threads = {s: sorted({n for _, n in v}) for s, v in got.items()}
                state = "quiet" if not busy else f"{busy} busy processes"
                print(
                    f"{work}, {state}: "
                    + ", ".join(f"{s} {med[s]:.2f} s (threads {threads[s]})" for s in SETTINGS)
                    + f"; adaptive / one thread = {med['adaptive'] / med['one thread']:.2f}"
                    + f" (target <= 1.2 when busy), adaptive / default = {med['adaptive'] / med['default']:.2f}"
                )


if __name__ == "__main__":
    main()
