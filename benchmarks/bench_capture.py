"""Recording at the attention interface: what it costs, and whether concurrent requests still need a lock.

Run:  python benchmarks/bench_capture.py [--sizes 16,128,512] [--device cpu|cuda]
Same run, same bundled MiniLM weights:
- baseline: transformers' own eager attention, a plain forward pass (no recording);
- record:   mha_viz.pipeline.road.record (every call's q, k, v, mask and W^O output copied to the CPU, and our
            recomputation checked against the model's weights);
- traces:   record plus all 6 layer traces rebuilt by our engine (what the CLI's `trace` does).
Then two threads recording two texts at once through the one shared model (no lock), against the same
work done one after the other. Medians of calls timed in turns.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mha_viz.config import Config
from mha_viz.models.sources import bundled_model_dir
from mha_viz.pipeline.road import layer_trace, load, record


def median_s(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="16,128,512")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    import transformers as tf

    lm = load(Config(device=args.device))
    eager = tf.AutoModel.from_pretrained(bundled_model_dir(), attn_implementation="eager").eval().to(args.device)
    print(f"{'tokens':>7} {'eager forward':>14} {'record':>10} {'ratio':>6} {'+6 traces':>10} {'ratio':>6}")
    for n in (int(s) for s in args.sizes.split(",")):
        text = " ".join(["word"] * (n - 2))
        ids = torch.tensor([record(lm, text).tokens.ids], device=args.device)

        def plain(ids=ids) -> None:
            with torch.no_grad():
                eager(input_ids=ids)

        def rec(text=text) -> None:
            record(lm, text)

        def full(text=text) -> None:
            r = record(lm, text)
            for layer in range(6):
                layer_trace(lm, r, "encoder", layer, Config(device=args.device))

        base, ours, both = (median_s(f, args.reps) for f in (plain, rec, full))
        print(f"{n:>7} {base * 1e3:>11.1f} ms {ours * 1e3:>7.1f} ms {ours / base:>5.2f}x {both * 1e3:>7.1f} ms "
              f"{both / base:>5.2f}x")  # fmt: skip

    texts = ["The animal didn't cross the street because it was too tired " * 4, "Colourless green ideas " * 12]
    rounds = 6

    def work(text: str, out: list) -> None:
        for _ in range(rounds):
            out.append(record(lm, text))

    t0 = time.perf_counter()
    for text in texts:
        work(text, [])
    serial = time.perf_counter() - t0
    results: list[list] = [[], []]
    threads = [threading.Thread(target=work, args=(t, r)) for t, r in zip(texts, results, strict=True)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    parallel = time.perf_counter() - t0
    alone = [record(lm, t) for t in texts]
    crossed = sum(
        not torch.equal(r.run.calls[key].q, alone[i].run.calls[key].q)
        for i, rs in enumerate(results)
        for r in rs
        for key in r.run.calls
    )
    print(
        f"\ntwo threads, {rounds} records each, no lock: {parallel:.2f} s vs {serial:.2f} s one after the other "
        f"({serial / parallel:.2f}x throughput); calls that saw another request's tensors: {crossed}"
    )


if __name__ == "__main__":
    main()
