"""Head statistics over a corpus (issue 26 §1): the means are the per-text `roles` scores averaged; the Ray engine
gives the same file as the local one; an interrupted run resumes to the same file; bad inputs are counted."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from conftest import SENTENCE
from mha_viz.analysis.roles import SCORE_KEYS
from mha_viz.cli.main import main
from mha_viz.config import Config
from mha_viz.pipeline.road import record
from mha_viz.studies import corpus
from mha_viz.studies.sweeps import all_patterns, roles_table

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models

TEXTS = [SENTENCE, "The cat sat on the mat and the cat slept", "She gave him the book because he had asked for it",
         "humpty dumpty sat on the wall", "A dog, a cat; and a bird."]  # fmt: skip


def _read(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_means_are_the_per_text_roles_averaged(minilm, tmp_path: Path) -> None:
    scorer = corpus.Scorer("", None, "cpu", batched=False)  # one text per pass: exactly the per-text numbers
    sums = corpus.added(None, scorer.score([corpus.Item(i, t) for i, t in enumerate(TEXTS)]))
    per_text = [roles_table(record(minilm, t).tokens, all_patterns(minilm, record(minilm, t), "encoder", Config()))
                for t in TEXTS]  # fmt: skip
    table = sums.table()
    for i, row in enumerate(table):
        values = np.asarray([[float(r[i][k]) for k in SCORE_KEYS] for r in per_text])  # [texts, scores]
        assert row["texts"] == len(TEXTS)
        for j, key in enumerate(SCORE_KEYS):
            assert math.isclose(row[key], values[:, j].mean(), rel_tol=0, abs_tol=1e-9), (row["layer"], key)
            assert math.isclose(row[f"{key}_std"], values[:, j].std(), rel_tol=0, abs_tol=1e-7), (row["layer"], key)
        labels = [r[i]["label"] for r in per_text]
        assert labels.count(row["label"]) == max(labels.count(x) for x in labels)
        assert row["label_share"] == labels.count(row["label"]) / len(TEXTS)


def test_bad_inputs_are_counted_not_dropped(tmp_path: Path, capsys) -> None:
    long = "cat " * 700  # over MiniLM's 512 tokens
    lines = [json.dumps({"text": TEXTS[0]}), "{not json", json.dumps({"text": "  "}), json.dumps({"text": long}),
             json.dumps({"other": 1}), json.dumps({"text": TEXTS[1]})]  # fmt: skip
    src = tmp_path / "texts.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "heads.csv"
    assert main(["corpus", "--texts", str(src), "--out", str(out), "--batch", "2"]) == 0
    said = capsys.readouterr().out
    assert "2 texts" in said and "1 empty, 2 malformed, 1 over the model's limit" in said, said
    rows = _read(out)
    assert len(rows) == 6 * 12 and {r["texts"] for r in rows} == {"2"}
    assert list(rows[0]) == list(corpus.COLUMNS)


def test_a_line_over_the_text_limit_or_of_invisible_characters_is_skipped_and_counted(tmp_path: Path, capsys) -> None:
    """Issue 35 §4.10: a 12,001-character line or one of zero-width characters aborted the whole run."""
    lines = [TEXTS[0], "a" * 12_001, "\u200b\u200b\u200b", "\u200b \u2060\ufeff", TEXTS[1]]
    src = tmp_path / "texts.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "heads.csv"
    assert main(["corpus", "--texts", str(src), "--out", str(out), "--batch", "2"]) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    assert "2 texts" in said and "2 empty, 1 over 12,000 characters" in said, said
    assert {r["texts"] for r in _read(out)} == {"2"}


def test_a_corpus_with_no_scorable_text_writes_no_table(tmp_path: Path, capsys) -> None:
    """Issue 35 §4.11: a run whose every line was skipped wrote a table of texts=0 and NaN scores."""
    src = tmp_path / "texts.txt"
    src.write_text("\u200b\u200b\n" + "a" * 12_001 + "\n", encoding="utf-8")
    out = tmp_path / "heads.csv"
    assert main(["corpus", "--texts", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no text that could be scored" in err and "1 empty" in err and err.count("\n") == 1, err
    assert not out.exists()


def test_an_interrupted_run_resumes_to_the_same_file(tmp_path: Path, monkeypatch) -> None:
    src = tmp_path / "texts.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    whole, part = tmp_path / "whole.csv", tmp_path / "part.csv"
    assert main(["corpus", "--texts", str(src), "--out", str(whole), "--batch", "2"]) == 0
    real = corpus.Scorer.score
    calls = {"n": 0}

    def dies_on_the_third_batch(self, batch):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # as a killed run: the checkpoint holds the first two batches
        return real(self, batch)

    monkeypatch.setattr(corpus.Scorer, "score", dies_on_the_third_batch)
    with pytest.raises(KeyboardInterrupt):
        main(["corpus", "--texts", str(src), "--out", str(part), "--batch", "2"])
    saved = json.loads(Path(corpus.checkpoint_path(str(part))).read_text())
    assert saved["sums"]["inputs"] == 4 and not part.exists()
    monkeypatch.setattr(corpus.Scorer, "score", real)
    assert main(["corpus", "--texts", str(src), "--out", str(part), "--batch", "2", "--resume"]) == 0
    assert part.read_bytes() == whole.read_bytes()
    assert not Path(corpus.checkpoint_path(str(part))).exists()


@pytest.mark.e2e  # starts a real Ray cluster (processes), which the tier rule cannot see from here
def test_ray_engine_gives_the_local_file(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray is in requirements-dev.txt (the [ray] extra)")
    src = tmp_path / "texts.txt"
    src.write_text("\n".join(TEXTS[:4]) + "\n", encoding="utf-8")
    local, ray_out = tmp_path / "local.csv", tmp_path / "ray.csv"
    assert main(["corpus", "--texts", str(src), "--out", str(local), "--batch", "1"]) == 0
    code = main(["corpus", "--texts", str(src), "--out", str(ray_out), "--batch", "1", "--engine", "ray",
                 "--workers", "2"])  # fmt: skip
    assert code == 0
    # sums in float64, added in batch order; the workers run torch on one thread, this process on all cores,
    # so a pattern's float32 rounding may differ in the last place: equal to 1e-6, labels identical
    a, b = _read(local), _read(ray_out)
    assert [(r["layer"], r["head"], r["texts"], r["label"]) for r in a] == [
        (r["layer"], r["head"], r["texts"], r["label"]) for r in b
    ]
    numbers = [k for k in corpus.COLUMNS if k not in ("layer", "head", "texts", "label")]
    worst = max(abs(float(x[k]) - float(y[k])) for x, y in zip(a, b, strict=True) for k in numbers)
    assert worst <= 1e-6, worst


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--texts", "missing.txt", "--out", "x.csv"], "no such file"),
        (["--texts", "t.txt", "--out", "x.json"], "--out must name a .csv or .parquet"),
        (["--texts", "t.pdf", "--out", "x.csv"], "--texts must be a"),
        (["--texts", "t.txt", "--out", "x.csv", "--model", "own"], "own weights"),
    ],
)
def test_cli_errors_are_one_line(argv: list[str], says: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("a text\n", encoding="utf-8")
    (tmp_path / "t.pdf").write_text("x", encoding="utf-8")
    assert main(["corpus", *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1, err


def test_an_encoder_decoder_model_is_refused_in_one_line(tmp_path: Path, tmp_path_factory, capsys) -> None:
    """Each corpus text is one pass of its own, with no decoder text beside it: an encoder-decoder model is refused
    with what to choose instead (it used to ask for a decoder text the command has no option for)."""
    from conftest import _zoo_dir

    t5 = _zoo_dir(tmp_path_factory, "t5")  # saving it the first time prints a progress bar to stderr:
    capsys.readouterr()  # not the command's (the test failed whenever it was the first to build the tiny T5)
    texts = tmp_path / "t.txt"
    texts.write_text("\n".join(TEXTS[:2]), encoding="utf-8")
    code = main(["corpus", "--texts", str(texts), "--model", t5, "--out", str(tmp_path / "h.csv"), "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "encoder-decoder" in err and "choose an encoder or a decoder" in err
    with pytest.raises(corpus.MhaVizError, match="encoder-decoder"):
        corpus.Scorer(t5, None, "cpu")
