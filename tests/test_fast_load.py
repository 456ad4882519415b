"""The fast load of a local safetensors checkpoint (mha_viz/models/fast_load.py, issue 36 §6): for the bundled
models it gives the very model from_pretrained gives (weights, buffers, tying, config, generation config, eval mode;
outputs and attentions bit-identical); any checkpoint that does not match the model class exactly is left to
from_pretrained (renamed, extra, missing or reshaped tensors, another dtype)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from conftest import SENTENCE, _tiny_tokenizer
from mha_viz.models import capture
from mha_viz.models import fast_load as fast_load_module
from mha_viz.models import load as load_module
from mha_viz.models.fast_load import WEIGHTS, fast_load
from mha_viz.models.load import load_model, model_classes
from mha_viz.models.sources import resolve

BUNDLED = ("", "smollm2")  # the models the app offers without a download: MiniLM (bert), SmolLM2 (llama)


def _fast(src: str | Path, attn: str = "eager") -> torch.nn.Module | None:
    """fast_load's model of a folder, or None where it leaves the folder to from_pretrained."""
    config = transformers.AutoConfig.from_pretrained(src, local_files_only=True, trust_remote_code=False)
    autos = model_classes(str(config.model_type), bool(getattr(config, "is_encoder_decoder", False)))
    return fast_load(src, config, autos, attn)


def _both(src: str | Path, attn: str = "eager") -> tuple[torch.nn.Module | None, torch.nn.Module]:
    """(fast_load's model or None, from_pretrained's model) of one folder, loaded the same way."""
    config = transformers.AutoConfig.from_pretrained(src, local_files_only=True, trust_remote_code=False)
    auto = model_classes(str(config.model_type), bool(getattr(config, "is_encoder_decoder", False)))[0]
    ref = auto.from_pretrained(
        src, attn_implementation=attn, use_safetensors=True, trust_remote_code=False, dtype=torch.float32,
        local_files_only=True,
    )  # fmt: skip
    return _fast(src, attn), ref


def _outputs(model: torch.nn.Module, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every tensor of the model's own forward with its attention maps: hidden states or logits, attentions."""
    with torch.no_grad():
        out = model(input_ids=ids, output_attentions=True)
    found = {k: v for k, v in out.items() if isinstance(v, torch.Tensor)}
    found.update({f"attention {i}": a for i, a in enumerate(out.attentions)})  # [1, h, n, n] each
    return found


def _ties(model: torch.nn.Module) -> set[str]:
    """The names under which a parameter already named is shared again (tied weights)."""
    every = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    return every - {name for name, _ in model.named_parameters()}


def _ids(src: str | Path) -> torch.Tensor:
    tokenizer = transformers.AutoTokenizer.from_pretrained(src, local_files_only=True)
    return tokenizer(SENTENCE, return_tensors="pt")["input_ids"]  # [1, n]


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_model_fast_load_is_from_pretrained_bit_for_bit(name: str) -> None:
    src, _ = resolve(name or None)
    fast, ref = _both(src)
    assert fast is not None, "the bundled checkpoint must take the fast load"
    assert type(fast) is type(ref)
    assert not fast.training and not any(m.training for m in fast.modules())
    assert fast.config.to_dict() == ref.config.to_dict()
    if ref.can_generate():
        assert fast.generation_config.to_dict() == ref.generation_config.to_dict()
    fast_state, ref_state = fast.state_dict(), ref.state_dict()
    assert list(fast_state) == list(ref_state)
    for key, tensor in ref_state.items():
        assert fast_state[key].dtype == tensor.dtype and torch.equal(fast_state[key], tensor), key
    fast_buffers, ref_buffers = dict(fast.named_buffers()), dict(ref.named_buffers())  # non-persistent ones too
    assert list(fast_buffers) == list(ref_buffers)
    for key, tensor in ref_buffers.items():
        assert fast_buffers[key].dtype == tensor.dtype and torch.equal(fast_buffers[key], tensor), key
    assert _ties(fast) == _ties(ref)  # the same weights shared
    assert bool(_ties(ref)) == (name == "smollm2")  # SmolLM2's LM head is its embedding, not in its checkpoint
    ids = _ids(src)
    got, want = _outputs(fast, ids), _outputs(ref, ids)
    assert list(got) == list(want) and len([k for k in got if k.startswith("attention")]) >= 6
    for key, tensor in want.items():
        assert torch.equal(got[key], tensor), key


def test_load_model_takes_the_fast_load_and_traces_as_from_pretrained(monkeypatch: pytest.MonkeyPatch) -> None:
    """The app's own load (our recording attention, hooks, probe) of the bundled MiniLM goes through the fast load
    (seen by a wrapper that calls the real one) and gives the same outputs and attentions as from_pretrained's model
    with the same attention implementation."""
    taken = []

    def seen(*args, **kwargs):
        taken.append(fast_load_module.fast_load(*args, **kwargs))
        return taken[-1]

    monkeypatch.setattr(load_module, "fast_load", seen)
    lm = load_model(None)
    assert len(taken) == 1 and taken[0] is lm.model
    src, _ = resolve(None)
    _, ref = _both(src, capture.NAME)
    assert lm.model.config.to_dict() == ref.config.to_dict()
    ids = _ids(src)
    got, want = _outputs(lm.model, ids), _outputs(ref, ids)
    for key, tensor in want.items():
        assert torch.equal(got[key], tensor), key


def _tiny_bert(folder: Path, edit=None, dtype: torch.dtype = torch.float32) -> Path:
    """A tiny random BERT saved in ``folder`` with a tokenizer, its checkpoint's tensors passed through
    ``edit(state) -> state`` before they are written."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64,
    )  # fmt: skip
    transformers.BertModel(config).eval().save_pretrained(folder)
    _tiny_tokenizer().save_pretrained(folder)
    state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in load_file(folder / WEIGHTS).items()}
    save_file(edit(state) if edit else state, folder / WEIGHTS, metadata={"format": "pt"})
    return folder


def _renamed(state: dict) -> dict:
    state["embeddings.LayerNorm.gamma"] = state.pop("embeddings.LayerNorm.weight")  # an old name transformers maps
    return state


def test_a_matching_tiny_checkpoint_takes_the_fast_load(tmp_path: Path) -> None:
    fast, ref = _both(_tiny_bert(tmp_path))
    assert fast is not None
    ids = torch.tensor([[1, 5, 9, 42, 7, 2]])  # [1, 6]
    got, want = _outputs(fast, ids), _outputs(ref, ids)
    for key, tensor in want.items():
        assert torch.equal(got[key], tensor), key


@pytest.mark.parametrize(
    "edit, dtype",
    [
        (_renamed, torch.float32),  # a renamed key: from_pretrained's conversion maps it back
        (lambda s: {**s, "extra.weight": torch.zeros(2)}, torch.float32),  # a tensor the model lacks
        (lambda s: {k: v for k, v in s.items() if k != "pooler.dense.bias"}, torch.float32),  # one missing
        (lambda s: {**s, "pooler.dense.bias": torch.zeros(31)}, torch.float32),  # another shape
        (None, torch.bfloat16),  # another dtype: from_pretrained casts
    ],
    ids=["renamed", "extra", "missing", "shape", "bfloat16"],
)
def test_a_checkpoint_that_does_not_match_is_left_to_from_pretrained(tmp_path: Path, edit, dtype) -> None:
    assert _fast(_tiny_bert(tmp_path, edit, dtype)) is None


def test_load_model_of_a_renamed_checkpoint_falls_back_and_loads_it(tmp_path: Path) -> None:
    """The app's load of a checkpoint the fast load refuses: from_pretrained's model, renamed weight and all."""
    folder = _tiny_bert(tmp_path, _renamed)
    lm = load_model(str(folder))
    ref = transformers.BertModel.from_pretrained(folder, attn_implementation=capture.NAME, local_files_only=True)
    gamma = load_file(folder / WEIGHTS)["embeddings.LayerNorm.gamma"]
    assert torch.equal(lm.model.embeddings.LayerNorm.weight, gamma)
    assert not lm.model.training and lm.model.config.to_dict() == ref.config.to_dict()
    ids = torch.tensor([[1, 5, 9, 42, 7, 2]])  # [1, 6]
    got, want = _outputs(lm.model, ids), _outputs(ref.eval(), ids)
    for key, tensor in want.items():
        assert torch.equal(got[key], tensor), key
