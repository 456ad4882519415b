"""Calibrate pipeline/budget.py's time model: time views through Streamlit's AppTest (the page's own road) and print
each measured time beside the model's estimate.

    .venv/bin/python benchmarks/bench_view_cost.py "W^O" src=Own+weights d_model=2048 own_heads=256 words=60

Arguments after the view are link parameters (key=value); words=N makes a text of N words, repeat=K runs it K
times. Prints one line per run: view, words, wall seconds of the page (after one warm-up run that loads the
model); compare them with budget.seconds() for the same sizes. Measured on the 2-core machine (load ≈ 5):
own weights d_model 2048 × 256 heads, W^O, 60 words: 5.6 s (estimate 5.2 s); 300 words: 10.7 s.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")
WORDS = ("the animal didn't cross the street because it was too tired and the river was wide " * 200).split()


def run(view: str, params: dict[str, str]) -> float:
    at = AppTest.from_file(APP, default_timeout=600)
    for k, v in params.items():
        at.query_params[k] = v
    at.query_params["view"] = view
    start = time.perf_counter()
    at.run()
    took = time.perf_counter() - start
    problems = [e.value for e in at.exception] + [e.value for e in at.error]
    words = len(params.get("text", "").split())
    print(f"{view!r} {words} words: {took:.2f} s", f"errors: {repr(problems)[:300]}" if problems else "", flush=True)
    return took


def main(argv: list[str]) -> None:
    view, args = argv[0], dict(a.split("=", 1) for a in argv[1:])
    params = {k: v for k, v in args.items() if k not in ("words", "repeat")}
    if "words" in args:
        params["text"] = " ".join(WORDS[: int(args["words"])])
    run(view, params | {"text": "warm up"})  # loads the model
    for _ in range(int(args.get("repeat", "1"))):
        run(view, params)


if __name__ == "__main__":
    main(sys.argv[1:])
