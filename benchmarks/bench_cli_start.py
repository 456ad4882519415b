"""How long the command line takes to answer before any model work (issue 22 §1: `mha-viz --help` and argument
errors ≤ 0.5 s): `python -m mha_viz --help`, an unknown command, a bad option value, each against a bare
`python -c pass` started the same way in the same run (the interpreter's own start-up, the floor).

    python benchmarks/bench_cli_start.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

TARGET_S = 0.5
CASES = {
    "python -c pass (floor)": ["-c", "pass"],
    "mha-viz --help": ["-m", "mha_viz", "--help"],
    "mha-viz trace --help": ["-m", "mha_viz", "trace", "--help"],
    "unknown command": ["-m", "mha_viz", "no-such-command"],
    "bad --layer value": ["-m", "mha_viz", "trace", "--text", "hi", "--layer", "x"],
}


def timed(args: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], capture_output=True, check=False)
    return time.perf_counter() - start, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    floor = None
    print(f"{'case':<26} {'median s':>9} {'exit':>5} {'x floor':>8}  target ≤ {TARGET_S} s")
    for name, args in CASES.items():
        timed(args)  # warm the file cache
        times, codes = zip(*(timed(args) for _ in range(runs)), strict=True)
        median = statistics.median(times)
        floor = floor or median
        verdict = "" if name.endswith("(floor)") else ("ok" if median <= TARGET_S else "OVER")
        print(f"{name:<26} {median:>9.3f} {codes[0]:>5} {median / floor:>8.1f}  {verdict}")


if __name__ == "__main__":
    main()
