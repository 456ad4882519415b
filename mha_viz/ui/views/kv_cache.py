"""The KV cache tab (What if): which keys a compressed cache keeps per head, and what that changes
(mha_viz/studies/kv_lens.py). The prefill is recorded once per text; a new policy or budget only recomputes the
masks (the strips and the lost-mass map are drawn at once); the loss and KL need one pass per point."""

from __future__ import annotations

import numpy as np
import streamlit as st

from mha_viz.analysis import kv_policies as kvp
from mha_viz.analysis.plans import kv as plan
from mha_viz.config import KV_BUDGETS, KV_PREFIX_SHARE
from mha_viz.figures.kv import budget_curve, head_map, keep_strips
from mha_viz.studies import kv_lens
from mha_viz.ui.cache import model_of
from mha_viz.ui.common import csv_bytes, downloads, plot
from mha_viz.ui.context import Ctx, needs_pretrained
from mha_viz.ui.memo import sized_cache

BUDGETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0)  # the budget slider's stops


@sized_cache(max_entries=4, max_mb=512)
def get_prefill(model_name: str, device: str, text: str) -> kv_lens.Prefill:
    """The text recorded once (kv_lens.prefill): every mask, strip and lost-mass map is read from it."""
    from mha_viz.ui.cache import get_model

    bar = st.progress(0.0, text="Recording the prefill…")
    try:
        return kv_lens.prefill(get_model(model_name, device), text,
                               progress=lambda f, what: bar.progress(min(max(f, 0.0), 1.0), text=what))  # fmt: skip
    finally:
        bar.empty()


@sized_cache(max_entries=64, max_mb=64)
def get_point(model_name: str, device: str, text: str, policy: str, budget: float) -> kv_lens.Point:
    from mha_viz.ui.cache import get_model

    with st.spinner("Running the continuation with the compressed cache…"):
        return kv_lens.evaluate(get_model(model_name, device), get_prefill(model_name, device, text), policy, budget)


@sized_cache(max_entries=8, max_mb=64)
def get_curve(model_name: str, device: str, text: str, policies: tuple[str, ...]) -> list[kv_lens.Point]:
    from mha_viz.ui.cache import get_model

    lm, pre = get_model(model_name, device), get_prefill(model_name, device, text)
    bar = st.progress(0.0, text="Every policy at every budget…")
    try:
        return kv_lens.curve(lm, pre, policies, KV_BUDGETS,
                             progress=lambda f, what: bar.progress(min(max(f, 0.0), 1.0), text=what))  # fmt: skip
    finally:
        bar.empty()


@sized_cache(max_entries=8, max_mb=8)
def get_restore(model_name: str, device: str, text: str, policy: str, budget: float) -> np.ndarray:
    from mha_viz.ui.cache import get_model

    lm, pre = get_model(model_name, device), get_prefill(model_name, device, text)
    bar = st.progress(0.0, text="Restoring one head's cache at a time…")
    try:
        return kv_lens.restore_map(lm, pre, kvp.keep_mask(policy, pre.stats, budget),
                                   progress=lambda f, what: bar.progress(min(max(f, 0.0), 1.0), text=what))  # fmt: skip
    finally:
        bar.empty()


def kv_view(ctx: Ctx) -> None:
    """Policy and budget; the kept keys per head; the lost mass; the loss and KL; the curve; the heads that cause it."""
    if needs_pretrained(ctx, self_attention=False):
        return
    lm = model_of(ctx.config)
    if not lm.causal_lm:  # a view for another kind of model: say so, as Next token does (not an error of the input)
        st.info(
            "This view is for decoders (causal language models with an LM head, such as SmolLM2): it compresses "
            "their key/value cache and measures the next-token loss. Pick one in the sidebar."
        )
        return
    args = (ctx.config.model_name, ctx.config.model_device, ctx.text)
    pre = get_prefill(*args)
    _, H, P = pre.shape
    st.markdown(
        f"**What the cache keeps.** The first {P} of {pre.ids.shape[1]} tokens ({KV_PREFIX_SHARE:.0%}) are the "
        f"cached prefix; the rest is read with only the kept keys among them (its own tokens stay visible). Budgets "
        f"are per K/V head: this model's {H} query heads read {lm.n_kv_heads} K/V heads (query head h reads K/V head "
        f"h // {H // lm.n_kv_heads}), and a cache holds keys and values per K/V head."
    )
    left, right = st.columns(2)
    names = list(kvp.POLICIES)
    policy = left.selectbox("Policy", names, index=names.index("snapkv"), format_func=kvp.POLICY_NAMES.get,
                            key="kv_policy")  # fmt: skip
    budget = right.select_slider("Kept per K/V head (share of the prefix)", BUDGETS, value=0.25,
                                 format_func=lambda b: f"{b:.0%}", key="kv_budget")  # fmt: skip
    keep = kvp.keep_mask(policy, pre.stats, budget)  # [L, kv, P]: instant, from the recorded prefill
    if policy in ("snapkv", "adakv") and kvp.tokens_of(budget, P) <= pre.stats.window:
        st.caption(f"The budget is within SnapKV's {pre.stats.window}-token observation window: it keeps the most "
                   "recent tokens only (no attention sinks), so it can lose more than StreamingLLM here.")  # fmt: skip
    lost = kv_lens.lost_mass(pre, keep)  # [L, H]
    title = f"{kvp.POLICY_NAMES[policy]} at {budget:.0%}: kept keys (blue), evicted (grey), per layer and K/V head"
    plot(keep_strips(keep, pre.labels[:P], title), "kv_strips", ctx.image_format)
    plot(head_map(lost, "Attention mass each query head loses (the full cache's weight on the evicted keys)",
                  "lost mass"), "kv_lost", ctx.image_format)  # fmt: skip
    st.caption(f"Most mass lost: {plan.top_heads(lost)}. Mean over heads: {lost.mean():.3f}.")
    point = get_point(*args, policy, budget)
    a, b, c = st.columns(3)
    a.metric("Δ loss on the continuation", f"{point.loss_change:+.4f} nats", help=f"full cache {pre.loss:.4f}")
    b.metric("KL of the next token", f"{point.kl:.4g}")
    c.metric("Cache of the prefix", f"{point.kv_bytes / plan.MIB:.3g} MiB",
             help=f"full {kv_lens.kv_bytes(pre, np.ones_like(keep)) / plan.MIB:.3g} MiB")  # fmt: skip
    st.markdown("Top-5 next tokens, before → after: " + "; ".join(
        f"`{t0!r}` {p0:.3f} → `{t1!r}` {p1:.3f}" for (t0, p0), (t1, p1) in zip(point.top_before, point.top_after,
                                                                            strict=True)))  # fmt: skip
    st.caption(f"The same row from the CLI: `mha-viz kv --policy {policy} --budget {budget:g} --out kv.csv` on this "
               "text (cache bytes are float32 keys and values of the prefix).")  # fmt: skip
    _table(plan.rows([point]))
    _curve(ctx, args, policy, budget, point)
    _restore(ctx, args, policy, budget, keep)


def _curve(ctx: Ctx, args: tuple, policy: str, budget: float, point: kv_lens.Point) -> None:
    chosen = st.multiselect("Policies on the curve", list(kvp.POLICIES), default=list(kvp.POLICIES),
                            format_func=kvp.POLICY_NAMES.get, key="kv_curve_policies")  # fmt: skip
    if not st.toggle(f"Draw the curve ({len(chosen)} policies × {len(KV_BUDGETS)} budgets, one pass each)",
                     key="kv_curve_on"):  # fmt: skip
        return
    if not chosen:
        st.error("Choose at least one policy for the curve.")
        return
    points = get_curve(*args, tuple(chosen))
    pre = get_prefill(*args)
    full_mib = kv_lens.kv_bytes(pre, np.ones((pre.shape[0], 1, pre.prefix), dtype=bool)) * model_of(
        ctx.config).n_kv_heads / plan.MIB  # fmt: skip
    star = (f"{kvp.POLICY_NAMES[policy]} at {budget:.0%}", point.kv_bytes / plan.MIB, point.loss_change)
    plot(budget_curve(plan.curves(points), plan.shares(points), star, full_mib), "kv_curve_plot", ctx.image_format)
    st.caption(plan.best_at(points, 0.25) or plan.best_at(points, KV_BUDGETS[0]))
    _table(plan.rows(points))  # `mha-viz kv --curve`'s CSV, cell for cell
    downloads("kv_curve_csv", csv_data=csv_bytes(plan.TABLE_COLUMNS, plan.rows(points)))


def _restore(ctx: Ctx, args: tuple, policy: str, budget: float, keep: np.ndarray) -> None:
    heads = int((~keep.all(-1)).sum())
    if not heads or not st.toggle(f"Which heads' evictions cause the change ({heads} passes)", key="kv_restore"):
        return
    caused = get_restore(*args, policy, budget)  # [L, kv]
    title = "Loss each K/V head's evictions cause (its full cache restored alone)"
    plot(head_map(caused, title, "nats<br>red: costs<br>blue: helps", "kv"), "kv_restore_map", ctx.image_format)
    st.caption(f"Largest: {plan.top_heads(caused, word='K/V head')}.")


def _table(rows: list[list[object]]) -> None:
    """The CLI's CSV rows (plan.rows), as text cells: what `mha-viz kv` writes for the same text."""
    st.dataframe({c: [str(r[i]) for r in rows] for i, c in enumerate(plan.TABLE_COLUMNS)}, hide_index=True)
