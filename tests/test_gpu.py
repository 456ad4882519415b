"""The same trace on a GPU agrees with the CPU (skipped only where no GPU is present)."""

from __future__ import annotations

import pytest
import torch
from texts import long_text

from conftest import SENTENCE
from mha_viz.config import MATCH_TOL, TILE_BLOCK_CELLS, Config
from mha_viz.pipeline.own_road import own_trace
from mha_viz.pipeline.road import record, traces

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")


def test_minilm_trace_cuda_matches_cpu(minilm) -> None:
    _, _, cpu = traces(Config(device="cpu"), SENTENCE, lm=minilm)
    _, _, gpu = traces(Config(device="cuda"), SENTENCE, lm=minilm)
    assert len(cpu) == minilm.n_layers() > 0
    for a, b in zip(cpu, gpu, strict=True):
        for name, t in a.tensors().items():
            g = b.tensors()[name]
            assert g.device.type == "cpu"  # traces come back detached on the CPU
            assert (t - g).abs().max().item() <= 1e-4, name


def test_own_weights_cuda_matches_cpu(minilm) -> None:
    config = Config(model="own", d_model=512, n_heads=8, seed=0, device="cpu", causal=True)
    _, _, cpu = own_trace(minilm, "humpty dumpty sat on", config)
    _, _, gpu = own_trace(minilm, "humpty dumpty sat on", config.replace(device="cuda"))
    for name, t in cpu.tensors().items():  # the causal scores' masked cells are -inf on both (inf - inf is NaN)
        torch.testing.assert_close(gpu.tensors()[name], t, atol=1e-4, rtol=0, msg=name)


@pytest.fixture(scope="module")
def smollm2_cuda():
    """SmolLM2 loaded on the GPU (the bundled model; its own copy, the CPU fixture stays where it is)."""
    from mha_viz.models.load import load_model

    return load_model("smollm2", "cuda")


def test_smollm2_cuda_matches_cpu(smollm2, smollm2_cuda) -> None:
    """Grouped-query attention with rotary embeddings, run on the GPU: every layer's recorded call and trace equal the
    CPU's (the self-check passed on both)."""
    config = Config(model="smollm2")
    _, _, cpu = traces(config, SENTENCE, lm=smollm2)
    _, _, gpu = traces(config.replace(device="cuda"), SENTENCE, lm=smollm2_cuda)
    assert len(cpu) == smollm2.n_layers() == 30
    for a, b in zip(cpu, gpu, strict=True):
        for name, t in a.tensors().items():
            g = b.tensors()[name]
            assert g.device.type == "cpu"
            # float32 sums in another order: SmolLM2's scores reach tens, so the bound is relative to the largest
            # finite value (1e-4 absolute for weights, which stay within [0, 1]); masked scores are -inf on both
            scale = max(1.0, t[torch.isfinite(t)].abs().max().item())
            torch.testing.assert_close(g, t, rtol=0.0, atol=1e-4 * scale, msg=lambda m, name=name: f"{name}: {m}")


def test_smollm2_long_tiled_cuda_matches_cpu(smollm2, smollm2_cuda) -> None:
    """A text long enough that every call runs in tiles (heads × n² above TILE_BLOCK_CELLS): the GPU's recording (q,
    k, v, each row's softmax statistics, the self-check) equals the CPU's."""
    text = long_text(80)
    n = len(smollm2.tokenizer(text)["input_ids"])
    assert smollm2.n_heads * n * n > TILE_BLOCK_CELLS, n  # the tiled path runs
    cpu, gpu = record(smollm2, text), record(smollm2_cuda, text)
    tiled = 0
    for key, c in cpu.run.calls.items():
        g = gpu.run.calls[key]
        assert c.delta <= MATCH_TOL and g.delta <= MATCH_TOL, key
        for name in ("q", "k", "v"):
            assert (getattr(c, name) - getattr(g, name)).abs().max().item() <= 1e-3, (key, name)
        if c.row_lse is not None:
            tiled += 1
            assert g.row_lse is not None and (c.row_lse - g.row_lse).abs().max().item() <= 1e-4, key
    assert tiled == smollm2.n_layers()
