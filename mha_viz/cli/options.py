"""What every command of the CLI shares, written once: the --device option (and --device-map, --max-memory,
--offload-folder for a model larger than one device), the --out check, and "a pretrained model, not own weights".
Light on purpose: imported while the arguments are parsed (torch loads later)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from mha_viz.config import PART_NAMES
from mha_viz.errors import MhaVizError

if TYPE_CHECKING:
    from mha_viz.config import Config
    from mha_viz.pipeline.road import LoadedModel
    from mha_viz.selection import Selection

DEVICES = ("auto", "cpu", "cuda", "mps")
PARTS = tuple(PART_NAMES)  # --part: encoder, decoder, cross
MODEL_HELP = "bundled MiniLM (default), smollm2, a Hugging Face id or folder"


def add_input(parser: argparse.ArgumentParser, many: bool = False, own: bool = False) -> None:
    """What a command reads: --text (with ``many``, repeated: averaged over the texts), --model (with ``own``, own
    weights too), --target (an encoder-decoder's decoder input) and --part."""
    if many:
        parser.add_argument("--text", required=True, action="append", help="the text (repeat --text to average)")
    else:
        parser.add_argument("--text", required=True, help="the text to analyse (an encoder-decoder's source text)")
    add_model(parser, own)
    parser.add_argument("--target", default=None, help="the decoder's input text (encoder-decoder models only)")
    add_part(parser)


def add_model(parser: argparse.ArgumentParser, own: bool = False, default: str | None = None) -> None:
    """--model: the bundled MiniLM by default (None or ""); with ``own``, "own" for own weights too."""
    parser.add_argument("--model", default=default, help=MODEL_HELP + (', or "own" (own weights)' if own else ""))


def add_part(parser: argparse.ArgumentParser) -> None:
    """--part: which attention of the model (default: its first)."""
    parser.add_argument("--part", choices=PARTS, default=None, help="which attention (default: the model's first)")


class Parser(argparse.ArgumentParser):
    """argparse with one line instead of usage + error (raised as MhaVizError: the CLI prints it, exit status 2)."""

    def error(self, message: str) -> None:
        raise MhaVizError(f"{message} (see {self.prog} --help)")


def heads_list(text: str) -> tuple[int, ...]:
    """An argparse type: head numbers like 0,3."""
    try:
        return tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ablate takes head numbers like 0,3, got {text[:40]!r}") from None


def int_in(lo: int, hi: int | None, what: str):
    """An argparse type: an integer from lo to hi (no upper bound when hi is None), else a one-line message."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"takes a whole number, got {text[:40]!r}") from None
        if value < lo or (hi is not None and value > hi):
            bound = f"at least {lo}" if hi is None else f"from {lo} to {hi}"
            shown = text.strip() if len(text.strip()) <= 24 else f"a {len(text.strip())}-digit number"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {shown}")
        return value

    parse.__name__ = what.lstrip("-")  # argparse names the type in some messages
    return parse


def say_cut(tokens: object, model_name: str, text: str | None) -> None:
    """One line on stderr when a text was cut to the model's limit (the run goes on with the cut text)."""
    if getattr(tokens, "cut", None) is not None:
        from mha_viz.models.tokens import cut_notice

        print(f"mha-viz: note: {cut_notice(tokens.cut, model_name, text)}", file=sys.stderr)


def add_device(parser: argparse.ArgumentParser, spread: bool = True) -> None:
    """The --device option (auto: the best this machine has); with ``spread``, the options that spread a pretrained
    model over devices (transformers' device_map through accelerate: the GPUs, then the CPU, then disk)."""
    parser.add_argument("--device", choices=DEVICES, default="auto")
    if not spread:
        return
    from mha_viz.models.placement import MAPS, MEMORY_MAP_SYNTAX

    g = parser.add_argument_group("a model larger than one device")
    g.add_argument(
        "--device-map",
        choices=MAPS,
        default=None,
        help="spread the model's layers over the GPUs, the CPU and disk (auto: in that order)",
    )
    g.add_argument(
        "--max-memory", default=None, help=f"with --device-map: the most each device holds, {MEMORY_MAP_SYNTAX}"
    )
    g.add_argument("--offload-folder", default=None,
                   help="with --device-map: a folder for weights offloaded to disk (safetensors weights are read "
                   "from the model's own files; the folder is for weights that have to be converted)")  # fmt: skip


def placement(args: argparse.Namespace) -> str:
    """The placement --device-map, --max-memory and --offload-folder ask for, encoded for Config.placement ("" when
    the model loads whole); a one-line error for a bad value or for the last two without --device-map."""
    from mha_viz.models.placement import Placement, check, parse_max_memory

    device_map = getattr(args, "device_map", None)
    memory, folder = getattr(args, "max_memory", None), getattr(args, "offload_folder", None)
    if device_map is None:
        if memory or folder:
            raise MhaVizError("--max-memory and --offload-folder need --device-map auto")
        return ""
    return check(Placement(device_map, parse_max_memory(memory or ""), (folder or "").strip())).encode()


def check_out(path: str, *suffixes: str, flag: str = "--out") -> str:
    """``path`` when it ends with one of ``suffixes`` (".csv", ...), else a one-line error."""
    if not path.endswith(suffixes):
        raise MhaVizError(f"{flag} must name a {' or '.join(suffixes)} file, got {path!r}")
    return path


def model_name(args: argparse.Namespace) -> str:
    """The --model value as the loader takes it ("" is the bundled MiniLM)."""
    return (getattr(args, "model", None) or "").strip()


def selection(args: argparse.Namespace, config: Config) -> Selection:
    """The one request value the flags make (what the dashboard's sidebar makes from its controls): ``config``
    with --text (a command that averages repeated --text: the first; texts() gives them all), --target, --part and
    --layer (None without it: every layer)."""
    from mha_viz.selection import Selection

    return Selection(config, texts(args)[0], getattr(args, "target", None), getattr(args, "part", None),
                     getattr(args, "layer", None))  # fmt: skip


def texts(args: argparse.Namespace) -> list[str]:
    """Every --text given (one, or a repeated --text's in their order)."""
    return list(args.text) if isinstance(args.text, list | tuple) else [args.text]


def request(args: argparse.Namespace, lm: LoadedModel) -> Selection:
    """The selection of a command that reads a pretrained model as it is (roles, why, importance, variants): the
    loaded model (--model, where it runs, --device-map), no what-ifs, and the flags' text, part and layer."""
    from mha_viz.config import Config

    return selection(args, Config(model=model_name(args), device=lm.device.type, placement=placement(args)))


def is_own(args: argparse.Namespace) -> bool:
    return model_name(args).lower() == "own"


def pretrained(args: argparse.Namespace, why: str) -> LoadedModel:
    """The pretrained model --model names, on --device; own weights are refused with ``why``."""
    if is_own(args):
        raise MhaVizError(why)
    from mha_viz.attention import resolve_device
    from mha_viz.config import Config
    from mha_viz.pipeline.road import load

    lm = load(Config(model=model_name(args), device=str(resolve_device(args.device)), placement=placement(args)))
    say_spread(lm)
    return lm


def say_spread(lm: LoadedModel) -> None:
    """Where a model spread by a device map went, one line on stderr (nothing for a model loaded whole)."""
    if lm.device_map:
        import sys

        from mha_viz.models.placement import where

        print(f"{lm.name} spread by a device map: {where(lm.device_map)}", file=sys.stderr)
