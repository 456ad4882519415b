"""SmolLM2's whole window in tiles: memory and time of a long recording against the model's own pass (issue 38 §2).

Run:  python benchmarks/bench_long_tiles.py [--tokens 8192 2048] [--layer 9] [--device cuda] [--busy 2]
(``--busy N``: every step with N processes beside it that keep a core busy each, a shared user's machine)
Each step runs in a fresh process (its own peak memory): for each length,
  floor        the model's own forward pass with SDPA (no attention weights), the last position's logits only;
  record       mha-viz's whole recording (pipeline.road.record: every layer tiled: the fused kernel, q, k, v, the
               rows' log-sum-exp, the check rows; no pooled map: afterwards one layer's pooled map is computed on
               demand, as a view asks for it, and its CPU seconds printed as pooled_layer_cpu_s);
  floor_layer  the SDPA pass up to the shown layer (stopped after its attention);
  first        the first view's recording (road.record_layer: the pass up to the shown layer, that layer recorded).
Printed: seconds (wall, and the process's CPU seconds: the fairer figure on a shared machine), peak RSS of the
process (the model included) and the peak above the loaded model (sampled every 10 ms), and the ratios record / floor
(target <= 1.25), first / floor_layer (<= 1.25), record's peak (<= 2.5 GB), how many of the recording's calls ran
fused (models/fused.py) and the load average. ``--device cuda``: the model and inputs on the GPU, torch.cuda.synchronize
before each clock is read, the peak is torch.cuda.max_memory_allocated plus the process's peak RSS; every step first
runs once untimed on WARM_TOKENS tokens (the GPU's first launches are not the steps' cost). Every step's
process first sets what the app, the CLI and the notebook set before torch loads (runtime.before_torch: threads,
huge pages, big blocks handed back to the system when freed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
STEPS = ("floor", "record", "floor_layer", "first")
WORDS = ("animal", "street", "river", "teacher", "garden", "engine", "letter", "window", "market", "doctor")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class Peak:
    """The highest RSS seen while the block runs (sampled every 10 ms); on a GPU plus the most GPU memory allocated."""

    def __init__(self, device: str = "cpu") -> None:
        self.gpu = device.startswith("cuda")

    def __enter__(self) -> Peak:
        self.base, self.peak, self._on = rss(), rss(), True
        if self.gpu:
            import torch

            torch.cuda.reset_peak_memory_stats()
            self.base += torch.cuda.memory_allocated()
        self._t = threading.Thread(target=self._watch, daemon=True)
        self._t.start()
        return self

    def _watch(self) -> None:
        while self._on:
            self.peak = max(self.peak, rss())
            time.sleep(0.01)

    def __exit__(self, *exc: object) -> None:
        self._on = False
        self._t.join()
        self.peak = max(self.peak, rss())
        if self.gpu:
            import torch

            self.peak += torch.cuda.max_memory_allocated()


def long_text(tokenizer: object, n: int) -> str:
    body = " ".join(f"In story {i} the {WORDS[i % 10]} did not cross the {WORDS[(3 * i + 1) % 10]} because it was "
                    f"too {('tired', 'wide', 'late', 'busy')[(i * 7) % 4]}." for i in range(n // 8))  # fmt: skip
    ids = tokenizer(body, add_special_tokens=False)["input_ids"][:n]
    return tokenizer.decode(ids)


WARM_TOKENS = 1024  # on a GPU every step first runs once untimed on this many tokens (both sides of each ratio)


class Stop(Exception):
    pass


def one(step: str, n: int, layer: int, device: str = "cpu") -> dict:
    from mha_viz.runtime import before_torch

    before_torch()  # as the app, the CLI and the notebook: huge pages, big blocks given back when freed (every step)
    import torch

    from mha_viz.config import Config
    from mha_viz.models.sources import smollm2_dir
    from mha_viz.pipeline import road
    from mha_viz.selection import Selection

    torch.set_grad_enabled(False)
    warm = device.startswith("cuda")
    if step.startswith("floor"):
        import transformers

        model = transformers.AutoModelForCausalLM.from_pretrained(smollm2_dir(), attn_implementation="sdpa").eval()
        model = model.to(device)
        tok = transformers.AutoTokenizer.from_pretrained(smollm2_dir())
        ids = torch.tensor([tok(long_text(tok, n))["input_ids"]], device=device)
        if step == "floor_layer":
            attn = model.model.layers[layer].self_attn

            def stop(*_: object) -> None:
                raise Stop

            attn.register_forward_hook(stop)
        if warm:  # the GPU's first launches (kernels chosen, handles made) paid before the clock starts
            with contextlib.suppress(Stop):
                model(input_ids=ids[:, :WARM_TOKENS], use_cache=False, logits_to_keep=1)
        with Peak(device) as p:
            t0, c0 = clock(device)
            with contextlib.suppress(Stop):
                model(input_ids=ids, use_cache=False, logits_to_keep=1)
            t1, c1 = clock(device)
        extra = {}
    else:
        lm = road.load(Config(model="smollm2", device=device))

        def go(text: str) -> road.Recording:
            if step == "record":
                return road.record(lm, text, tile_cells=256)
            return road.record_layer(lm, Selection(Config(model="smollm2", device=device), text, None, None, layer))

        if warm:
            go(long_text(lm.tokenizer, WARM_TOKENS))
        text = long_text(lm.tokenizer, n)
        with Peak(device) as p:
            t0, c0 = clock(device)
            rec = go(text)
            t1, c1 = clock(device)
        calls = list(rec.run.calls.values())
        extra = {"delta": max(c.delta for c in calls), "fused": sum(c.fused for c in calls), "calls": len(calls)}
        if step == "record":  # one layer's pooled map on demand (the Overview's 48 a side), not part of the recording
            from mha_viz.pooling import pool_factor

            call = rec.run.calls[(lm.part(None), layer)]
            _, c2 = clock(device)
            call.pooled_map(pool_factor(call.q.shape[-2], call.k.shape[-2], 48))
            extra["pooled_layer_cpu_s"] = clock(device)[1] - c2
        n = len(rec.tokens.ids)
    return {
        "step": step,
        "n": int(ids.shape[1]) if step.startswith("floor") else n,
        "s": t1 - t0,
        "cpu_s": c1 - c0,
        "peak_gb": p.peak / 1e9,
        "above_gb": (p.peak - p.base) / 1e9,
        "load": os.getloadavg()[0],
        **extra,
    }


def median_run(runs: list[dict]) -> dict:
    """One step's runs as one: the median of each number (seconds, CPU seconds, peaks, load)."""
    import statistics

    return {k: statistics.median(r[k] for r in runs) if isinstance(v, float) else v for k, v in runs[0].items()}


def paired(runs: dict[str, list[dict]]) -> float:
    """The median over turns of first / floor_layer seconds, each pair run one after the other (a drifting load)."""
    import statistics

    return statistics.median(a["s"] / b["s"] for a, b in zip(runs["first"], runs["floor_layer"], strict=True))


def clock(device: str) -> tuple[float, float]:
    """(wall, this process's CPU seconds), the GPU's queued work finished first."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    return time.perf_counter(), time.process_time()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, nargs="+", default=[8192, 2048])
    ap.add_argument("--layer", type=int, default=9)
    ap.add_argument("--one", default="")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the model and inputs on the GPU)")
    ap.add_argument("--steps", nargs="+", default=list(STEPS), choices=STEPS, help="the steps to run (default: all)")
    ap.add_argument("--busy", type=int, default=0, help="processes beside every step that keep a core busy each")
    ap.add_argument("--repeats", type=int, default=1, help="the steps run this many times in turn (medians printed)")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.tokens[0], args.layer, args.device)))
        return
    from harness import Busy

    with Busy(args.busy):
        run(args)


def run(args: argparse.Namespace) -> None:
    for n in args.tokens:
        runs: dict[str, list[dict]] = {}
        for _ in range(args.repeats):  # in turn: a load that drifts weighs on every step alike
            for step in args.steps:
                cmd = [sys.executable, __file__, "--one", step, "--tokens", str(n), "--layer", str(args.layer),
                       "--device", args.device]  # fmt: skip
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
                runs.setdefault(step, []).append(json.loads(out))
                print(json.dumps(runs[step][-1]), flush=True)
        got = {step: median_run(got) for step, got in runs.items()}
        if {"floor_layer", "first"} <= set(got) != set(STEPS):
            fl, fi = got["floor_layer"], got["first"]
            print(f"{n} tokens: first view {fi['s']:.1f} s ({fi['cpu_s']:.1f} CPU s) vs pass to layer {args.layer} "
                  f"{fl['s']:.1f} s ({fl['cpu_s']:.1f} CPU s): ratio {fi['s'] / fl['s']:.2f} (target <= 1.25), CPU "
                  f"{fi['cpu_s'] / fl['cpu_s']:.2f}; median of each turn's own ratio {paired(runs):.2f}; {args.busy} "
                  "busy processes beside it", flush=True)  # fmt: skip
        if set(got) != set(STEPS):
            continue
        rec, first = got["record"], got["first"]
        print(f"{n} tokens: record {rec['s']:.1f} s vs SDPA pass {got['floor']['s']:.1f} s: ratio "
              f"{rec['s'] / got['floor']['s']:.2f} (target <= 1.25); first view {first['s']:.1f} s vs pass to layer "
              f"{args.layer} {got['floor_layer']['s']:.1f} s: ratio {first['s'] / got['floor_layer']['s']:.2f} "
              f"(target <= 1.25); CPU-second ratios {rec['cpu_s'] / got['floor']['cpu_s']:.2f} and "
              f"{first['cpu_s'] / got['floor_layer']['cpu_s']:.2f}; record peak {rec['peak_gb']:.2f} GB "
              f"({rec['above_gb']:.2f} GB above the loaded "
              f"model; SDPA pass peak {got['floor']['peak_gb']:.2f} GB; target <= 2.5 GB); self-check "
              f"max |diff| {rec['delta']:.1e}; fused calls {rec['fused']}/{rec['calls']} (first view: "
              f"{first['fused']}/{first['calls']}); one layer's pooled map on demand (not in the recording) "
              f"{rec.get('pooled_layer_cpu_s', float('nan')):.1f} CPU s; load average {rec['load']:.1f}; "
              f"{args.busy} busy processes beside it",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
