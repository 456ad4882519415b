"""The score split's speed (issue 37 §4): one (head, query, key pair) split on MiniLM at the seed sentence and on
SmolLM2 at about 100 tokens, against one forward pass measured in the same run.

Run:  python benchmarks/bench_why.py [--repeats 5]
Printed per model: one plain forward pass (no recording); the recording pass (the chosen layer's call and the
sources at the three tokens); the split after the recording (residual sources, frozen norms, q/k parts, the two
tables, every check against the model's own numbers; targets ≤ 1 s MiniLM, ≤ 3 s SmolLM2); the whole why_at; ratios
to the plain pass; and the recorded sources' bytes (only the three tokens are kept).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from harness import median_time

from mha_viz.analysis.referents import word
from mha_viz.config import Config
from mha_viz.models.score_record import recording_sources
from mha_viz.models.score_split import sides
from mha_viz.pipeline.door import run
from mha_viz.pipeline.road import encode, load
from mha_viz.studies.why import why_at

SEED = "The animal didn't cross the street because it was too tired"
LONG = (
    "A farmer walked along the road to the market early in the morning, carrying apples and bread for his family. "
    "The town was busy, and carts moved slowly past the old church and the bakery on the corner of the square. "
    "Children played near the fountain while their parents talked about the weather and the price of grain. "
    "Later that day a stray dog followed the farmer home, and his daughter gave it a bowl of water and some bread. "
    + SEED
)
CASES = {"minilm": ("", SEED, 3, 1, 1.0), "smollm2": ("smollm2", LONG, 29, 3, 3.0)}  # model, text, layer, head, s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="minilm,smollm2")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"torch threads: {torch.get_num_threads()}")
    for key in args.models.split(","):
        bench(key, args.repeats)


def bench(key: str, repeats: int) -> None:
    name, text, layer, head, target = CASES[key]
    lm = load(Config(model=name))
    tokens = encode(lm, text)[0]
    labels = [word(lab) for lab in tokens.labels]  # "it (87)" -> "it"
    i = max(n for n, lab in enumerate(labels) if lab == "it")
    j, jv = labels.index("animal"), labels.index("street")
    ids = torch.tensor([tokens.ids])
    part = lm.parts[0]
    one, _ = median_time(lambda: run(lm, ids, record=False), repeats)
    positions = tuple(sorted({i, j, jv}))

    def recorded():
        with recording_sources(lm, part, layer, positions) as rec:
            call = run(lm, ids, only=(part, layer), extras=False).calls[(part, layer)]
        return rec, call

    took_rec, (rec, call) = median_time(recorded, repeats)
    took_split, sd = median_time(lambda: sides(lm, part, layer, head, rec, call), repeats)
    took_all, w = median_time(lambda: why_at(lm, tokens, layer, head, i, j, jv), repeats)
    kept = sum(t.numel() * t.element_size() for d in (rec.h_in, rec.x, rec.o_in, rec.o_out) for t in d.values())
    kept += sum(o.numel() * o.element_size() for s in rec.subs.values() for _, o in s.values())
    print(
        f"{key}: {len(labels)} tokens, layer {layer} head {head}, {len(sd.q_sources)} query sources × "
        f"{len(sd.k_sources)} key sources; one forward pass {one * 1e3:.1f} ms; recording pass "
        f"{took_rec * 1e3:.1f} ms ({took_rec / one:.2f} passes); split after the recording {took_split * 1e3:.1f} "
        f"ms (target ≤ {target:g} s: {'met' if took_split <= target else 'MISSED'}; {took_split / one:.2f} "
        f"passes); whole why_at {took_all * 1e3:.1f} ms ({took_all / one:.2f} passes); sources kept "
        f"{kept / 2**20:.2f} MB at 3 tokens; s_ij − s_ij' = {w.score - w.score_versus:+.4f}"
    )


if __name__ == "__main__":
    main()
