"""Shared fixtures: tiny synthetic layers for unit tests, the real bundled model for integration."""

from __future__ import annotations

import os
from pathlib import Path

from mha_viz.runtime.allocator import huge_pages

huge_pages()  # as the app and the CLI do, before torch loads: every exactness test runs on the same memory set-up

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

from mha_viz.own import init_weights  # noqa: E402
from mha_viz.trace import AttentionWeights  # noqa: E402

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
settings.register_profile("ci", derandomize=True, print_blob=True)  # same examples on every CI run
if os.environ.get("CI"):
    settings.load_profile("ci")

SENTENCE = "The animal didn't cross the street because it was too tired"


def random_weights(
    d_model: int = 12, n_heads: int = 3, seed: int = 0, bias: bool = True, dtype: torch.dtype = torch.float64
) -> AttentionWeights:
    """Random weights with (optionally) random biases, so that bias handling is exercised."""
    g = torch.Generator().manual_seed(seed)
    dh = d_model // n_heads

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype) * 0.5

    return AttentionWeights(
        W_Q=r(n_heads, d_model, dh), W_K=r(n_heads, d_model, dh), W_V=r(n_heads, d_model, dh),
        W_O=r(n_heads, dh, d_model),
        b_Q=r(n_heads, dh) if bias else None, b_K=r(n_heads, dh) if bias else None,
        b_V=r(n_heads, dh) if bias else None, b_O=r(d_model) if bias else None,
    )  # fmt: skip


@pytest.fixture
def tiny() -> AttentionWeights:
    """d_model 12, 3 heads, seed 0, with biases, float64."""
    return random_weights()


@pytest.fixture
def tiny_x() -> torch.Tensor:
    """[5, 12] float64 input."""
    return torch.randn(5, 12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


@pytest.fixture(scope="session")
def minilm():
    """The real bundled all-MiniLM-L6-v2 (loaded once per test session)."""
    from mha_viz.models.load import load_model

    return _held_by_the_session(load_model(None, "cpu"))


@pytest.fixture(scope="session")
def smollm2():
    """The real bundled SmolLM2-135M (loaded once per test session: 30 layers, the heaviest load of the suite)."""
    from mha_viz.models.load import load_model

    return _held_by_the_session(load_model("smollm2"))


SESSION_MODELS: list = []  # the minilm/smollm2 fixtures' models: pytest holds them until the run ends


def _held_by_the_session(lm):
    SESSION_MODELS.append(lm)
    return lm


def let_go_of_session_models() -> None:
    """Take this run's session models out of the dashboard's process-wide model store (mha_viz.ui.cache_pass.MODELS)
    and its list of dropped models (mha_viz.ui.memo._DROPPED), without counting them as dropped. ``loaded_once``
    (the app's load answered by the fixture) and tests that seed the store with ``smollm2`` put them there; a later
    test's fourth model then evicted one, which pytest still held: memo.dropped_alive() counted it for the rest of
    the worker (a test expecting 1 saw 2 in CI) and every later page collected the whole heap (memo.collect_garbage)."""
    import sys

    store, memo = sys.modules.get("mha_viz.ui.cache_pass"), sys.modules.get("mha_viz.ui.memo")
    if not SESSION_MODELS or store is None or memo is None:
        return
    ours = {id(lm) for lm in SESSION_MODELS}
    with store.MODELS._lock:
        for key in [k for k, lm in store.MODELS._models.items() if id(lm) in ours]:
            del store.MODELS._models[key]
    with memo._GC_LOCK:
        memo._DROPPED[:] = [r for r in memo._DROPPED if id(r()) not in ours]


@pytest.fixture(autouse=True)
def _session_models_leave_the_app_store():
    """After each test: the session models are not the dashboard's (let_go_of_session_models)."""
    yield
    let_go_of_session_models()


@pytest.fixture
def loaded_once(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model loads of the CLI, show and the studies run in-process (all go through pipeline.road.load) answered,
    for the bundled MiniLM and SmolLM2 on the CPU, by this worker's ``minilm``/``smollm2`` session fixtures, as the
    dashboard's cache answers a second visitor: a command then costs its own work, not a second load (MiniLM
    ~0.3 s, SmolLM2 ~3 s each). Any other name, device or placement loads for real. For tests about what a command
    does with a model, not about loading it (tests/test_models.py, test_fast_load.py, test_offload.py load)."""
    from mha_viz.pipeline import road

    real, shared = road.load_model, {(None, "cpu"): "minilm", ("smollm2", "cpu"): "smollm2"}

    def load_model(name: str | None = None, device: str | torch.device = "cpu"):
        fixture = shared.get((name, str(device)))
        return request.getfixturevalue(fixture) if fixture else real(name, device)

    monkeypatch.setattr(road, "load_model", load_model)


@pytest.fixture(scope="session")
def xavier_512() -> AttentionWeights:
    return init_weights(512, 8, seed=0)


def tiny_causal_lm(tmp_path_factory, model_type: str, config: dict, edit=None):
    """A tiny random causal LM of ``model_type`` saved with the tiny tokenizer (seed 0, eager attention), after
    ``edit(model)`` under no_grad (weights set so a test's differences are visible); returns its folder."""
    import transformers

    folder = tmp_path_factory.mktemp(f"tiny-{model_type}")
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(model_type, **config)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
    if edit is not None:
        with torch.no_grad():
            edit(model)
    model.save_pretrained(folder)
    _tiny_tokenizer().save_pretrained(folder)
    return folder


def tiny_model(model_type: str):
    """A tiny random-weight model of ``model_type`` (tests/zoo.py) with the tiny tokenizer, prepared for mha_viz."""
    from mha_viz.models.load import prepare
    from zoo import build

    return prepare(build(model_type), _tiny_tokenizer(), f"tiny-{model_type}")


def _tiny_tokenizer():
    """A byte-level BPE tokenizer trained on a few sentences (offline), usable with any tiny model."""
    import transformers as tf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<pad>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([SENTENCE, "The animal was tired", "Das Tier war müde"] * 3, trainer)
    return tf.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def _zoo_dir(tmp_path_factory, model_type: str) -> str:
    """A tiny random model of ``model_type`` saved as safetensors with a tokenizer (a local folder)."""
    from zoo import build

    folder = tmp_path_factory.mktemp(f"tiny-{model_type}")
    tokenizer = _tiny_tokenizer()
    build(model_type).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="session")
def t5_dir(tmp_path_factory) -> str:
    return _zoo_dir(tmp_path_factory, "t5")


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory) -> str:
    """A LLaMA decoder with 4 query heads sharing 2 key/value heads (rotary embeddings)."""
    return _zoo_dir(tmp_path_factory, "llama")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test gets its tier (unit, model, app, e2e) by the rule of tests/tiers.py, unless it was given one. With
    ``--no-loadscope-reorder`` (scripts/test.sh's xdist passes), the heaviest files first (tests/heavy_first.py)."""
    from tiers import explicit_tier, fixture_functions, tier_of

    for item in items:
        if explicit_tier([m.name for m in item.iter_markers()]) is None:
            test, module = getattr(item, "obj", None), getattr(item, "module", None)
            item.add_marker(tier_of(item.path, module, test, fixture_functions(item)))
    if getattr(config.option, "loadscopereorder", True) is not False:
        return  # a plain run keeps pytest's order (a file's e2e and other tests are not pulled apart)
    from heavy_first import heaviest_first

    root = Path(__file__).resolve().parents[1]
    items[:] = heaviest_first(
        items, lambda it: Path(it.path).resolve().relative_to(root).as_posix(), lambda it: it.get_closest_marker("e2e")
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Streamlit's component scan of the installed packages once per process, not once per AppTest."""
    from streamlit_once import scan_components_once

    scan_components_once()


_TIMES: list = []  # the run's TierTimes (tests/tier_times.py), made on the first report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each test phase's time, by tier (under pytest-xdist the controller hears every worker's reports)."""
    from tier_times import TierTimes

    if not _TIMES:
        _TIMES.append(TierTimes())
    _TIMES[0].add(report.nodeid, report.keywords, report.duration)


def pytest_terminal_summary(terminalreporter) -> None:
    """The tiers' times at the end of the run (scripts/test.sh prints each pass's wall time after it)."""
    if _TIMES:
        terminalreporter.write_sep("-", "time per tier")
        for line in _TIMES[0].lines():
            terminalreporter.write_line(line)
