"""`mha-viz why`, mha_viz.show.why and the study give the same numbers; bad input is one line and a non-zero exit."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from conftest import SENTENCE
from mha_viz import show
from mha_viz.analysis.why_plan import csv_rows
from mha_viz.cli.main import main
from mha_viz.studies.why import LINEARISATION, why

pytestmark = pytest.mark.usefixtures("loaded_once")  # in-process commands and studies take the worker's models


def test_cli_show_and_study_agree(tmp_path, capsys, minilm) -> None:
    out = tmp_path / "why.csv"
    args = ["why", "--text", SENTENCE, "--layer", "3", "--head", "1", "--query", "it", "--key", "animal"]
    assert main([*args, "--versus", "street", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert LINEARISATION in stdout and "'it' scores 'animal' more than 'street'" in stdout
    with open(out, encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["query_source", "key_source", "contribution"]
    assert rows[-2][0] == "position bias" and rows[-1][0] == "model score"
    study = why(minilm, SENTENCE, 3, 1, "it", "animal", "street")
    shown = show.why(SENTENCE, 3, 1, "it", "animal", "street")
    want = csv_rows(study)
    assert len(rows) - 1 == len(want) == study.terms.size + 2
    got = np.array([float(r[2]) for r in rows[1:]])
    assert np.allclose(got, [v for *_, v in want], rtol=1e-7, atol=1e-9)
    assert [tuple(r[:2]) for r in rows[1:]] == [(q, k) for q, k, _ in want]
    assert np.array_equal(shown.terms, study.terms) and np.array_equal(shown.terms_versus, study.terms_versus)
    assert got[-1] == pytest.approx(study.score - study.score_versus, rel=1e-8)
    assert got[:-2].sum() + got[-2] == pytest.approx(got[-1], rel=1e-4)  # the table sums to the model's score


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--layer", "3", "--head", "1", "--query", "it", "--key", "zebra"], "the key 'zebra' is not a token"),
        (["--layer", "6", "--head", "1", "--query", "it", "--key", "animal"], "layer 6 does not exist"),
        (["--layer", "3", "--head", "12", "--query", "it", "--key", "animal"], "head 12 does not exist"),
        (["--layer", "-1", "--head", "1", "--query", "it", "--key", "animal"], "--layer: must be at least 0"),
        (["--layer", "3", "--head", "1", "--query", "it", "--key", "it", "--versus", "it"], "the key itself"),
    ],
)
def test_bad_input_one_line_nonzero(extra: list[str], message: str, tmp_path, capsys) -> None:
    code = main(["why", "--text", SENTENCE, *extra, "--out", str(tmp_path / "w.csv")])
    out, err = capsys.readouterr()
    assert code != 0 and out == ""
    assert err.startswith("mha-viz: error: ") and err.count("\n") == 1 and message in err
