"""THE road from (config, text) to traces, shared by the CLI, the dashboard and tests.

    load(config) -> LoadedModel
    record(lm, text, target) -> Recording        one model pass, every attention call recorded
    layer_trace(lm, rec, part, layer, config)    the trace of one layer, after the what-if edits
    traces(config, text, ...)                    all of it in one call (the CLI)

The what-if edits of a layer's weights and W^O are in what_ifs.py; own weights' one layer in own_road.py.

A pretrained layer's trace is recomputed by our engine from the q, k, v the model used (so rotary
embeddings, QK-norm, soft-capping, sliding windows and position biases are all in it) and checked
against the model's own weights.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from mha_viz.attention import attend, compute_trace, resolve_device, resolve_dtype, to_cpu
from mha_viz.config import MATCH_TOL, MAX_LONG_TEXT_CHARS, MAX_TEXT_CHARS, TILE_BLOCK_CELLS, Config, hosted
from mha_viz.models.call import Call
from mha_viz.models.differential import differential_of
from mha_viz.models.latent import latent_of
from mha_viz.models.load import LoadedModel, load_model
from mha_viz.models.run import ModelRun, run_layer, run_model
from mha_viz.models.sources import smollm2_dir, smollm2_ready  # noqa: F401 (the dashboard's way in)
from mha_viz.models.tokens import Tokens, clean_text, cut_notice, decoder_tokens, tokenize, word_tokens  # noqa: F401
from mha_viz.pipeline import budget
from mha_viz.pipeline.what_ifs import edit_weights, edited_wo, routed
from mha_viz.trace import AttentionTrace, AttentionWeights, MhaVizError

SLIM_BYTES = 128 * 2**20  # a recording larger than this keeps only what the patterns need (Recording.slim)


@dataclass(frozen=True, eq=False)
class Recording:
    """One text (and, for encoder-decoders, one target text) through the model, every call recorded."""

    tokens: Tokens  # the input (encoder) text
    target: Tokens | None  # the decoder's input, for encoder-decoder models
    run: ModelRun
    slim: bool = False  # only q, k, v, bias and mask per call (a long text): layer_call gives a layer's X and the rest
    partial: bool = False  # only the calls in run.calls were recorded (record_layer: a long text's shown layer first)

    def query_tokens(self, part: str) -> Tokens:
        return self.tokens if part == "encoder" or self.target is None else self.target

    def key_tokens(self, part: str) -> Tokens:
        return self.tokens if part in ("encoder", "cross") or self.target is None else self.target


def load(config: Config) -> LoadedModel:
    """The pretrained model the config names (the bundled MiniLM for own weights: its tokenizer)."""
    return load_model(config.model_name or None, config.model_device)


def encode(lm: LoadedModel, text: str, target: str | None = None) -> tuple[Tokens, Tokens | None]:
    """Tokens of the text, and of the decoder's text for encoder-decoder models (refused for others).

    A text (or decoder text) longer than the model takes is cut to its limit: ``Tokens.cut`` says what
    was dropped and cut_notice(tokens.cut, lm.name, text) words it; every view then works on the cut text."""
    # a long text is recorded in tiles (models/tiled.py): SmolLM2's 8,192 tokens; hosted mode keeps MAX_TEXT_CHARS
    tokens = tokenize(lm.tokenizer, text, lm.max_tokens, lm.name, max_chars=MAX_TEXT_CHARS if hosted() else
                      MAX_LONG_TEXT_CHARS)  # fmt: skip
    if not lm.encoder_decoder:
        if target:
            raise MhaVizError(f"{lm.name} is not an encoder-decoder model; a target text is not used with it")
        return tokens, None
    if not target:
        raise MhaVizError(f"{lm.name} is an encoder-decoder model: give the decoder's text too (target)")
    return tokens, decoder_tokens(lm.tokenizer, target, lm.decoder_start_id or 0, lm.max_tokens, lm.name)


def _shape(lm: LoadedModel, tokens: Tokens, target_tokens: Tokens | None) -> budget.Sizes:
    n = max(len(tokens.ids), len(target_tokens.ids) if target_tokens else 0)
    d_head = max(1, lm.d_model // max(1, lm.n_heads))
    return budget.Sizes(n, n, lm.n_heads, lm.n_kv_heads, d_head, lm.d_model, len(lm.sites))


def _slim(lm: LoadedModel, shape: budget.Sizes) -> bool:
    """A recording this large keeps only what the patterns need (run_layer takes no decoder input)."""
    return shape.recording_bytes() > SLIM_BYTES and not lm.encoder_decoder


def is_slim(lm: LoadedModel, text: str, target: str | None = None) -> bool:
    """Whether record() keeps only what the patterns need for this text (a long text; tokenising only)."""
    return _slim(lm, _shape(lm, *encode(lm, text, target)))


def tiled_bytes(s: budget.Sizes) -> int:
    """A long text's tiled recording (models/tiled.py): every layer's q, k, v and row statistics, the mask once
    (additive and bool), one block of scores (three copies: scores, the mask added, the softmax) and the pass's own
    activations (a few [n, d_model] and the MLP's [n, ~4 d_model])."""
    per_layer = 4 * (s.n_heads * s.n_q * s.d_head + 2 * s.n_kv_heads * s.n_k * s.d_head) + 16 * s.n_heads * s.n_q
    return s.n_layers * per_layer + 5 * s.n_q * s.n_k + 3 * 4 * TILE_BLOCK_CELLS + 4 * 8 * s.n_q * s.d_model


def _check_recording(s: budget.Sizes, slim: bool) -> None:
    """Refuse a recording over the request budget (hosted mode's is tighter): a slim one is tiled (tiled_bytes)."""
    if slim:
        budget.check_bytes(tiled_bytes(s) + budget.SLACK, "Recording the model", s)
    else:
        budget.check("Heads", s, recording=True, what="Recording the model")


def record(
    lm: LoadedModel,
    text: str,
    target: str | None = None,
    tile_cells: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> Recording:
    """Tokenise and run the model once, recording every attention call. A slim recording (a long text) also keeps
    each layer's pattern as block means at most ``tile_cells`` per side, if asked (rows.pooled_patterns uses them).
    ``progress(done, total)`` is called after each recorded call (total: the model's attention calls)."""
    tokens, target_tokens = encode(lm, text, target)
    shape = _shape(lm, tokens, target_tokens)
    slim = _slim(lm, shape)
    _check_recording(shape, slim)
    dec = None if target_tokens is None else torch.tensor([target_tokens.ids])
    told = None if progress is None else (lambda k: progress(k, len(lm.sites)))
    run = run_model(
        lm,
        torch.tensor([tokens.ids]),
        decoder_ids=dec,
        extras=not slim,
        tile_cells=tile_cells * slim,
        progress=told,
        tile_block=TILE_BLOCK_CELLS,
        hidden_states=not slim,
    )
    return Recording(tokens, target_tokens, share_masks(run), slim)


def record_layer(
    lm: LoadedModel, text: str, part: str | None, layer: int, progress: Callable[[int, int], None] | None = None
) -> Recording:
    """A long text's shown layer first: the model run only as far as ``layer`` and that call recorded whole
    (run_layer: the values the whole recording gives that layer), a partial recording of that call alone. The
    dashboard draws it while record() runs the rest (at 2048 tokens of SmolLM2, layer 9: ~5 s instead of ~25 s).
    ``progress(done, total)`` is called after each layer on the way (total: layer + 1)."""
    tokens, _ = encode(lm, text, None)
    _check_recording(_shape(lm, tokens, None), True)
    part = lm.part(part)
    told = None if progress is None else (lambda k: progress(k, layer + 1))
    run = run_layer(lm, torch.tensor([tokens.ids]), part, layer, progress=told)
    return Recording(tokens, None, run, slim=True, partial=True)


def layer_call(lm: LoadedModel, rec: Recording, part: str | None, layer: int) -> Call:
    """One layer's whole recorded call, X and the rest included: from the recording, or for a slim one from a
    pass that runs the model as far as this layer (run_layer: the same values, one layer's memory)."""
    part = lm.part(part)
    call = rec.run.calls[(part, layer)]
    if not rec.slim or call.x is not None:
        return call
    return run_layer(lm, torch.tensor([rec.tokens.ids]), part, layer).calls[(part, layer)]


def with_call(rec: Recording, part: str, layer: int, call: Call) -> Recording:
    """The recording with one layer's call replaced by ``call`` (a slim recording's layer made whole)."""
    calls = dict(rec.run.calls)
    calls[(part, layer)] = call
    return dataclasses.replace(rec, run=dataclasses.replace(rec.run, calls=calls))


def share_masks(run: ModelRun) -> ModelRun:
    """Calls whose masks are equal share one mask tensor (a decoder's causal mask is the same in every layer:
    [1, 1, n, n] bool each, 126 MB over SmolLM2's 30 layers at 2048 tokens, held once instead)."""
    seen: list[torch.Tensor] = []
    for call in run.calls.values():
        if call.allowed is None:
            continue
        same = next((m for m in seen if m.shape == call.allowed.shape and torch.equal(m, call.allowed)), None)
        if same is None:
            seen.append(call.allowed)
        else:
            call.allowed = same
    return run


def sizes(rec: Recording, part: str, layer: int, n_layers: int = 1) -> budget.Sizes:
    """The sizes of one recorded layer (for the request budget)."""
    call = rec.run.calls[(part, layer)]
    _, h, nq, dh = call.q.shape
    return budget.Sizes(nq, int(call.k.shape[-2]), h, int(call.k.shape[1]), dh, d_model(rec), n_layers)


def d_model(rec: Recording) -> int:
    """The model's width (from the last hidden state's shape: [b, pos, d_model])."""
    return int(rec.run.hidden.shape[-1])


def layer_weights(lm: LoadedModel, rec: Recording, part: str, layer: int) -> AttentionWeights:
    """A plain-linear layer's projections in our layout (for what-ifs that rebuild the layer from X)."""
    from mha_viz.models.arch import plain_weights

    call = rec.run.calls[(lm.part(part), layer)]
    return plain_weights(lm.model, lm.site(part, layer), call.q.shape[1], call.k.shape[1], call.scaling)


def layer_input(rec: Recording, part: str, layer: int) -> torch.Tensor:
    """X of a layer's attention module. Shapes: [q_pos, d_model]."""
    return call_input(rec.run.calls[(part, layer)])


def call_input(call: Call) -> torch.Tensor:
    """X of one recorded call (batch item 0). Shapes: [q_pos, d_model]."""
    if call.x is None:
        raise MhaVizError("this model's attention input was not recorded")
    return call.x[0]


def layer_trace(
    lm: LoadedModel, rec: Recording, part: str | None, layer: int, config: Config, x: bool = True
) -> AttentionTrace:
    """One layer's trace after the what-ifs in ``config`` (re-split heads, W^O, ablation, masks, scaling).

    ``x`` False: a slim recording's trace without X and the pre-rotary q and k (x is [n, 0], q_pre None), for
    views that show only weights; True: with them (layer_call: the model run to this layer if need be)."""
    part = lm.part(part)
    site = lm.site(part, layer)  # (also checks that the layer exists)
    call = layer_call(lm, rec, part, layer) if x or config.heads is not None else rec.run.calls[(part, layer)]
    budget.check("Heads", sizes(rec, part, layer), what="This layer's trace")
    qt, kt = rec.query_tokens(part), rec.key_tokens(part)
    if config.heads is not None and config.heads != call.q.shape[1]:
        weights = edit_weights(layer_weights(lm, rec, part, layer), config)
        mask = None if call.allowed is None else call.allowed[0].all(dim=0)  # [q, k]: the model's own mask
        trace = compute_trace(
            weights, call_input(call), qt.labels, causal=config.causal, attn_mask=mask,
            scaled=config.scaled, device=config.device, dtype=config.dtype,
        )  # fmt: skip
        return _tag(trace, part, kt.labels, None)
    dev, dt = resolve_device(config.device), resolve_dtype(config.dtype)
    routing, w_o, b_o = routed(lm, call, part, layer, config)  # W^O chosen per token (JetMoE), else None
    if routing is None:
        w_o, b_o = edited_wo(lm, call, part, layer, config)  # [h, dv, d], [d]
    allowed = allowed_keys(call, part, config)  # [1|h, q, k]
    scale = call.scaling if config.scaled else 1.0

    def put(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to(device=dev, dtype=dt if t.is_floating_point() else t.dtype)

    with torch.no_grad():
        q, k, v = put(call.q[0]), put(call.k[0]), put(call.v[0])  # [h, q, dh], [kv, k, dh] x2
        bias = None if call.bias is None else put(call.bias[0])  # [h|1, q, k]
        out = attend(q, k, v, None if routing else put(w_o), put(b_o), scale=scale, softcap=call.softcap, bias=bias,
                     allowed=put(allowed), sink=put(call.sink))  # fmt: skip
        if routing is not None:  # each token's heads through its chosen experts' W^O, weighted by the gates
            out["output"] = routing.head_out(out["z"]).sum(0) + (0 if b_o is None else put(b_o))  # [q, d]
        wo_input = None if call.wo_read is None else put(call.wo_read[0])  # [q, h*dv]: gated or normed concat
        if wo_input is not None:  # W^O reads the model's transformed heads, not concat
            w_flat = put(w_o).reshape(-1, put(w_o).shape[-1])  # [h*dv, d]
            out["output"] = wo_input @ w_flat if b_o is None else torch.addmm(put(b_o), wo_input, w_flat)
    x = call.x[0] if call.x is not None else torch.empty(q.shape[1], 0)

    def heads(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:  # [pos, n*dh] -> [n, pos, dh]
        return None if t is None else t[0].reshape(like.shape[1], like.shape[0], -1).transpose(0, 1).contiguous()

    trace = AttentionTrace(
        tokens=qt.labels, key_tokens=kt.labels, part=part, x=x.to(dt), q=to_cpu(q), k=to_cpu(k), v=to_cpu(v),
        W_O=to_cpu(put(w_o)), b_O=None if b_o is None else to_cpu(put(b_o)), scale=scale,
        causal=(call.allowed is not None and site.causal) or (config.causal and part != "cross"),
        softcap=call.softcap,
        bias=None if bias is None else to_cpu(bias), model_delta=call.delta,
        q_pre=heads(call.q_pre, call.q[0]), k_pre=heads(call.k_pre, call.k[0]),
        sink=None if call.sink is None else to_cpu(call.sink.float()),
        wo_input=None if wo_input is None else to_cpu(wo_input),
        latent=latent_of(lm.model, site.latent[0], call),  # MLA: the cached c_KV and k_rope
        differential=differential_of(lm.model.get_submodule(site.name), call),  # DiffLlama
        routing=routing,  # JetMoE: the experts each token's heads went through, and their gates
        **{name: to_cpu(t) for name, t in out.items()},
    )  # fmt: skip
    if not torch.isfinite(trace.pattern).all() or not torch.isfinite(trace.output).all():
        raise MhaVizError(
            f"{lm.name}'s attention in {part} layer {layer} overflowed (values that are not finite numbers); "
            "nothing is shown rather than NaN"
        )
    check_match(lm, call, part, layer)
    return trace


# --- what layer_trace and the long-text rows (rows.py) share: one definition each ---------------------------------
def check_match(lm: LoadedModel, call: Call, part: str, layer: int) -> None:
    """A recomputed pattern further than MATCH_TOL from the model's own weights is never shown."""
    if not call.delta <= MATCH_TOL:  # also catches a NaN difference
        raise MhaVizError(
            f"mha-viz could not reproduce {lm.name}'s attention in {part} layer {layer} (difference "
            f"{call.delta:.2g}); it is not shown rather than shown wrong"
        )


def allowed_keys(call: Call, part: str, config: Config, rows: torch.Tensor | None = None) -> torch.Tensor | None:
    """The keys each query may see: the model's recorded mask, and the what-if causal mask on top (never on
    cross-attention). ``rows`` picks query rows (all when None). Shapes: returns [1|h, q|r, k] or [q|r, k]."""
    allowed = None if call.allowed is None else call.allowed[0]  # [1|h, q, k]
    if allowed is not None and rows is not None:
        allowed = allowed[..., rows, :]
    if config.causal and part != "cross":
        queries = torch.arange(call.q.shape[-2]) if rows is None else rows
        tril = queries[:, None] >= torch.arange(call.k.shape[-2])[None, :]  # [q|r, k]
        allowed = tril if allowed is None else allowed & tril
    return allowed


def _tag(trace: AttentionTrace, part: str, key_tokens: tuple[str, ...], delta: float | None) -> AttentionTrace:
    return dataclasses.replace(trace, part=part, key_tokens=key_tokens, model_delta=delta)


def traces(
    config: Config,
    text: str,
    target: str | None = None,
    part: str | None = None,
    layers: Sequence[int] | None = None,
    lm: LoadedModel | None = None,
) -> tuple[Tokens, Tokens, list[AttentionTrace]]:
    """(query tokens, key tokens, traces of the chosen layers: all by default) for a pretrained model."""
    lm = lm or load(config)
    rec = record(lm, text, target)
    part = lm.part(part)
    chosen = range(lm.n_layers(part)) if layers is None else layers
    found = [layer_trace(lm, rec, part, int(i), config) for i in chosen]
    return rec.query_tokens(part), rec.key_tokens(part), found
