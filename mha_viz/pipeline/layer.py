"""A recording and one layer of it: the Recording one model pass gives (road.record), the Layer handle a
selection's layer is resolved into once (its part checked, its site looked up, its call) with what the per-layer
helpers read from it (the whole call, the plain weights, X, the sizes), and the layer's trace after the what-ifs
(trace_at). The road (road.py) re-exports all of it.

A pretrained layer's trace is recomputed by our engine from the q, k, v the model used (so rotary embeddings,
QK-norm, soft-capping, sliding windows and position biases are all in it) and checked against the model's own
weights."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from mha_viz.attention import attend, compute_trace, resolve_device, resolve_dtype, to_cpu
from mha_viz.config import MATCH_TOL, Config
from mha_viz.models.arch import Site
from mha_viz.models.call import Call
from mha_viz.models.differential import differential_of
from mha_viz.models.latent import latent_of
from mha_viz.models.load import LoadedModel
from mha_viz.models.run import ModelRun, run_layer
from mha_viz.models.tokens import Tokens
from mha_viz.pipeline import budget
from mha_viz.pipeline.what_ifs import edit_weights, edited_wo, routed
from mha_viz.selection import Selection
from mha_viz.trace import AttentionTrace, AttentionWeights, MhaVizError


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


@dataclass(frozen=True, eq=False)
class Layer:
    """One layer of one recording, resolved once (layer_at, layer_of): the part checked against the model, the site
    looked up (which checks that the layer exists); the per-layer helpers take it instead of looking again."""

    lm: LoadedModel
    rec: Recording | None  # None: the place alone, for a study that runs the model itself (layer_at(lm, None, ...))
    part: str
    layer: int
    site: Site

    @property
    def call(self) -> Call:
        """The recorded call (a slim recording's has no X: whole_call)."""
        if self.rec is None:
            raise MhaVizError(f"{self.part} layer {self.layer} was resolved without a recording: it has no call")
        return self.rec.run.calls[(self.part, self.layer)]

    def whole_call(self) -> Call:
        """The whole call, X and the rest included: from the recording, or for a slim one from a pass that runs the
        model as far as this layer (run_layer: the same values, one layer's memory)."""
        call = self.call
        if not self.rec.slim or call.x is not None:
            return call
        ids = torch.tensor([self.rec.tokens.ids])  # [1, n]
        return run_layer(self.lm, ids, self.part, self.layer).calls[(self.part, self.layer)]

    def weights(self, call: Call | None = None) -> AttentionWeights:
        """A plain-linear layer's projections in our layout (for what-ifs that rebuild the layer from X)."""
        from mha_viz.models.arch import plain_weights

        call = call or self.call
        return plain_weights(self.lm.model, self.site, call.q.shape[1], call.k.shape[1], call.scaling)

    def sizes(self, n_layers: int = 1) -> budget.Sizes:
        return sizes(self.rec, self.part, self.layer, n_layers)


def layer_at(lm: LoadedModel, rec: Recording | None, part: str | None, layer: int) -> Layer:
    """``part`` (None: the model's first) and ``layer`` of ``rec`` resolved once (an unknown one is refused); ``rec``
    None: the place alone (part, layer, site), for a study that runs the model itself."""
    part = lm.part(part)
    return Layer(lm, rec, part, layer, lm.site(part, layer))


def layer_of(lm: LoadedModel, rec: Recording | None, sel: Selection) -> Layer:
    """The selection's layer of ``rec`` (its recording of sel.text and sel.target; None: the place alone), resolved
    once."""
    return layer_at(lm, rec, sel.part, sel.layer)


def layer_call(lm: LoadedModel, rec: Recording, part: str | None, layer: int) -> Call:
    """One layer's whole recorded call, X and the rest included (Layer.whole_call)."""
    return layer_at(lm, rec, part, layer).whole_call()


def with_call(rec: Recording, part: str, layer: int, call: Call) -> Recording:
    """The recording with one layer's call replaced by ``call`` (a slim recording's layer made whole)."""
    calls = dict(rec.run.calls)
    calls[(part, layer)] = call
    return dataclasses.replace(rec, run=dataclasses.replace(rec.run, calls=calls))


def sizes(rec: Recording, part: str, layer: int, n_layers: int = 1) -> budget.Sizes:
    """The sizes of one recorded layer (for the request budget)."""
    call = rec.run.calls[(part, layer)]
    _, h, nq, dh = call.q.shape
    return budget.Sizes(nq, int(call.k.shape[-2]), h, int(call.k.shape[1]), dh, d_model(rec), n_layers)


def d_model(rec: Recording) -> int:
    """The model's width (from the last hidden state's shape: [b, pos, d_model])."""
    return int(rec.run.hidden.shape[-1])


def layer_weights(lm: LoadedModel, rec: Recording, part: str, layer: int) -> AttentionWeights:
    """A plain-linear layer's projections in our layout (Layer.weights)."""
    return layer_at(lm, rec, part, layer).weights()


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
    """One layer's trace after the what-ifs in ``config`` (trace_at on the layer resolved here)."""
    return trace_at(layer_at(lm, rec, part, layer), config, x)


def trace_at(at: Layer, config: Config, x: bool = True) -> AttentionTrace:
    """One layer's trace after the what-ifs in ``config`` (re-split heads, W^O, ablation, masks, scaling), computed
    on config.device in config.dtype.

    ``x`` False: a slim recording's trace without X and the pre-rotary q and k (x is [n, 0], q_pre None), for
    views that show only weights; True: with them (Layer.whole_call: the model run to this layer if need be)."""
    lm, rec, part, layer, site = at.lm, at.rec, at.part, at.layer, at.site
    call = at.whole_call() if x or config.heads is not None else at.call
    budget.check("Heads", at.sizes(), what="This layer's trace")
    qt, kt = rec.query_tokens(part), rec.key_tokens(part)
    if config.heads is not None and config.heads != call.q.shape[1]:
        weights = edit_weights(at.weights(call), config)
        mask = None if call.allowed is None else call.allowed[0].all(dim=0)  # [q, k]: the model's own mask
        trace = compute_trace(
            weights, call_input(call), qt.labels, causal=config.causal, attn_mask=mask,
            scaled=config.scaled, device=config.device, dtype=config.dtype,
        )  # fmt: skip
        return _tag(trace, part, kt.labels, None)
    dev, dt = resolve_device(config.device), resolve_dtype(config.dtype)
    routing, w_o, b_o = routed(lm, site, call, config)  # W^O chosen per token (JetMoE), else None
    if routing is None:
        w_o, b_o = edited_wo(lm, site, call, config)  # [h, dv, d], [d]
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
