"""torch's threads per request (mha_viz.threads): set before torch loads, from MHA_VIZ_TORCH_THREADS or hosted mode;
a server started with it really runs torch on that many threads."""

from __future__ import annotations

import os
import subprocess
import sys

from mha_viz import threads


def test_the_setting_comes_from_the_env_or_hosted_mode(monkeypatch) -> None:
    monkeypatch.setattr(os, "environ", dict(os.environ))  # what configure_threads sets never outlives the test
    for name in (
        "MHA_VIZ_TORCH_THREADS",
        "MHA_VIZ_HOSTED",
        "MHA_VIZ_ALLOWED_MODELS",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    ):
        monkeypatch.delenv(name, raising=False)
    assert threads.configure_threads() is None and "OMP_NUM_THREADS" not in os.environ  # torch's default
    monkeypatch.setenv("MHA_VIZ_HOSTED", "1")
    assert threads.torch_threads() == 1
    monkeypatch.setenv("MHA_VIZ_TORCH_THREADS", "3")
    assert threads.torch_threads() == 3
    assert threads.configure_threads() is None and "OMP_NUM_THREADS" not in os.environ  # torch is loaded here:
    # too late for it, and the environment of this process's later subprocesses is left alone
    monkeypatch.setenv("MHA_VIZ_TORCH_THREADS", "lots")  # not a number: hosted mode's 1
    assert threads.torch_threads() == 1


def test_torch_runs_on_the_threads_asked_for() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    code = (
        "from mha_viz.threads import configure_threads; n = configure_threads(); "
        "import torch; print(n, torch.get_num_threads())"
    )
    out = subprocess.run([sys.executable, "-c", code], env={**env, "MHA_VIZ_TORCH_THREADS": "1"}, capture_output=True,
                         text=True, check=True, timeout=120)  # fmt: skip
    assert out.stdout.split() == ["1", "1"]
