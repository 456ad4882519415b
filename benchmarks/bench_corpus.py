"""`mha-viz corpus` speed and memory (issue 26 §5): padded batches against one text per pass, the Ray engine with
1 and 2 workers, and peak resident memory over 200 and 5,000 texts.

Run:  python benchmarks/bench_corpus.py [--texts 160] [--batch 16] [--models minilm,smollm2] [--no-ray] [--quick]
  --quick   skips the 5,000-text memory run (about 3 minutes with MiniLM on 2 cores)

1. Local engine, texts/s, for each model: the same generated texts (8 to 60 words, seeded) scored in batches of
   --batch texts, padded (several texts per forward pass) and one text per pass, in this run. Also the model passes
   alone (batch_record.record_batch against pipeline.record), to show which part batching speeds up: the per-text
   roles scoring after the pass is the same work either way.
2. Ray engine (a local cluster started here), MiniLM: 1 and 2 workers (one torch thread each), texts/s from the
   first finished batch to the last (steady state; the start-up, cluster and each worker's model load, printed apart).
   From the 1-worker steady rate: what N machines of k workers would give, and where the driver, which adds every
   batch's partial sums in order, would cap it.
3. Peak resident memory of `mha-viz corpus` (a fresh process each, MiniLM, padded) over 200 and 5,000 texts, with
   its RSS sampled along the way: flat means the corpus never sits in memory (running sums per head only).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_VOCAB = """the animal street river bank money cat mat dog park rain sun tree road car book she he it they was were had
gave asked because when while after before and but so then again once twice tired wide slept sat crossed read wrote
ran walked quietly quickly slowly old new small large red blue"""
WORDS = tuple(_VOCAB.split())
PUNCT = (",", ",", ";", ":", ".")
NAMES = {"minilm": "", "smollm2": "smollm2"}


def make_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` texts of 8 to 60 words with punctuation and repeats (so every role score has something to find)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(8, 60))]
        for i in range(3, len(words) - 1, rng.randint(4, 9)):
            words[i] += rng.choice(PUNCT)
        out.append(" ".join(words).capitalize() + ".")
    return out


def write_texts(path: Path, n: int) -> Path:
    path.write_text("\n".join(make_texts(n)) + "\n", encoding="utf-8")
    return path


def local(models: list[str], n: int, batch: int) -> None:
    from mha_viz.pipeline.batch import groups, record_batch
    from mha_viz.pipeline.road import encode, record
    from mha_viz.studies import corpus, corpus_texts

    texts = make_texts(n)
    items = [corpus.Item(i, t) for i, t in enumerate(texts)]
    work = list(corpus_texts.batches(items, batch))
    print(f"1. local engine, {n} texts of 8-60 words, --batch {batch}, torch threads: {_threads()}")
    print(f"   {'model':<8} {'padded':>9} {'one by one':>11} {'ratio':>6}   model passes only: padded, alone, ratio")
    for name in models:
        scorer = corpus.Scorer(NAMES[name], None, "cpu")
        scorer.score(work[0])  # warm-up: first-call costs out of both timings
        timing = {}
        for mode in (True, False):
            scorer.batched = mode
            t = time.perf_counter()
            for b in work:
                scorer.score(b)
            timing[mode] = n / (time.perf_counter() - t)
        tokens = [encode(scorer.lm, x)[0] for x in texts]
        t = time.perf_counter()
        for start in range(0, n, batch):
            chunk = tokens[start : start + batch]
            for g in groups([len(x.ids) for x in chunk], batch, scorer.lm.n_heads):
                if len(g) > 1:
                    record_batch(scorer.lm, [chunk[i] for i in g])
                else:
                    record(scorer.lm, texts[start + g[0]])
        passes_padded = n / (time.perf_counter() - t)
        t = time.perf_counter()
        for x in texts:
            record(scorer.lm, x)
        passes_alone = n / (time.perf_counter() - t)
        print(f"   {name:<8} {timing[True]:>6.1f}/s {timing[False]:>8.1f}/s {timing[True] / timing[False]:>5.2f}x"
              f"   {passes_padded:>6.1f}/s {passes_alone:>6.1f}/s {passes_padded / passes_alone:>5.2f}x")  # fmt: skip
        del scorer


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def ray_engine(n: int, batch: int) -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        print("2. Ray engine: ray is not installed (pip install 'mha-viz[ray]'); skipped")
        return
    from mha_viz.studies import corpus, corpus_texts
    from mha_viz.studies.corpus_ray import run_ray

    items = [corpus.Item(i, t) for i, t in enumerate(make_texts(n))]
    print(f"2. Ray engine (local cluster on this {os.cpu_count()}-core machine), MiniLM, {n} texts, --batch {batch}")
    rates = {}
    for workers in (1, 2):
        marks: list[float] = []

        def done(_sums: corpus.Sums, marks: list[float] = marks) -> None:
            marks.append(time.perf_counter())

        t0 = time.perf_counter()
        sums = run_ray("", None, "cpu", corpus_texts.batches(iter(items), batch), None, done, workers)
        total = time.perf_counter() - t0
        steady = (n - batch) / (marks[-1] - marks[0]) if len(marks) > 1 else float("nan")
        rates[workers] = steady
        print(
            f"   {workers} worker(s): {steady:6.1f} texts/s steady (first to last batch), {n / total:5.1f} texts/s "
            f"with start-up ({marks[0] - t0:.1f} s to the first batch: cluster, model loads); {sums.texts} texts"
        )
    merge = _merge_rate(batch)
    per_worker = rates[1]
    print(f"   2 workers vs 1: {rates[2] / rates[1]:.2f}x on {os.cpu_count()} cores")
    print(f"   scaling (from the 1-worker rate, {per_worker:.1f} texts/s per worker on one core):")
    for machines, k in ((1, 2), (4, 8), (16, 8), (64, 8)):
        ideal = machines * k * per_worker
        cap = merge * batch  # the driver adds each batch's partial sums in order
        print(f"     {machines:>3} machine(s) x {k} workers (one per core): ~{min(ideal, cap):,.0f} texts/s"
              f"{'  (driver-bound)' if ideal > cap else ''}")  # fmt: skip
    busy = merge * batch / per_worker
    print(f"   the driver adds and checkpoints {merge:,.0f} partial sums/s ({merge * batch:,.0f} texts/s at --batch "
          f"{batch}); a worker spends {batch / per_worker:.2f} s on a batch, so one driver keeps ~{busy:,.0f} workers "
          "busy before it is the limit (it also reads the texts file and sends each batch)")  # fmt: skip


def _merge_rate(batch: int) -> float:
    """Batches per second the driver takes in: add a partial sum (MiniLM's shape) and write the checkpoint."""
    import numpy as np

    from mha_viz.studies import corpus

    part = corpus.Sums.empty(6, 12)
    part.total += np.random.default_rng(0).random(part.total.shape)
    part.labels["previous"] = np.ones_like(part.count)
    total = corpus.Sums.empty(6, 12)
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "heads.csv")
        t = time.perf_counter()
        for _ in range(500):
            total.merge(part)
            corpus.save_checkpoint(out, total, {"batch": batch})
        return 500 / (time.perf_counter() - t)


CHILD = """
import json, sys, time
from mha_viz.studies import corpus
from mha_viz.cli.main import main
samples = []  # RSS (MB) after each batch's checkpoint: the run as it goes
real = corpus.save_checkpoint
def noted(out, sums, meta):
    real(out, sums, meta)
    with open('/proc/self/status') as fh:
        samples.append(next(int(x.split()[1]) / 1024 for x in fh if x.startswith('VmRSS:')))
corpus.save_checkpoint = noted
t0 = time.perf_counter()
code = main(sys.argv[1:])
with open('/proc/self/status') as fh:  # VmHWM: this process's own peak (ru_maxrss counts the parent's at fork)
    peak = next(int(x.split()[1]) / 1024 for x in fh if x.startswith('VmHWM:'))
print(json.dumps({"code": code, "seconds": time.perf_counter() - t0, "samples": samples, "peak": peak}))
"""


def memory(sizes: list[int], batch: int) -> None:
    print(f"3. peak resident memory of `mha-viz corpus` (MiniLM, padded, --batch {batch}), a fresh process each")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            src = write_texts(Path(tmp) / f"texts{n}.txt", n)
            out = Path(tmp) / f"heads{n}.csv"
            run = subprocess.run([sys.executable, "-c", CHILD, "corpus", "--texts", str(src), "--out", str(out),
                                  "--batch", str(batch)], capture_output=True, text=True, cwd=ROOT,
                                 env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})  # fmt: skip
            if run.returncode != 0:
                print(f"   {n} texts: failed: {run.stderr[-500:]}")
                continue
            said = run.stdout.strip().splitlines()
            data = json.loads(said[-1])
            rss = data["samples"]
            at = ", ".join(f"{rss[min(len(rss) - 1, round(f * (len(rss) - 1)))]:.0f}" for f in (0, 0.25, 0.5, 0.75, 1))
            rate = n / data["seconds"]
            print(f"   {n:>5} texts: peak {data['peak']:.0f} MB; RSS after the first batch, 1/4, 1/2, 3/4 and the "
                  f"last of {len(rss)} batches (MB): {at}; {rate:.1f} texts/s ({data['seconds']:.0f} s)")  # fmt: skip
            print(f"          {said[0]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", type=int, default=160, help="texts for the speed runs (default 160)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--models", default="minilm,smollm2")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--quick", action="store_true", help="skip the 5,000-text memory run")
    args = ap.parse_args()
    local([m.strip() for m in args.models.split(",") if m.strip()], args.texts, args.batch)
    if not args.no_ray:
        ray_engine(args.texts, args.batch)
    memory([200] if args.quick else [200, 5000], args.batch)


if __name__ == "__main__":
    main()
