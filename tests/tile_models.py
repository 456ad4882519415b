"""Tiny random transformers models of the five kinds the tiled and fused long calls are checked on (GQA with rotary
and left-padding, a sliding window, learned sinks, soft-capping, an encoder), and passes through them: eager, and
recorded in tiles (tests/test_tiles.py, tests/test_fused.py)."""

from __future__ import annotations

import torch

from mha_viz.models import capture

_GQA = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "intermediate_size": 96, "vocab_size": 320, "pad_token_id": 0, "bos_token_id": 1,
        "eos_token_id": 2, "max_position_embeddings": 2048}  # fmt: skip
KINDS = {
    "llama": ({**_GQA}, torch.float32),
    "mistral": ({**_GQA, "sliding_window": 24}, torch.float32),
    "gpt_oss": (
        {
            **_GQA,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": 24,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        torch.float32,
    ),
    "gemma2": (
        {
            **_GQA,
            "sliding_window": 24,
            "attn_logit_softcapping": 5.0,
            "query_pre_attn_scalar": 8,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        torch.float64,
    ),
    "bert": ({k: v for k, v in _GQA.items() if k not in ("num_key_value_heads", "head_dim")}, torch.float32),
}
TOL = 1e-5


def _model(kind: str) -> torch.nn.Module:
    import transformers

    cfg, dtype = KINDS[kind]
    config = transformers.AutoConfig.for_model(kind, **cfg)
    torch.manual_seed(0)
    cls = transformers.AutoModel if kind == "bert" else transformers.AutoModelForCausalLM
    model = cls.from_config(config, attn_implementation="eager").to(dtype).eval()
    if kind == "gpt_oss":  # learned sinks large enough to take a visible share
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.sinks.normal_(0.0, 2.0)
    return model


def _batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two texts: the first whole, the second left-padded by 7 (its first rows see no key: the eager softmax's
    all-masked rows). Shapes: ids, mask [2, n]."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 320, (2, n), generator=g)
    mask = torch.ones(2, n, dtype=torch.long)
    mask[1, :7] = 0
    ids[1, :7] = 0
    return ids, mask


def _tiled_pass(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, block: int, tile_cells: int = 0):
    capture.register()
    model.set_attn_implementation(capture.NAME)
    rec = capture.Recorder(extras=False, tile_block=block, tile_cells=tile_cells)
    try:
        with torch.no_grad(), capture.recording(rec):
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
    finally:
        model.set_attn_implementation("eager")
    return out, rec.calls


def _eager_pass(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True,
                     use_cache=False)  # fmt: skip


def last_call(model: torch.nn.Module, n: int = 96):
    """The last attention call of one untiled pass over the first of _batch(n)'s texts (its q, k, v and mask), the
    module that made it and the model's own eager attention function: (call, module, eager)."""
    ids, mask = _batch(n)
    _, calls = _tiled_pass(model, ids[:1], mask[:1], block=0)
    call = calls[-1]
    module = next(m for m in model.modules() if id(m) == call.module_id)
    return call, module, capture.eager_of(module)
