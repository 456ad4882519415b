"""Own weights: initialisation like torch, embeddings, and safetensors round trips and rejections."""

from __future__ import annotations

import json
import pickle
import struct

import pytest
import torch
from safetensors.torch import save

from mha_viz.attention import compute_trace
from mha_viz.own import (
    MAX_FILE_BYTES,
    from_torch_mha,
    init_weights,
    load_weights,
    random_embeddings,
    save_weights,
    sinusoidal_positions,
)
from mha_viz.trace import MhaVizError


@pytest.mark.parametrize("bias", [False, True])
def test_xavier_init_is_torch_multihead_attention(bias: bool) -> None:
    w = init_weights(48, 4, seed=7, bias=bias)
    torch.manual_seed(7)
    ref = from_torch_mha(torch.nn.MultiheadAttention(48, 4, bias=bias))
    for n, t in ref.tensors().items():
        assert torch.equal(w.tensors()[n], t)
    assert (w.b_Q is not None) == bias
    rng_state = torch.get_rng_state()
    init_weights(48, 4, seed=1)
    assert torch.equal(rng_state, torch.get_rng_state())  # the global RNG is left alone


def test_identity_init_attention_is_embedding_similarity() -> None:
    w = init_weights(8, 2, init="identity")
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    t = compute_trace(w, x, device="cpu")
    torch.testing.assert_close(t.scores[1], x[:, 4:] @ x[:, 4:].T / 2.0)
    torch.testing.assert_close(t.output, t.concat)


def test_bad_sizes_are_clear_errors() -> None:
    with pytest.raises(MhaVizError, match=r"choose one of 1, 2, 5, 10$"):
        init_weights(10, 3)
    with pytest.raises(MhaVizError, match="unknown init"):
        init_weights(8, 2, init="kaiming")


def test_random_embeddings_are_per_token_and_seeded() -> None:
    x = random_embeddings([5, 9, 5], 16, seed=3)
    assert x.shape == (3, 16)
    assert torch.equal(x[0], x[2]) and not torch.equal(x[0], x[1])
    assert torch.equal(x, random_embeddings([5, 9, 5], 16, seed=3))
    assert not torch.equal(x, random_embeddings([5, 9, 5], 16, seed=4))
    with_pos = random_embeddings([5, 9, 5], 16, seed=3, positions=True)
    torch.testing.assert_close(with_pos - x, sinusoidal_positions(3, 16))
    assert sinusoidal_positions(3, 16)[0, 1] == 1.0  # cos(0)


def test_save_load_round_trip() -> None:
    w = init_weights(16, 4, seed=2, bias=True)
    back = load_weights(save_weights(w))
    for n, t in w.tensors().items():
        assert torch.equal(back.tensors()[n], t)


def _file(tensors: dict[str, torch.Tensor]) -> bytes:
    return save(tensors)


def test_rejects_pickle_and_garbage() -> None:
    with pytest.raises(MhaVizError, match="safetensors"):
        load_weights(pickle.dumps({"W_Q": [1, 2, 3]}))
    with pytest.raises(MhaVizError, match="too short"):
        load_weights(b"abc")
    torch_pickle = __import__("io").BytesIO()
    torch.save({"W_Q": torch.zeros(2)}, torch_pickle)
    with pytest.raises(MhaVizError):
        load_weights(torch_pickle.getvalue())


def test_rejects_truncated_and_oversized() -> None:
    data = save_weights(init_weights(16, 4))
    with pytest.raises(MhaVizError):
        load_weights(data[:-10])
    huge_header = struct.pack("<Q", 10**12) + b"{}"
    with pytest.raises(MhaVizError, match="header size"):
        load_weights(huge_header)
    with pytest.raises(MhaVizError, match="limit"):
        load_weights(b"\0" * (MAX_FILE_BYTES + 1))


def test_rejects_shape_bomb_header() -> None:
    header = json.dumps({"W_Q": {"dtype": "F32", "shape": [100000, 100000, 100000], "data_offsets": [0, 4]}}).encode()
    with pytest.raises(MhaVizError, match="invalid shape"):
        load_weights(struct.pack("<Q", len(header)) + header + b"\0" * 4)


def test_rejects_inconsistent_nonfinite_and_unknown() -> None:
    w = init_weights(16, 4).tensors()
    bad = dict(w, W_K=torch.zeros(4, 16, 3))
    with pytest.raises(MhaVizError, match="W_K has shape"):
        load_weights(_file(bad))
    nan = dict(w, W_V=w["W_V"].clone().fill_(float("nan")))
    with pytest.raises(MhaVizError, match="NaN"):
        load_weights(_file(nan))
    with pytest.raises(MhaVizError, match="unexpected tensor"):
        load_weights(_file(dict(w, extra=torch.zeros(1))))
    with pytest.raises(MhaVizError, match="lacks W_O"):
        load_weights(_file({k: v for k, v in w.items() if k != "W_O"}))
    with pytest.raises(MhaVizError, match="float tensor"):
        load_weights(_file(dict(w, b_O=torch.zeros(16, dtype=torch.int64))))
