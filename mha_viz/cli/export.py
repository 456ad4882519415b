"""``python -m mha_viz export --view heads --text "..." --out view.html``: one view as a self-contained HTML page."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mha_viz.cli.options import add_device, add_model, check_out
from mha_viz.errors import MhaVizError

if TYPE_CHECKING:  # parsed before plotly loads; only figures/ imports plotly
    import plotly.graph_objects as go

VIEWS = ("heads", "head", "overview", "focus", "lines", "steps")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="one view as a self-contained .html page (plotly.js inlined, no network)")
    p.add_argument("--view", choices=VIEWS, required=True, help="which view")
    p.add_argument("--text", required=True, help="the text to analyse")
    add_model(p, default="")
    p.add_argument("--layer", type=int, default=None, help="layer (default: where 'it' looks at 'animal' most, else 0)")
    p.add_argument("--head", type=int, default=None, help="head for head, lines and steps (default: as --layer)")
    p.add_argument("--focus", default=None, help="query token for focus (default 'it') and lines (default: all)")
    add_device(p, spread=False)  # show.* load the model whole
    p.add_argument("--out", required=True, help="write FILE.html")


def _default_place(args: argparse.Namespace, device: str) -> tuple[int, int]:
    """(layer, head) where 'it' looks at 'animal' most when both are in the text, else (0, 0)."""
    from mha_viz import show

    try:
        layer, head, _ = show.found(args.text, "it", "animal", args.model, device)
    except MhaVizError:
        layer, head = 0, 0
    return layer, head


def figures_of(args: argparse.Namespace, device: str) -> tuple[list[go.Figure], dict[str, str]]:
    """The view's figures and the settings written on the page."""
    from mha_viz import show

    layer, head = args.layer, args.head
    if args.view != "overview" and (layer is None or (head is None and args.view in ("head", "lines", "steps"))):
        found_layer, found_head = _default_place(args, device)
        layer = found_layer if layer is None else layer
        head = (found_head if layer == found_layer else 0) if head is None else head
    settings = {"view": args.view, "model": show.loaded(args.model, device).name, "device": device}
    if args.view == "overview":
        return [show.overview(args.text, args.model, device)], settings
    settings["layer"] = str(layer)
    if args.view == "heads":
        figs = [show.heads(args.text, layer, args.model, device)]
    elif args.view == "head":
        figs = [show.head(args.text, layer, head, args.model, device)]
    elif args.view == "focus":
        figs = [show.focus(args.text, layer, args.focus or "it", args.model, device)]
    elif args.view == "lines":
        figs = [show.lines(args.text, layer, [head], args.focus, args.model, device)]
    else:
        figs = show.steps(args.text, layer, head, args.model, device)
    if args.view in ("head", "lines", "steps"):
        settings["head"] = str(head)
    if args.view in ("focus", "lines") and (args.focus or args.view == "focus"):
        settings["focus"] = args.focus or "it"
    return figs, settings


def command(args: argparse.Namespace) -> None:
    from mha_viz.attention import resolve_device
    from mha_viz.figures.html_page import page

    check_out(args.out, ".html")
    device = str(resolve_device(args.device))
    figs, settings = figures_of(args, device)
    doc = page(figs, f"mha-viz · {args.view}", settings, args.text)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(doc)
    print(f"wrote {args.out}: {len(figs)} figure(s), {len(doc.encode('utf-8')) / 1e6:.2f} MB, plotly.js inlined once")
