"""scripts/setup.sh sets up one venv at a time (issue 35 §3.6: app.sh and test.sh started together on a fresh clone
both installed into the same venv at once). Cheap: a venv that is already up to date (this suite's own stamp), so
nothing is installed; the lock is the one thing tested."""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUP = ["bash", str(ROOT / "scripts" / "setup.sh")]


def _up_to_date_venv(tmp_path: Path) -> Path:
    """A venv folder whose stamp says it is up to date for this checkout as it is now (setup.sh --stamp)."""
    stamp = subprocess.run([*SETUP, "--stamp"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert stamp.count("\n") == 3 and "editable " in stamp, stamp
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".mha-viz-stamp").write_text(stamp, encoding="utf-8")
    return venv


def test_a_second_setup_waits_for_the_first(tmp_path: Path) -> None:
    venv = _up_to_date_venv(tmp_path)
    env = {**os.environ, "MHA_VIZ_VENV": str(venv)}
    alone = subprocess.run(SETUP, env=env, capture_output=True, text=True, timeout=60)
    assert alone.returncode == 0 and alone.stderr == "", alone.stderr  # up to date: nothing installed
    lock = Path(f"{venv}.lock")
    assert lock.is_file(), "the lock file sits next to the venv"
    with open(lock, "w") as held:  # another set-up of this venv is running
        fcntl.flock(held, fcntl.LOCK_EX)
        second = subprocess.Popen(SETUP, env=env, stderr=subprocess.PIPE, text=True)
        try:
            said = second.stderr.readline()  # blocks until it says it waits (or it exits: EOF, "")
            assert "another set-up of" in said and "waiting" in said, said
            assert second.poll() is None, "it waits while the lock is held"
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
        assert second.wait(timeout=60) == 0
        assert second.stderr.read() == ""  # then finds the venv up to date: nothing more to do
    both = [subprocess.Popen(SETUP, env=env, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    assert [p.wait(timeout=60) for p in both] == [0, 0]
    for p in both:
        p.stderr.close()
