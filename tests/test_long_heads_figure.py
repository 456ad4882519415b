"""The heads-at-length maps (figures/long_heads.py, `mha-viz long --html` / `--from-csv`): each map's cells are the
study's (or the CSV's) numbers cell for cell, layer 0 at the top; the top-k retrieval heads are the ones outlined;
the recalls are in the title when known; a missing or garbled CSV is one line and exit 2."""

from __future__ import annotations

import base64
import csv
import json
import re

import numpy as np
import pytest

from mha_viz.cli.long import COLUMNS
from mha_viz.cli.main import main
from mha_viz.figures.long_heads import long_heads_maps
from mha_viz.studies.long_heads import LongHeads, Shares

L, H = 3, 4


def _result() -> LongHeads:
    """A small study result made by hand: every value distinct; the top-2 retrieval heads (2, 1) and (0, 3)."""
    rng = np.random.default_rng(5)
    sink, local = rng.uniform(0, 1, (L, H)), rng.uniform(0, 1, (L, H))
    retrieval = np.zeros((L, H))
    retrieval[2, 1], retrieval[0, 3], retrieval[1, 0] = 0.9, 0.5, 0.25
    kinds = np.where(retrieval > 0.3, "retrieval", "streaming")
    patterns = np.array([["A-shape", "vertical-slash", "block-sparse", "A-shape"]] * L)
    return LongHeads(
        tokens=1234, shares=Shares(sink=sink, local=local, recalls=rng.uniform(0, 1, (L, H, 3))),
        retrieval=retrieval, kinds=kinds, patterns=patterns,
        recall={"none": 0.6, "top-k retrieval": 0.0, "k random": 0.4},
        masked={"none": [], "top-k retrieval": [(2, 1), (0, 3)], "k random": [(1, 1), (2, 2)]}, texts={},
    )  # fmt: skip


def _array(v: object) -> np.ndarray:
    """A figure's array as numbers: a plain (nested) list, or Plotly's typed array {dtype, bdata, shape}."""
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        return a.reshape([int(x) for x in str(v.get("shape", len(a))).split(",")])
    return np.asarray(v)


def _parts(spec: dict) -> tuple[list[dict], list[dict]]:
    data = spec["data"]
    return [t for t in data if t["type"] == "heatmap"], [t for t in data if t["type"] == "scatter"]


def _check(spec: dict, sink: np.ndarray, local: np.ndarray, retrieval: np.ndarray, top: set) -> None:
    maps, outlines = _parts(spec)
    assert [t["name"] for t in maps] == ["sink share", "local share", "retrieval score"]
    for trace, want in zip(maps, (sink, local, retrieval), strict=True):
        np.testing.assert_allclose(_array(trace["z"]), want, atol=1e-6)  # [L, H]: rows are layers, columns heads
        assert list(_array(trace["y"])) == list(range(L)) and list(_array(trace["x"])) == list(range(H))
    assert len(outlines) == 3  # one outline trace per map
    for trace in outlines:
        assert {(int(la), int(h)) for la, h in zip(_array(trace["y"]), _array(trace["x"]), strict=True)} == top
    layout = spec["layout"]
    assert all(layout[a]["autorange"] == "reversed" for a in ("yaxis", "yaxis2", "yaxis3"))  # layer 0 at the top


def test_the_maps_are_the_studys_numbers_and_the_top_heads_are_outlined() -> None:
    r = _result()
    fig = long_heads_maps(r.shares.sink, r.shares.local, r.retrieval, r.kinds, r.patterns, r.recall, k=2,
                          tokens=r.tokens)  # fmt: skip
    spec = fig.to_plotly_json()
    _check(spec, r.shares.sink, r.shares.local, r.retrieval, set(r.masked["top-k retrieval"]))
    maps, _ = _parts(spec)
    assert np.asarray(maps[0]["customdata"], dtype=object)[2, 1].tolist() == ["retrieval", "vertical-slash"]
    assert "kind %{customdata[0]}" in maps[2]["hovertemplate"] and "layer %{y}, head %{x}" in maps[2]["hovertemplate"]
    title = spec["layout"]["title"]["text"]
    assert "1,234 tokens" in title and "no head masked 60%" in title and "top-2 retrieval masked 0%" in title
    assert "2 random 40%" in title
    titles = " ".join(a["text"] for a in spec["layout"]["annotations"])
    assert "first 4 tokens" in titles and "last 256 tokens" in titles and "Wu et al. 2024" in titles
    top3 = _parts(long_heads_maps(r.shares.sink, r.shares.local, r.retrieval, r.kinds, r.patterns, k=3)
                  .to_plotly_json())[1][0]  # fmt: skip
    assert set(zip(top3["y"], top3["x"], strict=True)) == {(2, 1), (0, 3), (1, 0)}


def _write_csv(path, r: LongHeads, order: list[tuple[int, int]]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for la, h in order:  # rows in any order: each lands on its own (layer, head) cell
            w.writerow([la, h, r.shares.sink[la, h], r.shares.local[la, h], r.retrieval[la, h], r.kinds[la, h],
                        r.patterns[la, h], 0.1, 0.2, 0.3])  # fmt: skip


def _figure_of(html: str) -> dict:
    """The figure's data and layout as the page hands them to Plotly.newPlot."""
    at = re.search(r'Plotly\.newPlot\(\s*"[^"]+",\s*', html).end()
    dec = json.JSONDecoder()
    data, end = dec.raw_decode(html, at)
    layout, _ = dec.raw_decode(html, re.match(r"\s*,\s*", html[end:]).end() + end)
    return {"data": data, "layout": layout}


def test_cli_draws_the_maps_from_a_csv_without_the_model(tmp_path, capsys) -> None:
    r = _result()
    heads = tmp_path / "heads.csv"
    order = [(la, h) for la in range(L) for h in range(H)][::-1]
    _write_csv(heads, r, order)
    page = tmp_path / "maps.html"
    assert main(["long", "--from-csv", str(heads), "--html", str(page), "--k", "2"]) == 0
    assert "wrote" in capsys.readouterr().err
    spec = _figure_of(page.read_text(encoding="utf-8"))
    _check(spec, r.shares.sink, r.shares.local, r.retrieval, {(2, 1), (0, 3)})
    assert "recall not in the CSV" in spec["layout"]["title"]["text"]


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "cannot read --from-csv"),
        ("a,b\n1,2\n", "not a CSV of `mha-viz long`"),
        (",".join(COLUMNS) + "\n0,0,0.1,zero,0.0,retrieval,A-shape,0,0,0\n", "is not a number"),
        (
            ",".join(COLUMNS)
            + "".join(f"\n{c},0.1,0.2,0.0,retrieval,A-shape,0,0,0" for c in ("0,0", "0,1", "0,0", "1,1")),
            "one row per (layer, head)",
        ),  # (0, 0) twice, (1, 0) missing: four rows for a 2 × 2 grid
        (",".join(COLUMNS) + "\n0,0,0.1,nan,0.0,retrieval,A-shape,0,0,0\n", "from 0 to 1"),
        ("\x00\x01\xff garbage", "cannot read --from-csv"),
    ],
)
def test_a_missing_or_garbled_csv_is_one_line_and_exit_2(tmp_path, capsys, content, said) -> None:
    heads = tmp_path / "heads.csv"
    if content is not None:
        heads.write_bytes(content.encode("latin-1"))
    page = tmp_path / "maps.html"
    assert main(["long", "--from-csv", str(heads), "--html", str(page)]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1 and "Traceback" not in err and not page.exists()


def test_from_csv_needs_html_and_no_text_file(tmp_path, capsys) -> None:
    assert main(["long", "--from-csv", str(tmp_path / "h.csv")]) == 2
    assert "give --html FILE" in capsys.readouterr().err
    assert main(["long", "--from-csv", str(tmp_path / "h.csv"), "--html", str(tmp_path / "m.png")]) == 2
    assert "--html must name a .html file" in capsys.readouterr().err
