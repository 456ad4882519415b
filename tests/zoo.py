"""Tiny random models of many architectures, built offline from configs (no download).

Each entry: model_type -> config keyword arguments. Sizes are small (hidden 32-64, 2 layers) so the whole
zoo builds in seconds; special token ids sit inside the small vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

VOCAB = 320
_IDS = {"vocab_size": VOCAB, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
_DEC = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96,
        "max_position_embeddings": 128, **_IDS}  # fmt: skip
_GQA = {**_DEC, "num_key_value_heads": 2, "head_dim": 16}
_MLA = {
    **_DEC,
    "num_key_value_heads": 4,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 12,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "moe_intermediate_size": 32,
}
_ENC = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 96,
        "max_position_embeddings": 128, **_IDS}  # fmt: skip
_S2S = {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 96, "decoder_ffn_dim": 96, "max_position_embeddings": 128,
        "decoder_start_token_id": 2, **_IDS}  # fmt: skip

ZOO: dict[str, dict] = {
    # encoders
    "bert": _ENC,
    "roberta": {**_ENC, "pad_token_id": 1, "bos_token_id": 0},
    "xlm-roberta": {**_ENC, "pad_token_id": 1, "bos_token_id": 0},
    "electra": {**_ENC, "embedding_size": 32},
    "distilbert": {"dim": 64, "n_layers": 2, "n_heads": 4, "hidden_dim": 96, "max_position_embeddings": 128, **_IDS},
    "modernbert": {
        **_ENC,
        "global_attn_every_n_layers": 2,
        "local_attention": 4,
        "cls_token_id": 1,
        "sep_token_id": 2,
    },
    # decoders
    "gpt2": {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128, **_IDS},
    "gpt_neox": {**_DEC, "rotary_pct": 0.25},
    "opt": {**_DEC, "ffn_dim": 96, "word_embed_proj_dim": 64},
    "llama": _GQA,
    "mistral": {**_GQA, "sliding_window": 4},
    "mixtral": {**_GQA, "sliding_window": None, "num_local_experts": 2, "num_experts_per_tok": 1},
    "qwen2": {**_GQA, "use_sliding_window": False},
    "qwen3": {**_GQA, "use_sliding_window": False},
    "gemma": {**_GQA},
    "gemma2": {**_GQA, "sliding_window": 4, "attn_logit_softcapping": 50.0, "query_pre_attn_scalar": 16},
    "gemma3_text": {**_GQA, "sliding_window": 4, "query_pre_attn_scalar": 16},
    "phi3": {**_GQA, "sliding_window": None},
    "phi": {**_DEC, "partial_rotary_factor": 0.5},
    "olmo2": _GQA,
    "granite": {**_GQA, "attention_multiplier": 0.2},
    "starcoder2": {**_GQA, "sliding_window": None},
    "cohere": {**_GQA, "use_qk_norm": True},
    "olmo": _DEC,
    # latent attention (MLA): a compressed key/value latent, decoupled rotary part, value heads of their own size
    "deepseek_v2": {**_MLA, "q_lora_rank": None},
    "deepseek_v3": {**_MLA, "q_lora_rank": 24, "n_group": 1, "topk_group": 1},
    "minicpm3": {
        **_DEC,
        "num_key_value_heads": 4,
        "kv_lora_rank": 16,
        "q_lora_rank": 24,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 16,
        "v_head_dim": 12,
    },
    # learned attention sinks (a logit per head in each softmax's denominator), alternating sliding windows
    "gpt_oss": {
        **_GQA,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention"],
    },
    # a norm (BitNet) or an output gate (Qwen3-Next, between linear-attention layers) before W^O
    "bitnet": _GQA,
    "qwen3_next": {
        **_GQA,
        "layer_types": ["linear_attention", "full_attention"],
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
    },
    # MobileBERT: Q and K read a bottleneck, V the hidden state (not plain linear maps of one X)
    "mobilebert": {**_ENC, "embedding_size": 64},
    # encoder-decoders
    "bart": _S2S,
    "mbart": _S2S,
    "marian": {**_S2S, "decoder_vocab_size": VOCAB},
    # Switch Transformers: T5 attention with a [b, 1, 1, k] encoder mask (one row for every query)
    "switch_transformers": {
        "d_model": 64,
        "d_kv": 16,
        "d_ff": 96,
        "num_layers": 2,
        "num_decoder_layers": 2,
        "num_heads": 4,
        "num_experts": 4,
        "decoder_start_token_id": 0,
        **_IDS,
    },
    "t5": {
        "d_model": 64,
        "d_kv": 16,
        "d_ff": 96,
        "num_layers": 2,
        "num_heads": 4,
        "relative_attention_num_buckets": 8,
        "decoder_start_token_id": 0,
        **_IDS,
    },
}


def build(model_type: str, seed: int = 0) -> torch.nn.Module:
    """A tiny random model of ``model_type`` (float32, eval mode) with the head mha-viz would load."""
    import transformers

    from mha_viz.models.load import model_classes

    config = transformers.AutoConfig.for_model(model_type, **ZOO[model_type])
    torch.manual_seed(seed)
    for cls in model_classes(model_type, bool(getattr(config, "is_encoder_decoder", False))):
        try:
            return cls.from_config(config, attn_implementation="eager").float().eval()
        except ValueError:
            continue
    raise AssertionError(f"no auto class builds {model_type}")


def eager_pass(lm: object, ids: torch.Tensor, handles: Sequence[object] = ()) -> object:
    """The model's own eager forward with output_attentions (mha-viz's attention function set back afterwards), the
    hook ``handles`` removed afterwards: what a test compares a recording against. Shapes: ids [1, n]."""
    lm.model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            return lm.model(input_ids=ids, output_attentions=True, use_cache=False)
    finally:
        lm.model.set_attn_implementation("mha_viz")
        for handle in handles:
            handle.remove()
