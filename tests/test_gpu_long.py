"""Long context on a GPU (issue 38), skipped only where no GPU is present: the fused call's CUDA kernel (the memory-
efficient one, with a bias padded to its alignment) and the tiled blocks give the model's own eager attention on the
five kinds of tests/test_tiles.py; and SmolLM2's whole 8,192-token window recorded on the GPU is fused on every call,
with pooled maps and a zoom window equal to the weights of the model's own eager attention at that length."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tile_models import KINDS, TOL, _batch, _eager_pass, _model, _tiled_pass

from mha_viz import tiles
from mha_viz.config import MATCH_TOL, TILE_FUSED_TOL, Config
from mha_viz.models import fused

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
DEV = "cuda"  # the checks themselves run on any device (a CPU copy of this file checks the checks)
PLAIN = {"llama", "mistral", "bert"}  # plain scaled-dot-product attention: fused; soft-capping and sinks are not


def _rebuilt(call) -> torch.Tensor:
    """Every weight of a recorded call from its q, k and rows' statistics alone. Shapes: [b, h, n, n_k]."""
    allowed = tiles.allowed_of(call.allowed) if call.allowed is not None else None
    return tiles.window_weights(call.q, call.k, call.row_lse, call.scaling, call.softcap, call.bias, allowed,
                                call.sink is not None, call.k.shape[-2])  # fmt: skip


# gemma2 in float64: its own eager pass turns a left-padded text to NaN (tests/test_tiles.py), one text only
@pytest.mark.parametrize(("kind", "batch"), [(k, b) for k in sorted(KINDS) for b in (1, 2) if (k, b) != ("gemma2", 2)])
def test_long_calls_on_cuda_are_the_models_eager_attention(kind: str, batch: int) -> None:
    """One text (plain kinds fused on the GPU's kernel) and two, the second left-padded (rows that see no key: the
    eager blocks), against the model's own eager pass on the same GPU."""
    model = _model(kind).to(DEV)
    ids, mask = (t[:batch].to(DEV) for t in _batch(96))
    theirs = _eager_pass(model, ids, mask)
    ours, calls = _tiled_pass(model, ids, mask, block=4 * 96 * 10)  # blocks of 10 query rows
    real = mask.bool()
    for mine, want in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert float((mine - want)[real].abs().max()) <= TOL
    # the padded text's first rows see no key (the eager blocks); an encoder's padding hides keys only: fused
    assert [c.fused for c in calls] == [kind in PLAIN and (batch == 1 or kind == "bert")] * len(calls)
    for call, weights in zip(calls, theirs.attentions, strict=True):
        assert call.q.device.type == "cpu" and call.delta <= TOL
        assert float((_rebuilt(call) - weights.float().cpu()).abs().max()) <= TOL


@pytest.mark.parametrize("n", [96, 100, 1000])
def test_the_cuda_kernel_takes_a_sliding_window_bias_of_any_width(n: int) -> None:
    """Mistral's sliding window is not causal alone: the fused call runs blocks of rows with an additive bias over
    their keys, whose width is rarely a multiple of 16; the kernel is given it aligned, and equals eager."""
    model = _model("mistral").to(DEV)
    ids, mask = (t[:1, :n].to(DEV) for t in _batch(n))
    theirs = _eager_pass(model, ids, mask)
    ours, calls = _tiled_pass(model, ids, mask, block=4 * n * 7)  # blocks of 7 rows: key spans of 7 + 23 wide
    assert all(c.fused for c in calls)
    for mine, want in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert float((mine - want).abs().max()) <= TOL


def test_aligned_bias_keeps_its_values() -> None:
    bias = torch.randn(1, 1, 9, 40, device=DEV)[..., 3:30]  # 27 keys, a row stride of 40
    got = fused._aligned(bias)
    assert got.shape == bias.shape and torch.equal(got, bias)
    assert got.stride(-2) % 16 == 0 and got.data_ptr() % 64 == 0


@pytest.fixture(scope="module")
def long_cuda():
    """SmolLM2 on the GPU, its 8,192-token window recorded, and the peak GPU memory of the recording."""
    from mha_viz.models.load import load_model
    from mha_viz.pipeline.road import record

    lm = load_model("smollm2", DEV)
    words = ("animal", "street", "river", "teacher", "garden", "engine", "letter", "window", "bridge", "market")
    body = " ".join(f"In story {i} the {words[i % 10]} did not cross the {words[(3 * i + 1) % 10]} because it was "
                    f"too {('tired', 'wide', 'late', 'busy')[(i * 7) % 4]}." for i in range(1100))  # fmt: skip
    text = lm.tokenizer.decode(lm.tokenizer(body, add_special_tokens=False)["input_ids"][: lm.max_tokens])
    if DEV == "cuda":
        torch.cuda.reset_peak_memory_stats()
    rec = record(lm, text)
    peak = torch.cuda.max_memory_allocated() if DEV == "cuda" else 0
    return lm, rec, peak


def _eager_weights(lm, ids: torch.Tensor, layers: tuple[int, ...], rows: slice, f: int) -> dict:
    """The model's own eager attention at full length on the GPU (a fresh copy of the same weights): each layer's
    weights of ``rows`` × every key, and its f×f tile means. Shapes: {layer: ([h, r, n], [h, n/f, n/f])}."""
    import transformers

    from mha_viz.models.sources import smollm2_dir

    model = transformers.AutoModelForCausalLM.from_pretrained(smollm2_dir(), attn_implementation="eager")
    model = model.to(DEV).eval()
    got: dict = {}

    def keep(layer: int):
        def hook(_m, _a, out) -> None:
            w = out[1][0]  # [h, n, n]
            h, n, _ = w.shape
            pooled = w.reshape(h, n // f, f, n // f, f).mean((2, 4))
            got[layer] = (w[:, rows].float().cpu(), pooled.float().cpu())

        return hook

    hooks = [model.model.layers[i].self_attn.register_forward_hook(keep(i)) for i in layers]
    try:
        with torch.no_grad():
            model(input_ids=ids.to(DEV), use_cache=False, logits_to_keep=1)
    finally:
        for h in hooks:
            h.remove()
    del model
    if DEV == "cuda":
        torch.cuda.empty_cache()
    return got


def test_smollm2_8192_tokens_on_cuda_fused_and_exact(long_cuda) -> None:
    """The whole window recorded on the GPU: every call fused (the kernel's output within TILE_FUSED_TOL of eager on
    its check rows); what the Overview and a zoom show (pipeline/zoom.py, on the GPU and from the statistics on the
    CPU) equals the model's own eager weights at 8,192 tokens within MATCH_TOL."""
    from mha_viz.pipeline import zoom

    lm, rec, peak = long_cuda
    n = len(rec.tokens.ids)
    assert n == lm.max_tokens == 8192 and rec.slim
    calls = list(rec.run.calls.values())
    assert len(calls) == lm.n_layers() == 30
    assert all(c.fused for c in calls), [c.fused for c in calls]
    assert max(c.delta for c in calls) <= TILE_FUSED_TOL
    print(f"8,192 tokens on {DEV}: recording peak GPU memory {peak / 1e9:.2f} GB")
    rows, f, layers = slice(6000, 6064), 64, (0, 14, 29)
    want = _eager_weights(lm, torch.tensor([rec.tokens.ids]), layers, rows, f)
    for layer in layers:
        w_rows, w_pooled = want[layer]
        for device in (DEV, "cpu"):  # the GPU's rows (pipeline.rows), and the statistics on the CPU (tiles)
            config = Config(model="smollm2", device=device)
            got = zoom.window(lm, rec, None, layer, config, rows, slice(None))
            assert got.shape == tuple(w_rows.shape) and np.isfinite(got).all()
            assert float(np.abs(got - w_rows.numpy()).max()) <= MATCH_TOL, (layer, device)
            pooled = zoom.layer_pooled(lm, rec, None, layer, config, f)
            assert float(np.abs(pooled - w_pooled.numpy()).max()) <= MATCH_TOL, (layer, device)
        assert float(w_rows.sum(-1).sub(1).abs().max()) <= 1e-4  # the eager rows are whole rows (no sink)
