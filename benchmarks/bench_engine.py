"""Engine speed: our full trace vs torch's MultiheadAttention (with weights) and SDPA (without).

Run:  python benchmarks/bench_engine.py [--device cpu|cuda] [--sizes 16,128,512,2048]
All three compute the same layer (d_model 512, 8 heads, same weights) in the same run; the
figures are medians of calls timed in turns. Targets: ours <= 1.1x torch MHA at n <= 512 on CPU,
<= 1.5x at n = 2048.
"+head_out" also computes every head's contribution after W^O (the trace does that lazily, on
first access, because it costs about as much as the output projection itself).

Then a long text on the bundled SmolLM2 (8,192 positions): one layer recorded alone (run_layer: the pass stops
after it) and traced, at --long tokens and at a quarter of that in the same run: seconds and peak memory
above the loaded model, and their ratios. Target: 8,192 tokens fit in memory (under 12 GB on top of the model).
The whole recorded pass (every layer kept) is timed at the shorter length for comparison.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mha_viz.attention import compute_trace
from mha_viz.own import from_torch_mha

D_MODEL, HEADS = 512, 8
TARGET = 1.1  # n <= 512
TARGET_LONG = 1.5  # n = 2048 (and it must fit in memory)


def interleaved_medians(fns: list, device: torch.device, budget_s: float, min_reps: int = 7) -> list[float]:
    """Median seconds per call of each function, timed in turns (in a shuffled order each round).

    Interleaving makes drift on a shared machine hit every contender alike.
    """
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for fn in fns:
        for _ in range(3):
            fn()
    sync()
    times: list[list[float]] = [[] for _ in fns]
    start = time.perf_counter()
    order = list(range(len(fns)))
    shuffle = random.Random(0).shuffle
    while len(times[0]) < min_reps or (time.perf_counter() - start < budget_s and len(times[0]) < 1000):
        shuffle(order)  # no contender always runs first (or after the same other one)
        for i in order:
            t0 = time.perf_counter()
            fns[i]()
            sync()
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(b) for b in times]


def sdpa_layer(mha: torch.nn.MultiheadAttention, x: torch.Tensor) -> torch.Tensor:
    """The same layer with F.scaled_dot_product_attention: fastest path, no weights kept."""
    n = x.shape[0]
    qkv = F.linear(x, mha.in_proj_weight, mha.in_proj_bias)  # [n, 3d]
    q, k, v = (t.view(n, HEADS, -1).transpose(0, 1) for t in qkv.chunk(3, dim=-1))  # [h, n, dh]
    z = F.scaled_dot_product_attention(q, k, v)  # [h, n, dh]
    return mha.out_proj(z.transpose(0, 1).reshape(n, D_MODEL))  # [n, d]


LONG_TARGET_GB = 12.0


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _measured(fn) -> tuple[object, float, float]:
    """(result, seconds, peak MB above the resident memory before), the peak from VmHWM reset first."""
    import gc

    from mha_viz.runtime.allocator import release_memory

    gc.collect()
    release_memory()
    before = _status_mb("VmRSS")
    with open("/proc/self/clear_refs", "w") as fh:  # resets VmHWM to the current resident size
        fh.write("5")
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, _status_mb("VmHWM") - before


def long_text_run(n_long: int, layer: int) -> None:
    """One SmolLM2 layer at n_long tokens and at n_long // 4, recorded alone and traced (CPU, float32)."""
    import os

    os.environ.setdefault("MHA_VIZ_MAX_REQUEST_MB", str(64 * 1024))  # the benchmark measures; the app refuses
    from mha_viz.config import Config
    from mha_viz.models.load import load_model
    from mha_viz.models.run import run_layer, run_model
    from mha_viz.models.tokens import Tokens
    from mha_viz.pipeline.road import Recording, layer_trace
    from mha_viz.runtime.allocator import tune_allocator

    tune_allocator()  # as in the app: big blocks go back to the system when freed
    lm = load_model("smollm2", "cpu")
    part = lm.parts[0]
    ids = lm.tokenizer(" ".join(["The animal didn't cross the street because it was too tired."] * 900))["input_ids"]
    print(f"\nSmolLM2 ({lm.n_layers(part)} layers, {lm.n_heads} heads, max {lm.max_tokens} positions), "
          f"{part} layer {layer} alone: record + trace, CPU float32")  # fmt: skip

    def one(n: int, whole: bool = False):
        chosen = torch.tensor([ids[:n]])
        names = tuple(f"t{i}" for i in range(n))
        tokens = Tokens(tuple(ids[:n]), names, names, tuple(False for _ in range(n)))
        run = run_model(lm, chosen) if whole else run_layer(lm, chosen, part, layer)
        trace = layer_trace(lm, Recording(tokens, None, run), part, layer, Config())
        return float(trace.model_delta)

    one(16)  # warm-up
    results = {}
    for n, whole in ((n_long // 4, True), (n_long // 4, False), (n_long, False)):
        delta, took, peak = _measured(lambda n=n, whole=whole: one(n, whole))
        results[(n, whole)] = (took, peak)
        how = "whole pass recorded" if whole else "this layer alone   "
        print(f"  {n:>6} tokens, {how}: {took:7.2f} s, peak +{peak:8.0f} MB (model check {delta:.1e})", flush=True)
    (t_s, p_s), (t_l, p_l) = results[(n_long // 4, False)], results[(n_long, False)]
    ok = "ok" if p_l / 1024 <= LONG_TARGET_GB else "MISSED"
    print(f"  {n_long} / {n_long // 4} tokens: {t_l / t_s:.1f}x the time, {p_l / max(p_s, 1):.1f}x the memory "
          f"(16x the attention matrix); fits: {ok} (target <= {LONG_TARGET_GB:.0f} GB)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sizes", default="16,128,512,2048")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of timing per measurement")
    ap.add_argument("--long", type=int, default=8192, help="tokens of the SmolLM2 one-layer run (0: skip it)")
    ap.add_argument("--layer", type=int, default=0, help="the SmolLM2 layer traced")
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(D_MODEL, HEADS, bias=True).to(device).eval()
    weights = from_torch_mha(mha).to(device, torch.float32)
    print(f"device {device}, torch {torch.__version__}, threads {torch.get_num_threads()}, d_model {D_MODEL}, "
          f"{HEADS} heads; median ms per call")  # fmt: skip
    print(f"{'n':>6} {'mha-viz':>10} {'+head_out':>10} {'torch MHA':>10} {'SDPA':>10} {'vs MHA':>8} "
          f"{'+h_o vs MHA':>12} {'vs SDPA':>8}  target")  # fmt: skip
    for n in (int(s) for s in args.sizes.split(",")):
        x = torch.randn(n, D_MODEL, device=device)
        with torch.no_grad():
            ours, ours_ho, ref, fast = interleaved_medians(
                [
                    lambda x=x: compute_trace(weights, x, device=device),
                    lambda x=x: compute_trace(weights, x, device=device).head_out,
                    lambda x=x: mha(x, x, x, need_weights=True, average_attn_weights=False),
                    lambda x=x: sdpa_layer(mha, x),
                ],
                device,
                args.budget,
            )
        ratio = ours / ref
        limit = TARGET if n <= 512 else TARGET_LONG
        verdict = f"<= {limit}x " + ("ok" if ratio <= limit else "MISSED")
        print(f"{n:>6} {ours * 1e3:>10.3f} {ours_ho * 1e3:>10.3f} {ref * 1e3:>10.3f} {fast * 1e3:>10.3f} "
              f"{ratio:>7.2f}x {ours_ho / ref:>11.2f}x {ours / fast:>7.2f}x  {verdict}")  # fmt: skip
    if args.long:
        long_text_run(args.long, args.layer)


if __name__ == "__main__":
    main()
