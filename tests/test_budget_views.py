"""Every view has a budget that matches what it does (issue 21 §2.2, §2.6): an estimate per view, the Next
token's logit lens in chunks of positions (the same numbers as the unchunked lens), an estimate that bounds the
measured peak, and in hosted mode a time limit: refused before running, cut while running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SENTENCE
from mha_viz.models import unembed as unembed_module
from mha_viz.models.unembed import apply_norm, residual_stream, unembed, unembedding
from mha_viz.pipeline import budget, estimates
from mha_viz.pipeline import road as pipeline
from mha_viz.studies import logits
from mha_viz.studies.logits import LENS_K
from mha_viz.trace import MhaVizError

ROOT = Path(__file__).resolve().parents[1]
LONG = " ".join(["The animal didn't cross the street because it was too tired, and the river was wide."] * 30)


def test_every_view_has_an_estimate_of_memory_and_time() -> None:
    from mha_viz.ui import VIEW_FUNCS

    small = budget.Sizes(16, 16, 8, 8, 64, 512, n_layers=2, vocab=1000)
    big = budget.Sizes(512, 512, 16, 16, 32, 512, n_layers=6, vocab=50_000)
    missing = [name for name in VIEW_FUNCS if name not in estimates.ESTIMATES]
    assert not missing, f"views without a budget estimate: {missing}"
    for name in VIEW_FUNCS:
        assert budget.estimate(name, big) > budget.estimate(name, small) > 0, name
        assert budget.seconds(name, big) > budget.seconds(name, small) > 0, name
    with pytest.raises(KeyError, match="no budget estimate"):
        budget.estimate("A view nobody wrote an estimate for", small)


def test_next_token_estimate_counts_the_lens_over_the_vocabulary() -> None:
    """SmolLM2's shape: on a short text the lens's [chunk × 49,152] f32 logits and f64 softmax are the peak (the
    estimate sees the vocabulary); 1,200 tokens (2 GB and 60-70 s before) stay under the hosted limits, since
    the lens reads the last 64 positions, in chunks."""
    short = budget.Sizes(100, 100, 9, 3, 64, 576, n_layers=30, vocab=49_152)
    without_vocab = budget.Sizes(100, 100, 9, 3, 64, 576, n_layers=30)
    assert budget.estimate("Next token", short) > budget.estimate("Next token", without_vocab) + 2**26
    long = budget.Sizes(1200, 1200, 9, 3, 64, 576, n_layers=30, vocab=49_152)
    assert budget.estimate("Next token", long) < 768 * 2**20
    assert budget.seconds("Next token", long) < 30


# --- the lens in chunks: the same numbers as the unchunked lens ------------------------------------------------


def _unchunked_lens(lm, resid: torch.Tensor, pos: int, final_id: int) -> dict:
    """The logit lens as main computed it before chunking: [n, vocab] per layer (the reference)."""
    u = unembedding(lm)
    L, n, _ = resid.shape
    ids, probs = np.zeros((L, n), dtype=np.int64), np.zeros((L, n), dtype=np.float32)
    top_ids, top_probs = np.zeros((L, LENS_K), dtype=np.int64), np.zeros((L, LENS_K), dtype=np.float32)
    final = np.zeros(L, dtype=np.float32)
    for layer in range(L):
        p = torch.softmax(unembed(lm, apply_norm(lm, u, resid[layer])).double(), dim=-1)  # [n, vocab]
        best_p, best_i = p.max(dim=-1)
        ids[layer], probs[layer] = best_i.numpy(), best_p.float().numpy()
        tp, ti = p[pos].topk(LENS_K)
        top_ids[layer], top_probs[layer] = ti.numpy(), tp.float().numpy()
        final[layer] = float(p[pos, final_id])
    return {"ids": ids, "probs": probs, "top_ids": top_ids, "top_probs": top_probs, "final": final}


@pytest.fixture(scope="module")
def unchunked(smollm2):
    """SENTENCE's token ids, its residual stream and the reference lens per (position, final token id), each computed
    once for the five cases below: none of them depends on the chunk size or the first lens position (three
    distinct references instead of five, one residual-stream pass instead of five)."""
    ids = pipeline.record(smollm2, SENTENCE).tokens.ids
    stream = residual_stream(smollm2, ids)
    refs: dict[tuple[int, int], dict] = {}

    def reference(pos: int, final_id: int) -> dict:
        if (pos, final_id) not in refs:
            refs[pos, final_id] = _unchunked_lens(smollm2, stream.resid[1:], pos, final_id)
        return refs[pos, final_id]

    return ids, stream, reference


@pytest.mark.slow  # five SmolLM2 lens runs (~35 s): in the whole suite, not in --fast
@pytest.mark.parametrize(
    ("position", "first", "chunk"), [(None, 0, 3), (2, 0, 3), (2, 5, 3), (9, 5, 4), (None, 0, None)]
)
def test_chunked_lens_matches_the_unchunked_lens(smollm2, unchunked, monkeypatch, position, first, chunk) -> None:
    """Chunks of 3 or 4 positions: the same top guesses, and probabilities within float32 rounding of the LM
    head (a matrix product's last bits depend on how many rows it multiplies at once: logits differ by ≤ 5e-5 of
    72). One chunk for the whole text (the default size on a short text): bit for bit the unchunked lens."""
    calls: list[int] = []
    real = unembed_module.unembed

    def counting(lm, x):
        calls.append(int(x.shape[0]) if x.dim() > 1 else 1)
        return real(lm, x)

    monkeypatch.setattr(logits, "unembed", counting)
    if chunk is not None:
        monkeypatch.setattr(estimates, "LENS_CHUNK_BYTES", chunk * 20 * 49_152)  # `chunk` positions a chunk
    rec = pipeline.record(smollm2, SENTENCE)
    r = logits.readout(smollm2, SENTENCE, position, rec=rec, lens_from=first)
    n = len(rec.tokens.ids)
    assert calls and max(calls) <= (chunk or n)  # never [L, n, vocab] at once
    ids, stream, reference = unchunked
    assert np.array_equal(np.asarray(rec.tokens.ids), np.asarray(ids))  # the module's reference is of this text
    ref = reference(r.position, int(r.top_ids[0]))
    tol = 2e-5 if chunk is not None else 0.0
    np.testing.assert_array_equal(r.lens_ids, ref["ids"][:, first:])
    np.testing.assert_allclose(r.lens_probs, ref["probs"][:, first:], rtol=0, atol=tol)
    np.testing.assert_array_equal(r.lens_top_ids, ref["top_ids"])
    np.testing.assert_allclose(r.lens_top_probs, ref["top_probs"], rtol=0, atol=tol)
    np.testing.assert_allclose(r.lens_final, ref["final"], rtol=0, atol=tol)
    np.testing.assert_allclose(r.top_probs[0], torch.softmax(stream.logits[r.position].double(), -1).max(), atol=2e-5)
    assert r.lens_first == first and len(r.lens_labels[0]) == n - first


# --- the estimate bounds the measured peak -----------------------------------------------------------------------

_PEAK = r"""
import json, sys, threading, time
import psutil
from mha_viz.pipeline import budget, estimates
from mha_viz.studies import logits
from mha_viz.pipeline import road as pipeline
from mha_viz.models.load import load_model
from mha_viz.ui.views.next_token import LENS_MAX_TOKENS

lm = load_model("smollm2")
text = sys.argv[1]
logits.readout(lm, "warm up the model and its norm probe", rec=pipeline.record(lm, "warm up"))
proc, peak, done = psutil.Process(), [0], threading.Event()

def sample():
    while not done.is_set():
        peak[0] = max(peak[0], proc.memory_info().rss)
        time.sleep(0.002)

rec = pipeline.record(lm, text)  # the page's recorded pass, held before the view runs
n = len(rec.tokens.ids)
before = proc.memory_info().rss
thread = threading.Thread(target=sample)
thread.start()
r = logits.readout(lm, text, rec=rec, lens_from=max(0, n - LENS_MAX_TOKENS))
done.set()
thread.join()
head = lm.model.get_output_embeddings().weight
dh = lm.d_model // lm.n_heads
s = budget.Sizes(n, n, lm.n_heads, lm.n_kv_heads, dh, lm.d_model, lm.n_layers(), int(head.shape[0]))
print(json.dumps({"tokens": n, "rise": peak[0] - before, "estimate": budget.estimate("Next token", s)}))
"""


def test_next_token_estimate_bounds_the_measured_peak() -> None:
    """A 300-token SmolLM2 readout in a fresh process: the RSS rise while it runs (sampled every 2 ms) on top of
    the page's recorded pass stays under the view's estimate."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run([sys.executable, "-c", _PEAK, " ".join(LONG.split()[:230])], capture_output=True,
                         text=True, cwd=ROOT, env=env, timeout=900, check=True)  # fmt: skip
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["tokens"] > 250
    assert 0 < got["rise"] <= got["estimate"], got


# --- the time limit in hosted mode ---------------------------------------------------------------------------------


def test_a_deadline_cuts_the_lens_and_the_model_pass(smollm2, minilm) -> None:
    from mha_viz.ui.request import watch_deadline

    cut = pytest.raises(MhaVizError, match=r"Next token was stopped after .*MHA_VIZ_MAX_REQUEST_S")
    with cut, budget.deadline(0.0, "Next token"):
        logits.readout(smollm2, SENTENCE)
    watch_deadline(minilm)
    ids = torch.tensor([[101, 2023, 2003, 102]])
    with pytest.raises(MhaVizError, match="Heads was stopped"), budget.deadline(0.0, "Heads"):
        minilm.model(input_ids=ids)
    with budget.deadline(None, "no limit"):  # no deadline, the same model runs
        assert minilm.model(input_ids=ids) is not None
    budget.check_deadline()  # outside a request: nothing to cut


def test_time_limit_in_hosted_mode(monkeypatch) -> None:
    monkeypatch.delenv("MHA_VIZ_MAX_REQUEST_S", raising=False)
    assert budget.max_request_s() is None
    monkeypatch.setenv("MHA_VIZ_HOSTED", "1")
    assert budget.max_request_s() == 30
    scan = budget.Sizes(300, 300, 9, 3, 64, 576, n_layers=30, vocab=49_152)  # SmolLM2: 270 passes of 300 tokens
    with pytest.raises(MhaVizError, match=r"Head importance on this input would take about .* s of server time.*30 s"):
        budget.check_time("Head importance", scan)
    own_wo = budget.Sizes(60, 60, 256, 256, 8, 2048)  # own weights, d_model 2048 × 256 heads: W^O is 4 M cells
    assert budget.seconds("W^O", own_wo) > 5 * budget.seconds("W^O", budget.Sizes(60, 60, 8, 8, 64, 512))
    assert budget.check_time("Heads", budget.Sizes(12, 12, 12, 12, 32, 384, n_layers=6)) < 30
    monkeypatch.setenv("MHA_VIZ_MAX_REQUEST_S", "100000")
    assert budget.check_time("Head importance", scan) < 100_000


def _page(view: str, **params: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    for k, v in {"view": view, **params}.items():
        at.query_params[k] = v
    return at.run()


def test_a_request_estimated_over_the_time_limit_is_refused_in_the_page(monkeypatch) -> None:
    """Own weights' W^O at d_model 2048 × 256 heads (12-17 s of CPU a link before): estimated before it runs
    (W^O itself is 4 M heatmap cells) and refused with a notice when the server's limit is lower."""
    monkeypatch.setenv("MHA_VIZ_MAX_REQUEST_S", "2")
    at = _page("W^O", src="Own weights", d_model="2048", own_heads="256", text=" ".join(LONG.split()[:40]))
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value.replace("\\", "") for e in at.error]  # plain(): Markdown escaped
    assert any("W^O on this input would take about" in e and "MHA_VIZ_MAX_REQUEST_S" in e for e in errors), errors
    assert not at.get("plotly_chart")


def test_a_request_past_its_deadline_is_cut_with_a_notice(minilm, monkeypatch) -> None:
    """Estimated under the limit, yet past it while running (a slow or busy server): the view's next model pass
    stops it with the project's error, shown as a notice; the page itself is drawn. The page's model pass is
    recorded first (it has its own deadline: tests/test_admission.py)."""
    from mha_viz.config import Config
    from mha_viz.selection import Selection
    from mha_viz.ui.cache import recording_of

    recording_of(Selection(Config(), SENTENCE))
    monkeypatch.setattr(budget, "check_time", lambda view, s, what=None, at_length=False: 0.0)  # let in
    monkeypatch.setattr(budget, "max_request_s", lambda: 1e-9)  # and the deadline has passed at once
    at = _page("Ablation", layer="0")
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value.replace("\\", "") for e in at.error]  # plain(): Markdown escaped
    assert any("Ablation was stopped after" in e and "MHA_VIZ_MAX_REQUEST_S" in e for e in errors), errors


def test_heads_and_overview_at_length_are_estimated_by_their_pooled_maps_not_a_whole_pattern() -> None:
    """SmolLM2's shape at 8,150 tokens: Heads and Overview draw pooled exact maps from the tiled recording (a block
    of scores at a time), so the default local limit admits them; the untiled [h, n, n] estimate (8 GB) refused
    Heads at this length although it never builds that matrix. Step by step (a whole [h, n, n]) stays refused."""
    s = budget.Sizes(8150, 8150, 9, 3, 64, 576, n_layers=30, vocab=49_152)
    limit = budget.max_request_mb() * 2**20
    for view in ("Heads", "Overview"):
        assert budget.estimate(view, s) > limit  # as a whole pattern: refused
        assert budget.estimate(view, s, at_length=True) < limit // 4, view
        budget.check(view, s, at_length=True)  # no MhaVizError
        assert budget.seconds(view, s, at_length=True) < budget.seconds(view, s), view
    assert budget.seconds("Overview", s, at_length=True) > 20 * budget.seconds("Heads", s, at_length=True) / 2
    with pytest.raises(MhaVizError, match="Step by step"):
        budget.check("Step by step", s, at_length=True)  # no pooled form: at_length changes nothing
