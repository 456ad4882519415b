"""The same trace on a GPU agrees with the CPU (skipped only where no GPU is present)."""

from __future__ import annotations

import pytest
import torch

from conftest import SENTENCE
from mha_viz.pipeline import OwnSpec, Settings, own_trace, pretrained_traces

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")


def test_minilm_trace_cuda_matches_cpu(minilm) -> None:
    _, cpu = pretrained_traces(minilm, SENTENCE, None, Settings(device="cpu"))
    _, gpu = pretrained_traces(minilm, SENTENCE, None, Settings(device="cuda"))
    for a, b in zip(cpu, gpu, strict=True):
        for name, t in a.tensors().items():
            g = b.tensors()[name]
            assert g.device.type == "cpu"  # traces come back detached on the CPU
            assert (t - g).abs().max().item() <= 1e-4, name


def test_own_weights_cuda_matches_cpu(minilm) -> None:
    spec = OwnSpec(d_model=512, n_heads=8, seed=0)
    _, _, cpu = own_trace(minilm, "humpty dumpty sat on", spec, Settings(device="cpu", causal=True))
    _, _, gpu = own_trace(minilm, "humpty dumpty sat on", spec, Settings(device="cuda", causal=True))
    for name, t in cpu.tensors().items():
        assert (t - gpu.tensors()[name]).abs().max().item() <= 1e-4, name
