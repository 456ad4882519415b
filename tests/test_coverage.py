"""The catalog says only what the suite proves (issue 23 §5).

mha_viz/models/coverage.json is what scripts/coverage.py found: a tiny random config of every text model type of
the installed transformers, run through the reproduction check of test_models.py::test_architecture_reproduced
(every layer and part, pattern and W^O output within 1e-5 of the model's own eager attention). Here every type it
marks reproduced is reproduced again, so `mha-viz models` lists nothing the suite does not prove. When the file was
written for another transformers release (or MHA_VIZ_COVERAGE=write), this test runs every type and rewrites it.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from mha_viz.cli.main import main
from mha_viz.models import catalog as catalog_module
from mha_viz.models.catalog import COVERAGE_FILE, catalog, format_table, text_model_types
from mha_viz.models.load import load_model
from mha_viz.trace import MhaVizError

BATCHES = 4  # reproduced types are re-run in this many tests (one process, one after another)


def _script():
    spec = importlib.util.spec_from_file_location("coverage_script", Path(__file__).parents[1] / "scripts/coverage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def coverage_script():
    import transformers

    script = _script()
    level = transformers.logging.get_verbosity()
    script.quiet()
    yield script
    transformers.logging.set_verbosity(level)


@pytest.fixture(scope="module")
def recorded(coverage_script) -> dict:
    """coverage.json, rewritten first when it does not describe the installed transformers."""
    import transformers

    data = json.loads(COVERAGE_FILE.read_text(encoding="utf-8")) if COVERAGE_FILE.is_file() else {}
    stale = data.get("transformers") != transformers.__version__ or set(data.get("types", {})) != set(
        text_model_types()
    )
    if stale or os.environ.get("MHA_VIZ_COVERAGE") == "write":
        coverage_script.write(coverage_script.run_all(text_model_types(), verbose=False))
        catalog_module.coverage.cache_clear()
        data = json.loads(COVERAGE_FILE.read_text(encoding="utf-8"))
    return data


def _reproduced(data: dict) -> list[str]:
    return sorted(t for t, e in data["types"].items() if e["status"] == "reproduced")


def test_the_file_covers_every_text_model_type(recorded: dict) -> None:
    import transformers

    assert recorded["transformers"] == transformers.__version__
    assert set(recorded["types"]) == set(text_model_types())
    for model_type, entry in recorded["types"].items():
        assert entry["kind"] in ("encoder", "decoder", "encoder-decoder"), model_type
        if entry["status"] == "reproduced":
            assert 0.0 <= entry["max_diff"] <= recorded["tolerance"] and entry["layers"] >= 1, model_type
        else:
            assert entry["status"] == "failed" and entry["reason"] and "\n" not in entry["reason"], model_type
    assert len(_reproduced(recorded)) >= 120


@pytest.mark.parametrize("batch", range(BATCHES))
def test_every_reproduced_type_reproduces(batch: int, recorded: dict, coverage_script) -> None:
    """Each type the catalog lists as supported, rebuilt from its tiny config and checked again."""
    chosen = _reproduced(recorded)[batch::BATCHES]
    wrong = {}
    for model_type in chosen:
        with coverage_script.time_limit(coverage_script.TIME_LIMIT_S):
            got = coverage_script.check(model_type)
        want = recorded["types"][model_type]
        if got["status"] != "reproduced" or got["kind"] != want["kind"]:
            wrong[model_type] = got.get("reason") or got["kind"]
    assert not wrong


def test_catalog_reads_the_file(recorded: dict) -> None:
    """Supported = reproduced by the coverage run; every other type listed with its reason; kinds from the file."""
    archs = {a.model_type: a for a in catalog()}
    assert set(archs) == set(recorded["types"])
    assert {t for t, a in archs.items() if a.supported} == set(_reproduced(recorded))
    for model_type, a in archs.items():
        entry = recorded["types"][model_type]
        assert a.kind == entry["kind"]
        assert (a.reason == "") == a.supported and (a.supported or a.reason == entry["reason"])
        assert ("cross-attention" in a.features) == (a.kind == "encoder-decoder")
    table = format_table(list(archs.values()), show_unsupported=True)
    n = len(_reproduced(recorded))
    assert table.splitlines()[0].startswith(f"{n} of the {len(archs)} text architectures")
    unsupported = table.split("not supported (")[1]
    assert all(f"  {t}" in unsupported for t, a in archs.items() if not a.supported)


def _failed(data: dict) -> list[str]:
    return sorted(t for t, e in data["types"].items() if e["status"] == "failed")


def test_a_failed_type_is_refused_in_one_line(recorded: dict, tmp_path: Path, capsys) -> None:
    """A type the coverage run did not reproduce is refused by load: one clear line, never "internal error"."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    refused = 0
    for model_type in _failed(recorded):
        folder = tmp_path / model_type
        try:
            CONFIG_MAPPING[model_type]().save_pretrained(folder)
        except Exception:  # a config that cannot even be written: nobody can bring one
            continue
        with pytest.raises(MhaVizError) as err:
            load_model(str(folder))
        assert "\n" not in str(err.value) and "internal error" not in str(err.value), model_type
        assert repr(model_type) in str(err.value), model_type
        refused += 1
    assert refused >= len(_failed(recorded)) // 2
    reproduce_failed = [t for t in _failed(recorded) if "reproduce" in recorded["types"][t]["reason"]]
    assert reproduce_failed  # e.g. jetmoe: its attention goes through the interface, the pattern is not exact
    code, out, err = _cli(["trace", "--model", str(tmp_path / reproduce_failed[0]), "--text", "hi"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "internal error" not in err
    assert "the test suite does not reproduce it" in err


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err
