"""What every command of the CLI shares, written once: the --device option, the --out check, and "a pretrained
model, not own weights". Light on purpose: imported while the arguments are parsed (torch loads later)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mha_viz.errors import MhaVizError

if TYPE_CHECKING:
    from mha_viz.pipeline import LoadedModel

DEVICES = ("auto", "cpu", "cuda", "mps")


def add_device(parser: argparse.ArgumentParser) -> None:
    """The --device option (auto: the best this machine has)."""
    parser.add_argument("--device", choices=DEVICES, default="auto")


def check_out(path: str, *suffixes: str, flag: str = "--out") -> str:
    """``path`` when it ends with one of ``suffixes`` (".csv", ...), else a one-line error."""
    if not path.endswith(suffixes):
        raise MhaVizError(f"{flag} must name a {' or '.join(suffixes)} file, got {path!r}")
    return path


def model_name(args: argparse.Namespace) -> str:
    """The --model value as the loader takes it ("" is the bundled MiniLM)."""
    return (getattr(args, "model", None) or "").strip()


def is_own(args: argparse.Namespace) -> bool:
    return model_name(args).lower() == "own"


def pretrained(args: argparse.Namespace, why: str) -> LoadedModel:
    """The pretrained model --model names, on --device; own weights are refused with ``why``."""
    if is_own(args):
        raise MhaVizError(why)
    from mha_viz.attention import resolve_device
    from mha_viz.config import Config
    from mha_viz.pipeline import load

    return load(Config(model=model_name(args), device=str(resolve_device(args.device))))
