"""The same trace on a GPU agrees with the CPU (skipped only where no GPU is present)."""

from __future__ import annotations

import pytest
import torch

from conftest import SENTENCE
from mha_viz.config import Config
from mha_viz.pipeline.own_road import own_trace
from mha_viz.pipeline.road import traces

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
    for name, t in cpu.tensors().items():
        assert (t - gpu.tensors()[name]).abs().max().item() <= 1e-4, name
