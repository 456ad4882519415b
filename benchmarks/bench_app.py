"""Server-side figures for the dashboard, and bertviz on the same model and texts in the same run.

Run:  python benchmarks/bench_app.py
Prints, for the bundled MiniLM (6 layers × 12 heads) on this machine:
  1. Overview of all layers × heads: seconds to compute and serialise (model run, 72 patterns, figure,
     Plotly JSON) and bytes sent, at 128 and 512 tokens; bertviz model_view on the same attentions
     (seconds to build its HTML and its size). Targets: <= 0.3 s / 2 MB at 128, <= 1.5 s / 25 MB at 512.
  2. Heads view payload at 512 tokens (all its figures as Plotly JSON). Target: <= 15 MB.
  3. Server time of a rerun after changing a control on the seed sentence (Streamlit AppTest, the
     app's real script), median per control. Target: <= 300 ms.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import plotly.io as pio
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mha_viz.config import Config  # noqa: E402
from mha_viz.figures import focus_bars, heads_grid, matrix_heatmap, overview  # noqa: E402
from mha_viz.models.load import load_model  # noqa: E402
from mha_viz.pipeline.road import record, traces  # noqa: E402
from mha_viz.studies.sweeps import all_patterns  # noqa: E402

SENTENCE = "The animal didn't cross the street because it was too tired"
MB = 1e6


def text_of(lm, n_tokens: int) -> str:
    """A text that tokenises to exactly n_tokens (with [CLS] and [SEP])."""
    ids = lm.tokenizer((SENTENCE + ". ") * 80)["input_ids"][1 : n_tokens - 1]
    text = lm.tokenizer.decode(ids)
    assert len(lm.tokenizer(text)["input_ids"]) == n_tokens, "tokenisation round trip changed the length"
    return text


def best_of(fn, repeats: int = 3) -> tuple[float, object]:
    """Fastest of a few runs (seconds) and the last result: the figure a warm server reaches."""
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def ours_overview(lm, text: str) -> int:
    patterns = all_patterns(lm, record(lm, text), None, Config(device="cpu"))  # the model run is timed too
    return len(pio.to_json(overview(patterns), validate=False))


def bertviz_overview(lm, text: str) -> int:
    from bertviz import model_view

    enc = lm.tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = lm.model(**enc, output_attentions=True)
    tokens = lm.tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    html = model_view(out.attentions, tokens, html_action="return")
    return len(html.data)


def heads_payload(lm, text: str) -> int:
    tokens, _, (trace,) = traces(Config(device="cpu"), text, layers=[0], lm=lm)
    p = trace.pattern.numpy()
    figs = [
        heads_grid(p, tokens.labels),
        matrix_heatmap(p[0], tokens.labels, tokens.labels, "head 0", attention=True),
        matrix_heatmap(p[:, 10, :], tokens.labels, [f"head {i}" for i in range(p.shape[0])], "focus"),
        focus_bars(p, tokens.labels, 10),
    ]
    return sum(len(pio.to_json(f, validate=False)) for f in figs)


def control_reruns() -> dict[str, float]:
    """Median seconds of the app's script rerun after each kind of control change (warm caches)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["view"] = "Heads"  # where the layer and focus controls are (the page opens on the Lesson)
    at.run()
    timings: dict[str, list[float]] = {"layer": [], "head count": [], "W^O mode": [], "focus token": []}

    def timed(name: str, action) -> None:
        t0 = time.perf_counter()
        action().run()
        timings[name].append(time.perf_counter() - t0)
        assert not at.exception, at.exception

    for _ in range(2):  # the second round is what a returning user meets: cached traces
        for layer in range(6):
            timed("layer", lambda layer=layer: at.selectbox(key="layer").set_value(layer))
        for focus in ("animal", "street", "it", "tired"):
            timed("focus token", lambda focus=focus: at.selectbox(key="focus").set_value(focus))
    at.query_params["view"] = "Head count"
    at.run()
    for _ in range(2):
        for hc in (1, 4, 12, 24):
            timed("head count", lambda hc=hc: at.selectbox(key="hc").set_value(hc))
    at.query_params["view"] = "W^O"
    at.run()
    for _ in range(2):
        for mode in ("random", "ablate", "scale", "identity"):
            timed("W^O mode", lambda mode=mode: at.radio(key="wo_mode").set_value(mode))
    return {k: statistics.median(v) for k, v in timings.items()}


def main() -> None:
    lm = load_model(None, "cpu")
    print(f"torch threads {torch.get_num_threads()}; model {lm.name}, {lm.n_layers()} layers x {lm.n_heads} heads")
    print("\n1. Overview of all layers x heads (compute + serialise), mha-viz vs bertviz model_view, same run")
    print(
        f"{'tokens':>6} {'mha-viz s':>10} {'MB':>7} {'target':>14} "
        f"{'bertviz s':>10} {'MB':>8} {'time x':>7} {'size x':>7}"
    )
    targets = {128: (0.3, 2.0), 512: (1.5, 25.0)}
    for n in (128, 512):
        text = text_of(lm, n)
        t_ours, size_ours = best_of(lambda text=text: ours_overview(lm, text))
        t_bv, size_bv = best_of(lambda text=text: bertviz_overview(lm, text), repeats=1 if n > 128 else 2)
        t_max, mb_max = targets[n]
        ok = "ok" if t_ours <= t_max and size_ours / MB <= mb_max else "MISSED"
        print(
            f"{n:>6} {t_ours:>10.3f} {size_ours / MB:>7.2f} {f'<={t_max}s/{mb_max}MB':>11} {ok:>2} "
            f"{t_bv:>10.3f} {size_bv / MB:>8.1f} {t_bv / t_ours:>6.1f}x {size_bv / size_ours:>6.0f}x"
        )
    size = heads_payload(lm, text_of(lm, 512))
    verdict = "ok" if size <= 15 * MB else "MISSED"
    print(f"\n2. Heads view payload at 512 tokens: {size / MB:.2f} MB (target <= 15 MB: {verdict})")
    print("\n3. Rerun after a control change, seed sentence, median server time (target <= 0.300 s)")
    for name, secs in control_reruns().items():
        print(f"   {name:<12} {secs:.3f} s  {'ok' if secs <= 0.3 else 'MISSED'}")


if __name__ == "__main__":
    main()
