"""Own weights' road: one attention layer made from the settings (or a .safetensors file), X from the text's
tokens, the same engine and what-if edits as a pretrained layer (what_ifs.edit_weights)."""

from __future__ import annotations

import torch

from mha_viz.attention import compute_trace
from mha_viz.config import EMBEDDINGS, TOKENS, Config
from mha_viz.models.load import LoadedModel
from mha_viz.models.run import token_embeddings, word_embeddings
from mha_viz.models.tokens import Tokens, clean_text, tokenize, word_tokens
from mha_viz.own import init_weights, load_weights, random_embeddings
from mha_viz.pipeline import budget
from mha_viz.pipeline.what_ifs import edit_weights
from mha_viz.trace import AttentionTrace, AttentionWeights, MhaVizError


def own_weights(config: Config) -> AttentionWeights:
    """Own weights: loaded from config.weights_file, or made from (d_model, n_heads, seed, init, bias)."""
    if config.weights_file:
        return load_weights(config.weights_file)
    return init_weights(config.d_model, config.n_heads, config.seed, config.init, config.bias)


def own_tokens(lm: LoadedModel, text: str, config: Config) -> Tokens:
    """The tokens own weights see: the bundled tokenizer's word pieces (with [CLS]/[SEP]), or words
    (config.tokens == "words": split on whitespace, no special tokens, ids from tokens.word_id)."""
    if config.tokens == "words":
        return word_tokens(text)
    if config.tokens != "pieces":
        raise MhaVizError(f"unknown tokens {config.tokens!r}; choose one of {', '.join(TOKENS)}")
    return tokenize(lm.tokenizer, text, lm.max_tokens, lm.name)


def own_input(lm: LoadedModel, text: str, config: Config, d_model: int) -> tuple[Tokens, torch.Tensor]:
    """The tokens of ``text`` and X for own weights. Shapes: returns X [pos, d_model].

    Random embeddings are seeded per token id (a word's id for word tokens). Model embeddings of a word
    are the mean of its word pieces' embeddings in the bundled model (plus the model's position embedding
    at the word's position, if asked)."""
    tokens = own_tokens(lm, text, config)
    if config.embeddings == "random":
        return tokens, random_embeddings(list(tokens.ids), d_model, config.seed, config.positions)
    if config.embeddings != "model":
        raise MhaVizError(f"unknown embeddings {config.embeddings!r}; choose one of {', '.join(EMBEDDINGS)}")
    if d_model != lm.d_model:
        raise MhaVizError(
            f"{lm.name}'s embeddings have {lm.d_model} dimensions but d_model is {d_model}; "
            f"set d_model to {lm.d_model} or use random embeddings"
        )
    if config.tokens != "words":
        return tokens, token_embeddings(lm, tokens.ids, config.positions)
    return tokens, word_embeddings(lm, clean_text(text).split(), config.positions)


def own_trace(lm: LoadedModel, text: str, config: Config) -> tuple[Tokens, AttentionWeights, AttentionTrace]:
    """Trace own weights on ``text`` (word pieces of ``lm``'s tokenizer, or words: config.tokens;
    config.heads is not used: for own weights the head count is config.n_heads)."""
    tokens = own_tokens(lm, text, config)
    n = len(tokens.ids)
    d_head = max(1, config.d_model // max(1, config.n_heads))
    shape = budget.Sizes(n, n, config.n_heads, config.n_heads, d_head, config.d_model)
    budget.check("Heads", shape, what="This layer's trace")
    base = own_weights(config)
    weights = edit_weights(base, config.replace(heads=None))
    tokens, x = own_input(lm, text, config, base.d_model)
    trace = compute_trace(
        weights, x, tokens.labels,
        causal=config.causal, scaled=config.scaled, device=config.device, dtype=config.dtype,
    )  # fmt: skip
    return tokens, weights, trace
