"""One layer's pooled exact maps at length (issue 38 §3): tiles.pooled before (the function as committed, loaded from
`git show HEAD:mha_viz/tiles.py` in this run) and after (tile_pool.pooled_maps), against the layer's share of
SmolLM2's own SDPA forward pass measured in the same run.

Run:  python benchmarks/bench_pooled.py [--tokens 8192] [--threads 0] [--no-ref]
Inputs: SmolLM2's shapes (q [1, 9, n, 64], k [1, 3, n, 64], scale 1/8, a causal bool mask [1, 1, n, n]), q and k
random (seeded; the time does not depend on the values), each row's exact log-sum-exp. Printed for the Overview's
tile side (48 cells a side: f = 171 at 8,192) and the Heads grid's (64 cells: f = 128): the CPU seconds (this
process's, the fairer figure on a shared machine) and wall seconds of before and after, both maps in one pass, the
max |after − before|, and (unless --no-ref) each one's max error against the same maps in float64. The floor: the
SDPA forward pass of SmolLM2 cut to its first 2 layers (no attention weights, the last position's logits), per
layer; ratio = pooled CPU s / the floor's CPU s per layer.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FLOOR_LAYERS = 2


def old_tiles() -> types.ModuleType:
    """mha_viz/tiles.py as committed (HEAD), as a module of its own."""
    src = subprocess.run(["git", "show", "HEAD:mha_viz/tiles.py"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    mod = types.ModuleType("old_tiles")
    exec(compile(src, "HEAD:mha_viz/tiles.py", "exec"), mod.__dict__)
    return mod


def timed(fn):
    c, w = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c, time.perf_counter() - w


def floor_per_layer(n: int) -> tuple[float, float]:
    """(CPU s, wall s) of one layer's share of SmolLM2's SDPA forward pass over n tokens."""
    import torch
    import transformers

    from mha_viz.models.sources import smollm2_dir

    model = transformers.AutoModelForCausalLM.from_pretrained(smollm2_dir(), attn_implementation="sdpa").eval()
    model.model.layers = model.model.layers[:FLOOR_LAYERS]
    model.config.num_hidden_layers = FLOOR_LAYERS
    ids = torch.randint(100, 40000, (1, n), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(input_ids=ids[:, :64], use_cache=False, logits_to_keep=1)  # warm
        _, c, w = timed(lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1))
    return c / FLOOR_LAYERS, w / FLOOR_LAYERS


def inputs(n: int):
    import torch

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 9, n, 64, generator=g) * 2  # [1, h, n, d]
    k = torch.randn(1, 3, n, 64, generator=g)  # [1, kv, n, d]
    allowed = torch.ones(n, n, dtype=torch.bool).tril()[None, None]  # [1, 1, n, n]
    lse = torch.empty(1, 9, n, dtype=torch.float64)
    for r0 in range(0, n, 256):
        s = torch.matmul(q[:, :, r0 : r0 + 256].double(), k.double().repeat_interleave(3, 1).transpose(-1, -2)) / 8
        s.masked_fill_(~allowed[..., r0 : r0 + 256, :], float("-inf"))
        lse[:, :, r0 : r0 + 256] = torch.logsumexp(s, -1)
    return q, k, lse, allowed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=0, help="torch's threads (0: as it starts)")
    ap.add_argument("--no-ref", action="store_true", help="skip the float64 reference (its time)")
    args = ap.parse_args()
    import os

    import torch

    from mha_viz.analysis.plans.long_views import grid_side
    from mha_viz.figures.common import OVERVIEW_TILE
    from mha_viz.pooling import pool_factor
    from mha_viz.tile_pool import pooled_maps

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    n = args.tokens
    old = old_tiles()
    q, k, lse, allowed = inputs(n)
    sides = (pool_factor(n, n, OVERVIEW_TILE), grid_side(n, n))
    floor_c, floor_w = floor_per_layer(n)
    print(f"SmolLM2 shapes, {n:,} tokens, {torch.get_num_threads()} torch threads, load average "
          f"{os.getloadavg()[0]:.1f}; floor: one layer's share of the SDPA pass {floor_c:.2f} CPU s "
          f"({floor_w:.2f} s wall)")  # fmt: skip
    print(f"{'map':<34} {'before CPU s':>12} {'after CPU s':>11} {'speed-up':>8} {'after/floor':>11} "
          f"{'max|after-before|':>17} {'err before':>10} {'err after':>10}")  # fmt: skip
    after_total = 0.0
    for name, f in zip(("Overview (f=%d)", "Heads grid (f=%d)"), sides, strict=True):
        before, cb, _ = timed(lambda f=f: old.pooled(q, k, lse.float(), f, 0.125, None, None, allowed))
        after, ca, _ = timed(lambda f=f: pooled_maps(q, k, lse.float(), (f,), 0.125, None, None, allowed)[0])
        after_total += ca
        err = ("", "")
        if not args.no_ref:
            ref = pooled_maps(q.double(), k.double(), lse, (f,), 0.125, None, None, allowed)[0].double()
            err = tuple(f"{float((m.double() - ref).abs().max()):.1e}" for m in (before, after))
        print(f"{name % f:<34} {cb:12.2f} {ca:11.2f} {cb / ca:8.2f} {ca / floor_c:11.2f} "
              f"{float((after - before).abs().max()):17.1e} {err[0]:>10} {err[1]:>10}")  # fmt: skip
    _, cab, wab = timed(lambda: pooled_maps(q, k, lse.float(), sides, 0.125, None, None, allowed))
    print(f"both maps in one pass (what ui/pool_ahead computes per layer): {cab:.2f} CPU s ({wab:.2f} s wall), "
          f"{cab / floor_c:.2f} × the layer's SDPA share (separately: {after_total:.2f} CPU s). Inside the "
          f"recording pass this would add ~{cab / floor_c:.2f} to the recording/SDPA ratio (target <= 1.25 "
          f"all told).")  # fmt: skip


if __name__ == "__main__":
    main()
