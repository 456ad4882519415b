"""python -m mha_viz trace: the .npz contract and one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SENTENCE
from mha_viz.attention import compute_trace
from mha_viz.cli.main import main
from mha_viz.edits import ablate_heads, regroup_heads
from mha_viz.own import init_weights, save_weights
from mha_viz.pipeline.road import encode, layer_weights, record
from mha_viz.trace import AttentionWeights

# in-process commands take the worker's MiniLM (conftest.loaded_once); test_real_process_exit_codes and the process
# tests below load in their own process
pytestmark = pytest.mark.usefixtures("loaded_once")
ROOT = Path(__file__).resolve().parents[1]
OFFLINE_HEADER = "Models that run here with no network (offline here):"
FULL = ("x", "q", "k", "v", "scores", "z", "concat", "head_out", "output", "W_Q", "W_K", "W_V", "W_O")


def run(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_all_layers_npz(tmp_path, capsys, minilm) -> None:
    out = tmp_path / "t.npz"
    code, stdout, _ = run(["trace", "--text", SENTENCE, "--out", str(out)], capsys)
    assert code == 0 and "wrote" in stdout
    data = np.load(out)  # allow_pickle is False: the file must load without pickle
    tokens = list(data["tokens"])
    assert tokens == list(encode(minilm, SENTENCE)[0].labels) and "animal" in tokens
    assert list(data["key_tokens"]) == tokens  # self-attention: the same tokens on both axes
    assert data["pattern"].shape == (6, 12, len(tokens), len(tokens)) and data["pattern"].dtype == np.float32
    with torch.no_grad():
        hf = minilm.model(input_ids=torch.tensor([encode(minilm, SENTENCE)[0].ids]), output_attentions=True)
    np.testing.assert_allclose(data["pattern"][3], hf.attentions[3][0].numpy(), atol=1e-5)
    np.testing.assert_allclose(data["pattern"].sum(-1), 1.0, atol=1e-5)


def test_full_single_layer_resplit_ablate(tmp_path, capsys, minilm) -> None:
    out = tmp_path / "full.npz"
    args = ["trace", "--text", SENTENCE, "--layer", "2", "--heads", "4", "--ablate", "0,3", "--full",
            "--dtype", "float64", "--out", str(out)]  # fmt: skip
    assert run(args, capsys)[0] == 0
    d = np.load(out)
    n = len(d["tokens"])
    assert d["pattern"].shape == (1, 4, n, n) and d["pattern"].dtype == np.float64
    shapes = {k: d[k].shape for k in FULL}
    assert shapes["q"] == shapes["k"] == shapes["v"] == shapes["z"] == (4, n, 96)
    assert shapes["scores"] == (4, n, n) and shapes["concat"] == shapes["x"] == shapes["output"] == (n, 384)
    assert shapes["head_out"] == (4, n, 384) and shapes["W_Q"] == (4, 384, 96) and shapes["W_O"] == (4, 96, 384)
    assert d["b_Q"].shape == (4, 96) and d["b_O"].shape == (384,)
    assert np.all(d["head_out"][[0, 3]] == 0)
    x = torch.from_numpy(d["x"])
    w = ablate_heads(regroup_heads(layer_weights(minilm, record(minilm, SENTENCE), "encoder", 2), 4), [0, 3])
    ref = compute_trace(w, x, device="cpu", dtype="float64")
    np.testing.assert_allclose(d["output"], ref.output.numpy(), atol=1e-10)


def test_own_weights_seed_example(tmp_path, capsys) -> None:
    out = tmp_path / "own.npz"
    args = ["trace", "--text", "humpty dumpty sat on", "--model", "own", "--d-model", "512", "--heads", "8",
            "--seed", "3", "--wo", "identity", "--causal", "--full", "--out", str(out)]  # fmt: skip
    assert run(args, capsys)[0] == 0
    d = np.load(out)
    n = len(d["tokens"])
    assert d["pattern"].shape == (1, 8, n, n) and d["q"].shape == (8, n, 64)
    assert np.all(np.triu(d["pattern"][0], 1) == 0)  # causal
    np.testing.assert_allclose(d["output"], d["concat"], atol=1e-6)  # W^O = identity
    np.testing.assert_array_equal(d["W_Q"], init_weights(512, 8, seed=3).W_Q.numpy())
    assert "b_Q" not in d


def test_own_weights_from_file(tmp_path, capsys) -> None:
    path = tmp_path / "w.safetensors"
    path.write_bytes(save_weights(init_weights(384, 6, seed=1)))
    out = tmp_path / "o.npz"
    args = ["trace", "--text", "hello world", "--model", "own", "--weights", str(path), "--embeddings", "model",
            "--positions", "--out", str(out)]  # fmt: skip
    assert run(args, capsys)[0] == 0
    assert np.load(out)["pattern"].shape == (1, 6, 4, 4)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["trace"], "required: --text"),
        (["trace", "--text", "  "], "empty"),
        (["trace", "--text", "hi", "--layer", "6"], "layers 0 to 5"),
        (["trace", "--text", "hi", "--heads", "5", "--layer", "0"], "choose one of 1, 2, 3, 4, 6, 8, 12"),
        (["trace", "--text", "hi", "--ablate", "12"], "heads are numbered 0 to 11"),
        (["trace", "--text", "hi", "--ablate", "x,y"], "--ablate takes head numbers"),
        (["trace", "--text", "hi", "--wo", "mystery"], "invalid choice"),
        (["trace", "--text", "hi", "--full"], "add --layer"),
        (["trace", "--text", "hi", "--out", "x.txt"], ".npz"),
        (["trace", "--text", "hi", "--model", "own", "--d-model", "100", "--heads", "7"], "not divisible"),
        (["trace", "--text", "hi", "--model", "own", "--embeddings", "model"], "set d_model to 384"),
        (["trace", "--text", "hi", "--model", "own", "--weights", "w.pt"], "pickle files are not accepted"),
        (["trace", "--text", "hi", "--model", "no-org/no-model"], "supported: models whose attention"),
        (["trace", "--text", "hi", "--target", "Hallo"], "not an encoder-decoder model"),
        (["trace", "--text", "hi", "--part", "cross"], "has no cross-attention"),
        (["trace", "--text", "hi", "--part", "sideways"], "invalid choice"),
        (["trace", "--text", "hi", "--device", "cuda"] if not torch.cuda.is_available() else ["trace"], ""),
        (["trace", "--text", "hi", "--model", "own", "--seed", str(2**70)], "--seed: must be from 0 to 4294967295"),
        (["trace", "--text", "hi", "--wo", "random", "--layer", "0", "--seed", str(2**70)], "--seed: must be from 0"),
        (["trace", "--text", "hi", "--model", "own", "--seed", "-1"], "--seed: must be from 0 to 4294967295"),
        (["trace", "--text", "hi", "--model", "own", "--seed", "1.5"], "--seed: takes a whole number"),
        (["trace", "--text", "hi", "--model", "own", "--d-model", "0"], "--d-model: must be from 1 to 2048"),
        (["trace", "--text", "hi", "--model", "own", "--d-model", "4096"], "--d-model: must be from 1 to 2048"),
        (["trace", "--text", "hi", "--model", "own", "--d-model", str(10**30)], "got a 31-digit number"),
        (["trace", "--text", "hi", "--model", "own", "--heads", "0"], "--heads: must be from 1 to 256"),
        (["trace", "--text", "hi", "--heads", "257", "--layer", "0"], "--heads: must be from 1 to 256"),
        (["trace", "--text", "hi", "--heads", "-3"], "--heads: must be from 1 to 256"),
        (["trace", "--text", "hi", "--model", "own", "--d-model", "64", "--heads", "5"], "not divisible"),
        (["trace", "--text", "hi", "--layer", "-1"], "--layer: must be at least 0"),
        (["trace", "--text", "hi", "--layer", "9" * 5000], "--layer: takes a whole number"),
    ],
)
def test_bad_input_one_line_nonzero(args: list[str], message: str, capsys) -> None:
    code, out, err = run(args, capsys)
    assert code != 0 and out == ""
    assert err.startswith("mha-viz: error: ") and err.count("\n") == 1 and message in err


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"W_Q": 1e30}, "tensor W_Q has values up to 1e+30; the limit is 10000"),
        ({"W_O": 1e30}, "tensor W_O has values up to 1e+30; the limit is 10000"),
        ({"scale": 1e38}, "scale metadata is 1e+38; it must be a number above 0 and at most 10000"),
    ],
)
def test_overflowing_weights_file_is_refused(edit: dict, message: str, tmp_path, capsys) -> None:
    """Finite but huge weights (or scale) would make every score inf and the pattern NaN: exit 2, one line."""
    w = init_weights(16, 4, seed=1)
    tensors = {n: torch.full_like(t, edit[n]) if n in edit else t for n, t in w.tensors().items()}
    scale = edit.get("scale", w.scale)
    path = tmp_path / "big.safetensors"
    path.write_bytes(save_weights(AttentionWeights(**tensors, scale=scale)))
    out = tmp_path / "o.npz"
    args = ["trace", "--text", "hello world", "--model", "own", "--weights", str(path), "--out", str(out)]
    code, stdout, err = run(args, capsys)
    assert code == 2 and stdout == "" and not out.exists()
    assert err.startswith("mha-viz: error: ") and err.count("\n") == 1 and message in err, err


def test_odd_arguments_never_reach_internal_error(tmp_path, capsys) -> None:
    """A handful of odd combinations: each is a result or a one-line error, never "internal error"."""
    folder = tmp_path / "dir.safetensors"
    folder.mkdir()
    garbage = tmp_path / "nested.safetensors"
    header = b"[" * 30_000 + b"]" * 30_000
    garbage.write_bytes(len(header).to_bytes(8, "little") + header)
    odd = [
        ["trace", "--text", "hi", "--model", "own", "--seed", str(2**32 - 1), "--wo", "random", "--positions"],
        ["trace", "--text", "hi", "--model", "own", "--d-model", "2048", "--heads", "256", "--init", "identity"],
        ["trace", "--text", "hi", "--model", "own", "--d-model", "1", "--heads", "1", "--no-scale", "--causal"],
        ["trace", "--text", "hi", "--model", "own", "--weights", str(folder)],
        ["trace", "--text", "hi", "--model", "own", "--weights", str(garbage)],
        ["trace", "--text", "hi", "--model", "own", "--ablate", ",,", "--full"],
        ["trace", "--text", "hi", "--model", "own", "--layer", str(10**30)],
        ["trace", "--text", "hi", "--layer", str(10**30)],
        ["trace", "--text", "hi", "--ablate", "9" * 5000],
        ["trace", "--text", "\x00\x01\u202e", "--layer", "0"],
        ["trace", "--text", "hi", "--model", "   ", "--layer", "5", "--heads", "384", "--wo", "identity"],
        ["trace", "--text", "hi", "--out", str(tmp_path / "no" / "dir" / "x.npz"), "--layer", "0"],
        ["roles", "--text", "hi", "--part", "cross"],
        ["models", "--all", "extra"],
    ]
    for args in odd:
        code, _, err = run(args, capsys)
        assert "internal error" not in err and "Traceback" not in err, (args, err)
        assert code == 0 or (err.startswith("mha-viz: error: ") and err.count("\n") == 1), (args, err)


def test_missing_weights_file(capsys, tmp_path) -> None:
    code, _, err = run(
        ["trace", "--text", "hi", "--model", "own", "--weights", str(tmp_path / "no.safetensors")], capsys
    )
    assert code == 1 and err.count("\n") == 1 and "No such file" in err


def test_real_process_exit_codes(tmp_path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    bad = subprocess.run([sys.executable, "-m", "mha_viz", "trace", "--text", ""], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.strip().count("\n") == 0
    assert "Traceback" not in bad.stderr and "empty" in bad.stderr
    cmd = [sys.executable, "-m", "mha_viz", "trace", "--text", "humpty dumpty sat on", "--layer", "0", "--out", "o.npz"]
    ok = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert np.load(tmp_path / "o.npz")["pattern"].shape[:2] == (1, 12)


def test_roles_json(tmp_path, capsys) -> None:
    import json

    out = tmp_path / "roles.json"
    code, stdout, _ = run(["roles", "--text", SENTENCE, "--out", str(out)], capsys)
    assert code == 0 and "72 heads" in stdout
    rows = json.loads(out.read_text())
    assert len(rows) == 72 and rows[0]["layer"] == 0 and rows[0]["head"] == 0 and rows[-1]["layer"] == 5
    keys = {"layer", "head", "prev", "next", "self", "first", "dup", "induction", "special", "punct", "entropy"}
    assert all(set(r) == keys | {"spread", "label"} for r in rows)
    assert all(0 <= r[k] <= 1 + 1e-9 for r in rows for k in keys - {"layer", "head", "entropy"})
    assert all(r["entropy"] >= 0 for r in rows)
    code, _, err = run(["roles", "--text", SENTENCE, "--out", "x.npz"], capsys)
    assert code == 2 and ".json" in err


def test_encoder_decoder_contract(t5_dir: str, tmp_path, capsys) -> None:
    """--target and --part: decoder tokens on the query axis, source tokens on the key axis for cross."""
    out = tmp_path / "cross.npz"
    args = ["trace", "--model", t5_dir, "--text", SENTENCE, "--target", "The animal was tired", "--part", "cross",
            "--out", str(out)]  # fmt: skip
    code, _, err = run(args, capsys)
    assert code == 0, err
    d = np.load(out)
    assert len(d["tokens"]) != len(d["key_tokens"])
    assert d["pattern"].shape == (2, 4, len(d["tokens"]), len(d["key_tokens"]))
    np.testing.assert_allclose(d["pattern"].sum(-1), 1.0, atol=1e-5)
    out2 = tmp_path / "dec.npz"
    args = ["trace", "--model", t5_dir, "--text", SENTENCE, "--target", "The animal was tired", "--part", "decoder",
            "--layer", "1", "--full", "--out", str(out2)]  # fmt: skip
    assert run(args, capsys)[0] == 0
    d2 = np.load(out2)
    assert list(d2["tokens"]) == list(d2["key_tokens"]) == list(d["tokens"])
    assert np.all(np.triu(d2["pattern"][0], 1) == 0)  # decoder self-attention is causal
    assert "W_O" in d2 and "b_O" not in d2  # T5's W^O has no bias
    code, _, err = run(["trace", "--model", t5_dir, "--text", SENTENCE], capsys)
    assert code == 2 and "give the decoder's text" in err


def test_models_command(capsys) -> None:
    """Only what the test suite reproduces is listed (mha_viz/models/coverage.json); --all adds the rest, with why."""
    code, out, _ = run(["models"], capsys)
    assert code == 0
    lines = out.split(OFFLINE_HEADER)[0].splitlines()  # the architectures; then what runs offline here
    assert "text architectures in transformers" in lines[0] and "supported" in lines[0]
    listed = {ln.split()[0]: ln for ln in lines[2:] if ln.startswith("  ")}
    assert {"bert", "gpt2", "llama", "qwen3", "gemma2", "t5", "bart", "deepseek_v3"} <= set(listed)
    assert len(listed) == int(lines[0].split()[0]) >= 120
    assert "cross-attention" in listed["t5"] and "encoder-decoder" in listed["t5"]
    assert not {"deberta", "bloom", "deepseek_v4"} & set(listed) and "jetmoe" in listed  # jetmoe: routed heads, exact
    code, out, _ = run(["models", "--all"], capsys)
    rest = out.split("not supported (")[1]
    assert code == 0 and "deberta" in rest and "does not go through transformers' attention interface" in rest


def test_unsupported_architecture_one_line(tmp_path, capsys) -> None:
    import transformers as tf

    folder = tmp_path / "bloom"
    tf.BloomConfig(hidden_size=16, n_layer=1, n_head=2, vocab_size=32).save_pretrained(folder)
    code, out, err = run(["trace", "--model", str(folder), "--text", "hi"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "'bloom' model, whose attention does not go through transformers' attention interface" in err


def test_a_reader_that_stops_early_is_not_an_error() -> None:
    """`mha-viz models | head -2`: the closed pipe is neither an error line nor a failing status."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write meets a broken pipe
    try:
        done = subprocess.run([sys.executable, "-m", "mha_viz", "models"], stdout=write, stderr=subprocess.PIPE,
                              timeout=120)  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == 0, done.stderr
    assert b"error" not in done.stderr, done.stderr


@pytest.mark.parametrize("argv", [["--help"], ["trace", "--help"], ["trace", "--text", "x", "--heads", "0"]])
def test_the_cli_parses_before_torch_loads(argv: list[str]) -> None:
    """--help and argument errors never import torch, numpy or plotly (issue 22 §1: every call imported both)."""
    code = (
        "import sys\nfrom mha_viz.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'numpy', 'plotly', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


def test_the_cli_honours_the_thread_setting(tmp_path: Path) -> None:
    """MHA_VIZ_TORCH_THREADS reaches torch in the CLI as in the app (issue 22 §4)."""
    code = (
        "import sys\nfrom mha_viz.cli.main import main\nmain(['models'])\nimport torch\n"
        "print('threads', torch.get_num_threads())"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["MHA_VIZ_TORCH_THREADS"] = "1"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.stdout.strip().splitlines()[-1] == "threads 1", done.stdout[-300:] + done.stderr[-300:]


def test_usage_names_the_command_as_it_was_run(tmp_path: Path) -> None:
    """Issue 35 §3.3: `mha-viz --help` said "usage: python -m mha_viz"; each way of running it names itself."""
    script = Path(sys.executable).parent / "mha-viz"  # the venv's console script (scripts/setup.sh installs it)
    assert script.is_file(), f"{script} is missing: run bash scripts/setup.sh"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for argv, name in (([str(script)], "mha-viz"), ([sys.executable, "-m", "mha_viz"], "python -m mha_viz")):
        done = subprocess.run([*argv, "--help"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
        assert done.returncode == 0 and done.stdout.startswith(f"usage: {name} [-h]"), done.stdout[:200]
        sub = subprocess.run([*argv, "trace", "--help"], capture_output=True, text=True, cwd=tmp_path, env=env,
                             timeout=60)  # fmt: skip
        assert sub.stdout.startswith(f"usage: {name} trace "), sub.stdout[:200]
        bad = subprocess.run([*argv, "trace", "--text", "x", "--heads", "0"], capture_output=True, text=True,
                             cwd=tmp_path, env=env, timeout=60)  # fmt: skip
        assert bad.returncode == 2 and bad.stderr.strip().endswith(f"(see {name} trace --help)"), bad.stderr


def test_models_says_what_runs_offline_here(t5_dir: str, tmp_path: Path) -> None:
    """Issue 35 §3.4: no encoder-decoder is bundled (no pip package ships one as safetensors), so `models` says which
    models run here with no network; a model in the Hugging Face cache does, and it really loads offline."""
    import shutil

    cache = tmp_path / "hub"
    snap = cache / "models--tiny--t5" / "snapshots" / ("0" * 40)
    shutil.copytree(t5_dir, snap)
    (cache / "models--tiny--t5" / "refs").mkdir()
    (cache / "models--tiny--t5" / "refs" / "main").write_text("0" * 40)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    rows: dict[str, dict[str, str]] = {}
    for where in (tmp_path / "empty", cache):
        done = subprocess.run([sys.executable, "-m", "mha_viz", "models"], capture_output=True, text=True, timeout=300,
                              env={**env, "HF_HUB_CACHE": str(where)})  # fmt: skip
        assert done.returncode == 0, done.stderr[-500:]
        section = done.stdout.split(OFFLINE_HEADER)[1].splitlines()
        assert "offline here" in section[1]
        rows[where.name] = {ln[2:40].strip(): ln for ln in section[2:]}
    bundled = rows["empty"]
    assert "encoder " in bundled["minilm (all-MiniLM-L6-v2, the default)"]
    assert " yes " in bundled["minilm (all-MiniLM-L6-v2, the default)"] and " yes " in bundled["smollm2"]
    assert "SmolLM2-135M-Instruct" in bundled["smollm2"] and "4-bit (Q4_1) GGUF" in bundled["smollm2"]
    assert "encoder-decoder  no " in bundled["any encoder-decoder (t5-small, ...)"]
    assert " no " in bundled["any other Hugging Face id"] and "tiny/t5" not in bundled
    cached = rows["hub"]
    assert "encoder-decoder  yes" in cached["tiny/t5"] and "in the Hugging Face cache" in cached["tiny/t5"]
    assert not any(k.startswith("any encoder-decoder") for k in cached)  # one runs offline now
    trace = [sys.executable, "-m", "mha_viz", "trace", "--model", "tiny/t5", "--text", "The animal was tired",
             "--target", "Das Tier", "--part", "cross"]  # fmt: skip
    done = subprocess.run(trace, capture_output=True, text=True, timeout=300, env={**env, "HF_HUB_CACHE": str(cache)},
                          cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-500:]
