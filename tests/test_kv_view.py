"""The KV cache view (ui/views/kv_cache.py) in a real AppTest on the bundled SmolLM2: the strips are the policy's
masks, the lost-mass map and the numbers are the study's, a budget change only redraws the masks (no new prefill),
the curve has every chosen policy and the sharing point with the chosen point marked; MiniLM is refused in words."""

from __future__ import annotations

import numpy as np

from mha_viz.analysis import kv_policies as kvp
from mha_viz.config import KV_BUDGETS, MATCH_TOL
from mha_viz.models.load import load_model
from mha_viz.studies import kv_lens

TEXT = "Alice gave the key to Bob because Bob had lost his own key. Later Bob opened the door with the key"


def test_kv_view_on_smollm2() -> None:
    from apptest_helpers import array, assert_clean, new_app, specs

    at = new_app(src="SmolLM2-135M (bundled)", view="KV cache", text=TEXT).run(timeout=900)
    assert_clean(at)
    lm = load_model("smollm2")
    pre = kv_lens.prefill(lm, TEXT)
    strips, lost = specs(at)[:2]
    keep = kvp.keep_mask("snapkv", pre.stats, 0.25)  # the defaults: SnapKV at 25 %
    np.testing.assert_array_equal(array(strips["data"][0]["z"]), keep.reshape(90, -1).astype(np.float32))
    np.testing.assert_allclose(array(lost["data"][0]["z"]), kv_lens.lost_mass(pre, keep), atol=1e-6)
    want = kv_lens.evaluate(lm, pre, "snapkv", 0.25)
    assert f"{want.loss_change:+.4f} nats" in [m.value for m in at.metric]
    at.select_slider(key="kv_budget").set_value(1.0)
    at.run(timeout=600)
    assert_clean(at)
    assert array(specs(at)[0]["data"][0]["z"]).min() == 1.0  # everything kept
    assert "+0.0000 nats" in [m.value for m in at.metric]
    at.select_slider(key="kv_budget").set_value(0.25)
    at.multiselect(key="kv_curve_policies").set_value(["streaming", "h2o"])
    at.toggle(key="kv_curve_on").set_value(True)
    at.run(timeout=900)
    assert_clean(at)
    curve = specs(at)[-1]
    names = [t["name"] for t in curve["data"]]
    assert names[:2] == [kvp.POLICY_NAMES["streaming"], kvp.POLICY_NAMES["h2o"]]
    assert any("Variants" in n for n in names) and names[-1].startswith("chosen: ")
    h2o = kv_lens.evaluate(lm, pre, "h2o", 0.5)
    assert abs(array(curve["data"][1]["y"])[2] - h2o.loss_change) < 1e-5  # KV_BUDGETS[2] = 50 %
    assert "from least to most loss" in " ".join(c.value for c in at.caption)


def test_kv_view_says_an_encoder_is_not_for_it() -> None:
    """MiniLM has no next-token head: the view says what it is for (st.info, as Next token), not an error."""
    from apptest_helpers import new_app

    at = new_app(view="KV cache", text=TEXT).run(timeout=600)
    assert not at.exception and not at.error
    assert any("causal language models" in i.value for i in at.info)


def test_the_cli_and_the_view_agree(tmp_path) -> None:
    """`mha-viz kv` writes the view's tables cell for cell on the same text: the chosen point (H2O at 50 %) with
    --policy/--budget, and the curve (every policy, every budget, the sharing point) with --curve."""
    import csv

    from apptest_helpers import assert_clean, new_app

    from mha_viz.cli.main import main

    at = new_app(src="SmolLM2-135M (bundled)", view="KV cache", text=TEXT).run(timeout=900)
    at.selectbox(key="kv_policy").set_value("h2o")
    at.select_slider(key="kv_budget").set_value(0.5)
    at.toggle(key="kv_curve_on").set_value(True)  # every policy is chosen by default
    at.run(timeout=900)
    assert_clean(at)
    point_table, curve_table = at.dataframe[0].value, at.dataframe[1].value

    def cli(*flags: str) -> list[list[str]]:
        out = tmp_path / f"kv{len(flags)}.csv"
        assert main(["kv", "--text", TEXT, "--policy", "h2o", "--budget", "0.5", *flags, "--out", str(out)]) == 0
        with out.open(encoding="utf-8", newline="") as fh:
            return list(csv.reader(fh))

    def same(cli_rows: list[list[str]], view_rows: list[list[str]]) -> None:
        """policy, budget and bytes cell for cell; KL, Δ loss and lost mass as printed (6 digits) within MATCH_TOL:
        the view's pass and the CLI's differ in the last digit of a KL now and then (float32 sums)."""
        assert len(cli_rows) == len(view_rows)
        for mine, theirs in zip(cli_rows, view_rows, strict=True):
            assert mine[:3] == theirs[:3] and (mine[5] == "") == (theirs[5] == ""), (mine, theirs)
            for a, b in zip(mine[3:], theirs[3:], strict=True):
                assert a == b or abs(float(a) - float(b)) <= MATCH_TOL, (mine, theirs)

    point, curve = cli(), cli("--curve")
    assert point[0] == curve[0] == list(point_table.columns) == list(curve_table.columns)
    assert point[1][:2] == ["h2o", "0.5"] and len(curve) == 1 + len(kvp.POLICIES) * len(KV_BUDGETS) + 1
    same(point[1:], point_table.values.tolist())
    same(curve[1:], curve_table.values.tolist())
