"""How many CPU threads torch uses per request, set before torch is imported.

On a server shared by many sessions (the hosted demo, benchmarks/load_test.py with 10 users on 2 cores), torch
giving every request all cores makes the requests' threads fight over them (one 70 s run of that benchmark: server
time p50 1.69 s with the default, 0.45 s with one thread each; a longer run with one thread read 2.1 s, the ten
test browsers sharing the same cores, so the gain is not established).
One user alone on their own machine wants all cores (its long texts are matrix products). So: MHA_VIZ_TORCH_THREADS
(a positive number) if set, else 1 in hosted mode, else torch's own default (all cores). torch reads it once,
when it is first imported (OMP_NUM_THREADS, MKL_NUM_THREADS); an explicit OMP_NUM_THREADS is left alone.
Setting torch's count per request at run time was tried and was worse (p50 3.4 s: resizing the pools per run)."""

from __future__ import annotations

import os
import sys

from mha_viz.config import hosted

ENV = "MHA_VIZ_TORCH_THREADS"


def torch_threads() -> int | None:
    """The threads per request this deployment asks for (None: torch's default)."""
    raw = os.environ.get(ENV, "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return 1 if hosted() else None


def configure_threads() -> int | None:
    """Put the setting where torch reads it, if torch is not imported yet (later it would only reach the
    subprocesses this process starts). Returns the count set, or None."""
    n = torch_threads()
    if n is None or "torch" in sys.modules:
        return None
    os.environ.setdefault("OMP_NUM_THREADS", str(n))
    os.environ.setdefault("MKL_NUM_THREADS", str(n))
    return n
