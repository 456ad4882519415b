"""Views that change the layer or take it apart: Head count, W^O, Step by step."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis import contribution_norms, output_change
from mha_viz.edits import divisors
from mha_viz.figures import heads_grid, lines, matrix_heatmap, token_bars
from mha_viz.ui.cache import MAX_SWEEP_HEADS, get_identity_check, get_sweep, sweep_counts
from mha_viz.ui.common import csv_bytes, downloads, head_names, plot
from mha_viz.ui.views import Ctx, _valid_choice

WO_MODES = {
    "identity": "identity (plain concat)",
    "random": "random orthogonal",
    "ablate": "ablate heads",
    "scale": "scale a head",
}  # each compared with the learned W^O


def headcount_view(ctx: Ctx) -> None:
    w = ctx.base
    width = w.n_heads * w.d_head
    if w.n_kv_heads != w.n_heads:
        st.info(
            f"This layer shares {w.n_kv_heads} key/value heads among {w.n_heads} query heads (grouped-query "
            "attention), so its heads cannot be re-split into another count."
        )
        return
    if not w.plain:
        st.info(
            "This layer's queries and keys are not plain linear maps of its input X (rotary position embeddings, "
            "QK-norm, or cross-attention from another text), so re-splitting its projections into another head "
            "count has no single meaning here. The other views show what the model computes."
        )
        return
    counts = sweep_counts(width)
    st.markdown(
        f"The layer's {width} query/key/value columns can be grouped into any head count that divides {width}: "
        f"**{', '.join(map(str, divisors(width)))}** (d_k = {width} / heads). "
        f"This explorer offers the counts up to {MAX_SWEEP_HEADS}."
    )
    if ctx.base.own:
        st.info(
            "Own weights: the head count is simply a parameter. Xavier initialisation draws the same "
            "Q|K|V matrix whatever the head count, so re-splitting here equals initialising with that many heads."
        )
    else:
        st.warning(
            f"What-if: {ctx.base.model_name} was trained with {w.n_heads} heads. Re-splitting its projections into "
            "another count keeps every weight but changes which dimensions are softmaxed together — it is not "
            "what the model computes."
        )
    _valid_choice("hc", counts, w.n_heads)
    hc = int(st.selectbox("Head count", counts, key="hc", bind="query-params"))
    t = ctx.trace(heads=hc)
    sh = ctx.shown(t)
    st.caption(f"Layer {ctx.layer} re-split into {hc} heads of d_k = {width // hc}.")
    if sh.note:
        st.info(sh.note)
    cols = 4 if hc <= 16 else 8
    plot(heads_grid(sh.pattern, sh.labels, cols=cols, clickable=False), "headcount_grid", ctx.c.image_format)
    sweep = get_sweep(ctx.config, ctx.c.text, ctx.target, ctx.part, ctx.layer)
    series = {
        "mean entropy (nats)": sweep["mean_entropy"],
        "mean largest weight": sweep["mean_max_weight"],
        "output change vs original": sweep["output_change"],
    }
    plot(
        lines(sweep["heads"], series, "Across head counts (same weights, re-split)", "heads"),
        "headcount_summary",
        ctx.c.image_format,
    )
    st.caption(
        "Fewer heads: each softmax sees more dimensions and attention tends to collapse onto one pattern; more heads: "
        "each subspace is smaller. Output change: |output − original output| / |original output| over all tokens."
    )
    rows = list(zip(sweep["heads"], *series.values(), strict=True))
    downloads(
        "headcount",
        npz={"tokens": np.asarray(sh.labels, dtype=str), "pattern": sh.pattern},
        csv_data=csv_bytes(["heads", "mean_entropy_nats", "mean_max_weight", "output_change"], rows),
    )


def _wo_edits(h: int) -> dict:
    """The W^O variant the user picked, as Config fields (compared with the learned W^O)."""
    mode = st.radio(
        "W^O", list(WO_MODES), format_func=WO_MODES.get, key="wo_mode", bind="query-params", horizontal=True
    )
    if mode == "identity":
        return {"wo": "identity"}
    if mode == "random":
        return {"wo": "random", "wo_seed": int(st.number_input("Seed", 0, 2**31 - 1, 0, key="wo_seed"))}
    if mode == "ablate":
        chosen = st.multiselect(
            "Heads to ablate (their W^O block is zeroed)",
            list(range(h)),
            default=[0],
            key="ablate",
            format_func=lambda i: f"head {i}",
        )
        return {"ablate": tuple(int(i) for i in chosen)}
    c1, c2 = st.columns(2)
    _valid_choice("scale_head", list(range(h)), 0)
    head = c1.selectbox("Head", list(range(h)), key="scale_head", format_func=lambda i: f"head {i}")
    factor = c2.slider("Factor", 0.0, 3.0, 2.0, 0.1, key="scale_factor")
    return {"head_scale": ((int(head), float(factor)),)}


def wo_view(ctx: Ctx) -> None:
    base = ctx.trace()
    h = base.n_heads
    st.markdown(
        "W^O (d_model × d_model) fuses the concatenated heads: plain concatenation would treat every head alike; "
        "the learned W^O decides how much of each head goes where. Swap it and compare with the learned one."
    )
    edits = _wo_edits(h)
    t = ctx.trace(**edits)
    labels = t.tokens
    change = output_change(base.output.numpy(), t.output.numpy())
    fig = token_bars(
        labels,
        {"relative change |Δ| / |output|": change["relative"], "cosine to original": change["cosine"]},
        "Output change per token (this layer's attention output, before residual and LayerNorm)",
    )
    plot(fig, "wo_change", ctx.c.image_format)
    norms = contribution_norms(t.head_out.numpy())  # [h, n]
    plot(
        matrix_heatmap(
            norms,
            labels,
            head_names(h),
            "Each head's contribution after W^O: ‖z_h · W^O_h‖ per token",
            value_name="norm",
        ),
        "wo_norms",
        ctx.c.image_format,
    )
    rows = [[labels[i], f"{change['relative'][i]:.6g}", f"{change['cosine'][i]:.6g}"] for i in range(len(labels))]
    downloads(
        "wo",
        npz={
            "tokens": np.asarray(labels, dtype=str),
            "head_out_norm": norms.astype(np.float32),
            "output": t.output.numpy(),
            "original_output": base.output.numpy(),
        },
        csv_data=csv_bytes(["token", "relative_change", "cosine"], rows),
    )
    b = ctx.base
    if b.n_kv_heads != b.n_heads or h * t.q.shape[-1] != t.x.shape[1] or not b.plain:
        st.caption(
            "The one-head check needs a layer whose projections are plain linear maps of X that can be re-split "
            "into one head (no grouped K/V, no rotary embeddings or QK-norm)."
        )
        return
    diff = get_identity_check(ctx.config, ctx.c.text, ctx.target, ctx.part, ctx.layer)
    st.metric(
        "1 head and W^O = identity vs plain single-head self-attention: max |difference|",
        f"{diff:.2e}",
        help="Computed live on this layer's own projections: MultiHead with h = 1 and W^O = I against "
        "softmax(X W_Q (X W_K)^T / √d) X W_V. They are the same computation.",
    )


def step_view(ctx: Ctx) -> None:
    t = ctx.trace()
    h, n, dk = t.q.shape
    nk = t.k.shape[1]
    d = t.output.shape[1]
    _valid_choice("step_head", list(range(h)), 0)
    i = int(
        st.selectbox("Head", list(range(h)), key="step_head", format_func=lambda j: f"head {j}", bind="query-params")
    )
    st.caption(
        f"{ctx.where.capitalize()}, head {i}: n = {n} tokens, d_model = {d}, d_k = {dk}. Toggle the scaling and the "
        "causal mask in the sidebar. The seed 000 worked example is one click away there."
    )
    tok, keys = list(t.tokens), list(t.key_tokens)
    g = i // t.group  # the key/value head this query head uses (differs only with grouped-query attention)
    shared = "" if t.group == 1 else f" (shared by heads {g * t.group}–{(g + 1) * t.group - 1})"
    plain = ctx.base.plain
    src = "X" if plain else "the model"
    how = "" if plain else " as the model uses it (after its position encoding / norms)"
    raw = (t.q[i] @ t.k[g].T).numpy()  # [n, nk] before scaling
    scaled = raw * t.scale
    steps = []
    if t.x.shape[1]:
        steps.append(("1. X (one row per token)", t.x.numpy(), None, "X", True, f"[{n} × {t.x.shape[1]}]"))
    steps += [
        (f"2. Q_{i} = {src} · W_Q[{i}]{how}", t.q[i].numpy(), None, "Q", True, f"[{n} × {dk}]"),
        (f"2. K_{g} = {src} · W_K[{g}]{shared}{how}", t.k[g].numpy(), None, "K", True, f"[{nk} × {dk}]"),
        (f"2. V_{g} = {src} · W_V[{g}]{shared}", t.v[g].numpy(), None, "V", True, f"[{nk} × {dk}]"),
        (f"3. Q_{i} K_{g}ᵀ", raw, keys, "QKᵀ", True, f"[{n} × {nk}]"),
        (
            f"3. × {t.scale:.4g}" + (" (the model's scale)" if ctx.config.scaled else " (scaling off)"),
            scaled,
            keys,
            "scaled",
            True,
            f"[{n} × {nk}]",
        ),
    ]
    if t.softcap is not None:
        capped = np.tanh(scaled / t.softcap) * t.softcap
        steps.append((f"3. soft-cap: {t.softcap:g} · tanh(· / {t.softcap:g})", capped, keys, "capped", True, ""))
    if t.bias is not None:
        bias = t.bias[min(i, t.bias.shape[0] - 1)].numpy()
        steps.append(("3. + position bias (added by the model)", bias, keys, "bias", True, f"[{n} × {nk}]"))
    masked = "causal: future keys → −∞, shown blank" if t.causal else "masked keys → −∞, shown blank"
    steps += [
        (f"3. mask ({masked})", t.scores[i].numpy(), keys, "scores", True, f"[{n} × {nk}]"),
        ("4. softmax, row by row (each row sums to 1)", t.pattern[i].numpy(), keys, "weight", False, f"[{n} × {nk}]"),
        (f"5. head_{i} = weights · V_{g}", t.z[i].numpy(), None, "z", True, f"[{n} × {dk}]"),
        (f"6. concat(head_0 … head_{h - 1})", t.concat.numpy(), None, "concat", True, f"[{n} × {h * dk}]"),
        ("7. output = concat · W^O + b_O", t.output.numpy(), None, "output", True, f"[{n} × {d}]"),
    ]
    cols = st.columns(2)
    for j, (title, z, xlab, name, signed, shape) in enumerate(steps):
        with cols[j % 2]:
            fig = matrix_heatmap(
                z,
                xlab,
                tok if name not in ("K", "V") else keys,
                f"{title}   {shape}",
                diverging=signed,
                value_name=name,
                attention=name == "weight",
                height=380,
            )
            plot(fig, f"step_{j}", ctx.c.image_format)
    downloads(
        "step",
        npz={
            "tokens": np.asarray(tok, dtype=str),
            "key_tokens": np.asarray(keys, dtype=str),
            "x": t.x.numpy(),
            "q": t.q[i].numpy(),
            "k": t.k[g].numpy(),
            "v": t.v[g].numpy(),
            "kv_head": np.asarray(g),
            "qk": raw,
            "scores": t.scores[i].numpy(),
            "pattern": t.pattern[i].numpy(),
            "z": t.z[i].numpy(),
            "concat": t.concat.numpy(),
            "output": t.output.numpy(),
        },
    )
