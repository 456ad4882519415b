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


@pytest.mark.slow  # every architecture of the coverage file: the slow tier, left out of --fast (tests/tiers.py)
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


def _tiny_checkpoint(coverage_script, model_type: str, full_heads: bool, folder: Path, tokenizer) -> None:
    """``model_type`` at its coverage size as a checkpoint folder: safetensors weights, its own config (the listed
    type at the top, as a real checkpoint of it has), a tokenizer."""
    config = coverage_script.tiny_config(model_type, full_heads)
    coverage_script.build(model_type, config).save_pretrained(folder)
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.mark.slow  # every architecture of the coverage file: the slow tier, left out of --fast (tests/tiers.py)
@pytest.mark.parametrize("batch", range(BATCHES))
def test_every_listed_type_loads(batch: int, recorded: dict, coverage_script, tmp_path: Path) -> None:
    """The listing and load follow one rule (issue 35 §1.3: fuyu, got_ocr2, modernvbert, musicflamingo and
    ultravbert were listed as supported and refused by load): every type `models` lists loads through load_model,
    at the coverage run's tiny size (its grouped-query config, else the all-heads one, as the run tries them)."""
    from conftest import _tiny_tokenizer

    tokenizer = _tiny_tokenizer()
    listed = sorted(a.model_type for a in catalog() if a.supported)
    assert set(listed) == set(_reproduced(recorded))
    refused = {}
    for model_type in listed[batch::BATCHES]:
        for full_heads in (False, True):
            folder = tmp_path / f"{model_type}-{full_heads}"
            try:
                with coverage_script.time_limit(coverage_script.TIME_LIMIT_S):
                    _tiny_checkpoint(coverage_script, model_type, full_heads, folder, tokenizer)
                    lm = load_model(str(folder))
            except MhaVizError as exc:
                refused[model_type] = str(exc)
                continue
            except Exception as exc:  # no tiny config or model of this kind: the all-heads one is tried next
                refused[model_type] = f"{type(exc).__name__}: {exc}"
                continue
            refused.pop(model_type, None)
            assert lm.sites, model_type
            break
    assert not refused


def test_sink_scaled_types_say_what_is_drawn(recorded: dict, coverage_script) -> None:
    """granite_swa and granitemoe_swa report their weights before the learned sink: the pattern drawn (the weights
    they apply) differs from output_attentions by up to ~0.5 on their tiny configs (issue 35 §1.2). The coverage run
    measures it, and `models` says so on their lines and in a note, and what its largest difference is against."""
    scaled = sorted(t for t, e in recorded["types"].items() if "vs_output_attentions" in e)
    assert scaled == ["granite_swa", "granitemoe_swa"]
    for model_type in scaled:
        with coverage_script.time_limit(coverage_script.TIME_LIMIT_S):
            got = coverage_script.check(model_type)
        assert got["status"] == "reproduced" and got["max_diff"] <= recorded["tolerance"], model_type
        assert got["vs_output_attentions"] > 0.1, model_type  # what is drawn is not output_attentions
        assert abs(got["vs_output_attentions"] - recorded["types"][model_type]["vs_output_attentions"]) < 1e-5
    assert "vs_output_attentions" not in coverage_script.check("gpt_oss")  # reports what it applies: no mark
    table = format_table(catalog())
    header, lines = table.splitlines()[0], table.splitlines()
    assert "between the pattern drawn and the weights the model applies" in header and "except where marked *" in header
    for model_type in scaled:
        (line,) = [ln for ln in lines if ln.startswith(f"  {model_type} ")]
        diff = recorded["types"][model_type]["vs_output_attentions"]
        assert line.endswith(f"(*: drawn differs from output_attentions by up to {diff:.2g})"), line
    note = next(ln for ln in lines if ln.startswith("* "))
    assert all(t in note for t in scaled) and "output_attentions × each row's sink scale" in note
    marked = [ln.split()[0] for ln in lines if "(*: drawn differs" in ln]
    assert marked == scaled
