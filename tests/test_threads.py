"""torch's threads per request (runtime.threads): set before torch loads, from MHA_VIZ_TORCH_THREADS or hosted mode;
a server started with it really runs torch on that many threads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mha_viz.runtime import threads


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
        "from mha_viz.runtime.threads import configure_threads; n = configure_threads(); "
        "import torch; print(n, torch.get_num_threads())"
    )
    out = subprocess.run([sys.executable, "-c", code], env={**env, "MHA_VIZ_TORCH_THREADS": "1"}, capture_output=True,
                         text=True, check=True, timeout=120)  # fmt: skip
    assert out.stdout.split() == ["1", "1"]


def _unfixed(monkeypatch) -> None:
    for name in ("MHA_VIZ_TORCH_THREADS", "MHA_VIZ_HOSTED", "MHA_VIZ_ALLOWED_MODELS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "_last", None)


def four_cores(monkeypatch, samples: list[tuple[float, float, float]]) -> None:
    """A machine of 4 cores whose /proc/stat and own CPU time read as ``samples`` (wall, busy, own), one per look,
    no sleeping and nothing fixing the count."""
    _unfixed(monkeypatch)
    looks = iter(samples)
    monkeypatch.setattr(threads, "_sample", lambda: next(looks))
    monkeypatch.setattr(threads, "cores", lambda: 4)
    monkeypatch.setattr(threads.time, "sleep", lambda s: None)


@pytest.fixture
def torch_threads():
    """torch, its thread count put back after the test."""
    import torch

    before = torch.get_num_threads()
    yield torch
    torch.set_num_threads(before)


def test_adapt_gives_torch_the_cores_others_leave_free(monkeypatch, torch_threads) -> None:
    """/proc/stat and this process's CPU time, read as a sequence: 4 cores; over the probe's 0.2 s the machine was
    busy for 0.7 core-seconds, of which this process 0.2: others kept 2.5 cores busy, so torch gets 4 − 2 (round half
    to even: 2.5 → 2) = 2 threads, then all 4 when the others stop. A look within LOOK_WINDOW_S changes nothing."""
    torch = torch_threads
    four_cores(monkeypatch, [(0.0, 0.0, 0.0), (0.2, 0.7, 0.2), (0.3, 0.8, 0.3), (1.2, 1.7, 1.2)])
    torch.set_num_threads(4)
    assert threads.adapt(probe=True) == 2 and torch.get_num_threads() == 2
    assert threads.adapt() is None and torch.get_num_threads() == 2  # 0.1 s later: too soon to tell
    assert threads.adapt() == 4 and torch.get_num_threads() == 4  # (4.5 − 3.5) − (2 − 1) = 0 others


def test_adapt_leaves_a_fixed_count_alone(monkeypatch) -> None:
    _unfixed(monkeypatch)
    monkeypatch.setenv("MHA_VIZ_TORCH_THREADS", "1")
    monkeypatch.setattr(threads, "_sample", lambda: (_ for _ in ()).throw(AssertionError("measured")))
    assert threads.fixed() and threads.adapt(probe=True) is None


def test_busy_processes_are_seen_on_this_machine(monkeypatch) -> None:
    """Two real busy processes: the probe counts at least one busy core that is not this process's."""
    _unfixed(monkeypatch)
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        threads.others_busy()  # the first look
        import time

        time.sleep(0.6)
        others = threads.others_busy()
    finally:
        for p in spin:
            p.kill()
            p.wait()
    assert others is not None and others >= min(1.5, threads.cores() - 0.5), others


def test_adapt_now_looks_at_the_last_moment_only(monkeypatch, torch_threads) -> None:
    """Before a long text's pass: a fresh PROBE_S window, not the one since the last look. Here the others kept 2
    of 4 cores busy for 10 s since the last look (a browser drawing) and none in the fresh window: torch gets all 4."""
    torch = torch_threads
    four_cores(monkeypatch, [(10.0, 20.0, 0.0), (10.2, 20.0, 0.0)])  # (wall, busy, own): the look now, after PROBE_S
    monkeypatch.setattr(threads, "_last", (0.0, 0.0, 0.0))
    torch.set_num_threads(2)
    assert threads.adapt_now() == 4 and torch.get_num_threads() == 4


def test_a_look_too_soon_reads_nothing(monkeypatch) -> None:
    """Within LOOK_WINDOW_S of the last look, adapt keeps the last decision without reading /proc/stat (a read costs
    about 1 ms on a busy machine; the app looks before every page run and after every layer of a long pass)."""
    _unfixed(monkeypatch)
    clock = [1000.0]
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock[0])
    reads, sample = [], threads._sample

    def counted():
        reads.append(clock[0])
        return sample()  # the real /proc/stat, at the test's clock

    monkeypatch.setattr(threads, "_sample", counted)
    assert threads.others_busy() is None and reads == [1000.0]  # the first look: nothing to compare with yet
    clock[0] += threads.LOOK_WINDOW_S / 2
    assert threads.adapt() is None and reads == [1000.0]  # too soon: nothing read
    clock[0] += threads.LOOK_WINDOW_S
    assert threads.others_busy() is not None and len(reads) == 2  # a window later: read and measured


def test_one_thread_runs_torch_on_one_thread_and_gives_the_count_back(torch_threads) -> None:
    torch = torch_threads
    torch.set_num_threads(2)
    x = torch.randn(64, 512)
    with threads.one_thread():
        assert torch.get_num_threads() == 1
        with threads.one_thread():  # nested: still one, and the outer block's count is not lost
            inner = x @ x.T
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2 and torch.allclose(inner, x @ x.T)
    with pytest.raises(ValueError), threads.one_thread():
        raise ValueError("the block failed")
    assert torch.get_num_threads() == 2  # given back on the way out of a failing block too
