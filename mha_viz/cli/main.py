"""Command line: ``python -m mha_viz trace --text "..." --out trace.npz``.

Also ``roles`` (head roles to JSON), ``induction`` (induction scores of a decoder's heads to CSV),
``importance`` (each head's importance by ablation to CSV, the pruning curve with --curve), ``variants``
(K/V heads shared: MHA → GQA → MQA, output change against KV cache size, to CSV), ``export`` (one
view as a self-contained .html page), ``models`` and ``app`` (the dashboard; mha_viz/cli/app.py).

Headless export of attention patterns (and, with --full, every intermediate of one layer).
Layers and heads are numbered from 0. Bad input: one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mha_viz.cli import app as app_cli
from mha_viz.cli import corpus as corpus_cli
from mha_viz.cli import export as export_cli
from mha_viz.cli import importance as importance_cli
from mha_viz.cli import patch as patch_cli
from mha_viz.cli import variants as variants_cli
from mha_viz.cli.options import add_device, check_out, is_own, model_name, placement, pretrained
from mha_viz.config import MAX_D_MODEL, MAX_HEADS, MAX_SEED
from mha_viz.errors import MhaVizError
from mha_viz.runtime import before_torch
from mha_viz.runtime.threads import adapt

if TYPE_CHECKING:  # the CLI parses its arguments before torch and numpy load (--help, errors: fast)
    import numpy as np

    from mha_viz.trace import AttentionTrace, AttentionWeights

EXIT_USAGE = 2
PARTS = ("encoder", "decoder", "cross")
EXIT_FAILURE = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line instead of usage + error
        raise MhaVizError(f"{message} (see {self.prog} --help)")


def _heads_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ablate takes head numbers like 0,3, got {text[:40]!r}") from None


def _int_in(lo: int, hi: int | None, what: str):
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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m mha_viz", description="mha-viz: multi-head attention, traced.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    t = sub.add_parser("trace", help="export attention patterns (and intermediates) to .npz")
    t.add_argument("--text", required=True, help="the text to analyse (an encoder-decoder model's source text)")
    t.add_argument("--model", default=None, help='bundled MiniLM (default), a Hugging Face id or folder, or "own"')
    t.add_argument("--target", default=None, help="the decoder's input text (encoder-decoder models only)")
    t.add_argument("--part", choices=PARTS, default=None, help="which attention (default: the model's first)")
    t.add_argument("--layer", type=_int_in(0, None, "--layer"), default=None, help="layer to export (default: all)")
    t.add_argument(
        "--heads",
        type=_int_in(1, MAX_HEADS, "--heads"),
        default=None,
        help=f"re-split into N heads, 1 to {MAX_HEADS}, dividing d_model (own weights: the head count)",
    )
    t.add_argument("--wo", choices=("learned", "identity", "random"), default="learned", help="W^O variant")
    t.add_argument("--ablate", type=_heads_list, default=(), help="heads whose W^O block is zeroed, e.g. 0,3")
    t.add_argument("--causal", action="store_true", help="add a causal (look-ahead) mask")
    t.add_argument("--no-scale", action="store_true", help="drop the 1/sqrt(d_k) scaling")
    add_device(t)
    t.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    t.add_argument("--out", default=None, help="write FILE.npz (without it, print a summary)")
    t.add_argument("--full", action="store_true", help="also store every intermediate and the weights")
    own = t.add_argument_group("own weights (--model own)")
    own.add_argument("--d-model", type=_int_in(1, MAX_D_MODEL, "--d-model"), default=512, help=f"1 to {MAX_D_MODEL}")
    own.add_argument(
        "--seed",
        type=_int_in(0, MAX_SEED, "--seed"),
        default=0,
        help=f"seed for own weights, random embeddings, random W^O (0 to {MAX_SEED})",
    )
    own.add_argument("--init", choices=("xavier", "identity"), default="xavier")
    own.add_argument("--bias", action="store_true", help="own xavier weights with (zero) biases")
    own.add_argument("--embeddings", choices=("random", "model"), default="random")
    own.add_argument(
        "--tokens", choices=("pieces", "words"), default=None,
        help="word pieces of the bundled tokenizer (default) or words split on whitespace",
    )  # fmt: skip
    own.add_argument("--positions", action="store_true", help="add position embeddings to X")
    own.add_argument("--weights", default=None, help="own weights from a .safetensors file")
    r = sub.add_parser("roles", help="score every head's role (previous token, [SEP] sink, broad, ...) to JSON")
    r.add_argument("--text", required=True, help="the text to analyse")
    r.add_argument("--model", default=None, help="bundled MiniLM (default), a Hugging Face id or folder")
    r.add_argument("--target", default=None, help="the decoder's input text (encoder-decoder models only)")
    r.add_argument("--part", choices=PARTS, default=None, help="which attention (default: the model's first)")
    add_device(r)
    r.add_argument("--out", default=None, help="write FILE.json (without it, print the JSON)")
    ind = sub.add_parser("induction", help="induction scores of every head on random tokens repeated twice, to CSV")
    ind.add_argument("--model", default="smollm2", help="a decoder: smollm2 (default), a Hugging Face id or folder")
    ind.add_argument(
        "--length", type=_int_in(2, 512, "--length"), default=50, help="random tokens per copy, 2 to 512 (default 50)"
    )
    ind.add_argument(
        "--seed", type=_int_in(0, MAX_SEED, "--seed"), default=0, help=f"seed of the random tokens (0 to {MAX_SEED})"
    )
    ind.add_argument("--no-bos", action="store_true", help="do not put the model's BOS token in front")
    add_device(ind)
    ind.add_argument("--out", required=True, help="write FILE.csv: one row per head (layer, head, induction_score)")
    importance_cli.add_parser(sub, PARTS)
    corpus_cli.add_parser(sub, PARTS)
    patch_cli.add_parser(sub)
    variants_cli.add_parser(sub, PARTS)
    export_cli.add_parser(sub)
    m = sub.add_parser("models", help="list the architectures this install can trace")
    m.add_argument("--all", action="store_true", help="also list those that are not supported, with the reason")
    app_cli.add_parser(sub)
    return parser


def _config(args: argparse.Namespace, device: str):
    from mha_viz.config import Config

    weights = None
    if args.weights:
        if not args.weights.endswith(".safetensors"):
            raise MhaVizError("--weights takes a .safetensors file (pickle files are not accepted)")
        with open(args.weights, "rb") as fh:
            weights = fh.read(64 * 1024 * 1024 + 1)
    own = is_own(args)
    if args.tokens == "words" and not own:
        raise MhaVizError("--tokens words is for own weights (--model own); a pretrained model uses its tokenizer")
    return Config(
        model=(args.model or "").strip(),
        device=device,
        dtype=args.dtype,
        d_model=args.d_model,
        n_heads=args.heads or 8,
        seed=args.seed,
        init=args.init,
        bias=args.bias,
        embeddings=args.embeddings,
        tokens=args.tokens or "pieces",
        positions=args.positions,
        weights_file=weights,
        heads=None if own else args.heads,
        wo=args.wo,
        wo_seed=args.seed,
        ablate=args.ablate,
        causal=args.causal,
        scaled=not args.no_scale,
        placement="" if own else placement(args),
    )


def run_trace(
    args: argparse.Namespace,
) -> tuple[tuple[str, ...], tuple[str, ...], list[AttentionTrace], AttentionWeights | None]:
    """Compute what ``trace`` exports: (query tokens, key tokens, traces, the weights of a single traced
    layer when its projections are plain linear maps)."""
    from mha_viz.attention import resolve_device
    from mha_viz.pipeline.own_road import own_trace
    from mha_viz.pipeline.road import layer_trace, layer_weights, load, record
    from mha_viz.pipeline.what_ifs import edit_weights

    config = _config(args, str(resolve_device(args.device)))
    if config.own:
        if args.layer not in (None, 0):
            raise MhaVizError(f"own weights have one layer (0); got --layer {args.layer}")
        if args.target or args.part not in (None, "encoder"):
            raise MhaVizError("own weights have one self-attention layer; --target and --part are not used")
        tokens, weights, trace = own_trace(load(config), args.text, config)
        say_cut(tokens, "word tokens" if config.tokens == "words" else "the bundled tokenizer", args.text)
        return tokens.labels, tokens.labels, [trace], weights
    if args.full and args.layer is None:
        raise MhaVizError("--full stores one layer's intermediates; add --layer N")
    lm = load(config)
    part = lm.part(args.part)
    rec = record(lm, args.text, args.target)
    say_cut(rec.tokens, lm.name, args.text)
    say_cut(rec.target, lm.name, args.target)
    layers = range(lm.n_layers(part)) if args.layer is None else [args.layer]
    found = [layer_trace(lm, rec, part, int(i), config) for i in layers]
    weights = None
    if args.full and lm.site(part, args.layer).qkv:
        weights = edit_weights(layer_weights(lm, rec, part, args.layer), config)
    return rec.query_tokens(part).labels, rec.key_tokens(part).labels, found, weights


def say_cut(tokens: object, model_name: str, text: str | None) -> None:
    """One line on stderr when a text was cut to the model's limit (the run goes on with the cut text)."""
    if getattr(tokens, "cut", None) is not None:
        from mha_viz.models.tokens import cut_notice

        print(f"mha-viz: note: {cut_notice(tokens.cut, model_name, text)}", file=sys.stderr)


def to_arrays(
    tokens: tuple[str, ...],
    key_tokens: tuple[str, ...],
    traces: list[AttentionTrace],
    weights: AttentionWeights | None,
    full: bool,
) -> dict[str, np.ndarray]:
    """The .npz contract: tokens [n_query] str, key_tokens [n_key] str, pattern [layers, heads, n_query,
    n_key]; with full, one layer's intermediates (and its weights: W_O and b_O always, W_Q ... b_V when
    the layer's projections are plain linear maps of X)."""
    import numpy as np

    arrays = {
        "tokens": np.asarray(tokens, dtype=str),
        "key_tokens": np.asarray(key_tokens, dtype=str),
        "pattern": np.stack([t.pattern.numpy() for t in traces]),
    }
    if full:
        (trace,) = traces
        arrays.update({n: t.numpy() for n, t in trace.tensors().items() if n != "pattern"})
        dtype = trace.pattern.dtype
        found = weights.tensors() if weights is not None else {"W_O": trace.W_O, "b_O": trace.b_O}
        arrays.update({n: t.to(dtype).numpy() for n, t in found.items() if t is not None})
    return arrays


def _trace_command(args: argparse.Namespace) -> None:
    import numpy as np

    if args.out:
        check_out(args.out, ".npz")
    tokens, key_tokens, traces, weights = run_trace(args)
    arrays = to_arrays(tokens, key_tokens, traces, weights, args.full)
    shape = "x".join(map(str, arrays["pattern"].shape))
    if args.out:
        np.savez_compressed(args.out, **arrays)
        print(f"wrote {args.out}: {len(tokens)} tokens, pattern {shape}, {len(arrays)} arrays")
    else:
        print(f"{len(tokens)} tokens: {' | '.join(tokens)}")
        if key_tokens != tokens:
            print(f"{len(key_tokens)} key tokens: {' | '.join(key_tokens)}")
        print(f"pattern {shape} (layers x heads x query x key); add --out FILE.npz to save")


def _roles_command(args: argparse.Namespace) -> None:
    import json

    from mha_viz.analysis.roles import ROLE_RULES
    from mha_viz.config import Config
    from mha_viz.pipeline.road import record
    from mha_viz.studies.sweeps import all_patterns, roles_table

    if args.out:
        check_out(args.out, ".json")
    lm = pretrained(args, "roles needs a pretrained model; own weights have no trained roles")
    config = Config(model=model_name(args), device=lm.device.type)  # "cuda", not "cuda:0" (resolve_device's names)
    part = lm.part(args.part)
    rec = record(lm, args.text, args.target)
    say_cut(rec.tokens, lm.name, args.text)
    say_cut(rec.target, lm.name, args.target)
    if part == "cross":
        raise MhaVizError("head roles compare a token with its neighbours; choose --part encoder or decoder")
    rows = roles_table(rec.query_tokens(part), all_patterns(lm, rec, part, config))
    text = json.dumps(rows, indent=1)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
        labels = sorted({r["label"] for r in rows})
        print(f"wrote {args.out}: {len(rows)} heads ({', '.join(labels)}); rules: {ROLE_RULES}")
    else:
        print(text)


INDUCTION_COLUMNS = ("layer", "head", "induction_score", "rank")


def _induction_command(args: argparse.Namespace) -> None:
    import csv

    from mha_viz.studies.induction import run_induction

    check_out(args.out, ".csv")
    lm = pretrained(args, "induction needs a pretrained decoder; own weights are one untrained layer")
    result = run_induction(lm, args.length, args.seed, bos=not args.no_bos)
    n_layers, n_heads = result.scores.shape
    rank = {(la, h): i + 1 for i, (la, h, _) in enumerate(result.top_heads(n_layers * n_heads))}
    with open(args.out, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(INDUCTION_COLUMNS)
        for la in range(n_layers):
            for h in range(n_heads):
                writer.writerow([la, h, f"{result.scores[la, h]:.6g}", rank[(la, h)]])
    top = ", ".join(f"L{la}H{h} {s:.3f}" for la, h, s in result.top_heads(5))
    print(f"wrote {args.out}: {n_layers * n_heads} heads ({n_layers} layers x {n_heads}); top: {top}")
    print(
        f"mean loss (nats/token) on {len(result.tokens.ids)} tokens: first copy {result.mean_loss(0):.3f}, "
        f"second copy {result.mean_loss(1):.3f}"
    )


def _models_command(args: argparse.Namespace) -> None:
    from mha_viz.models.catalog import catalog, format_table

    print(format_table(catalog(), show_unsupported=args.all))


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if args.command == "app":  # the rest goes to Streamlit
            return app_cli.command(extra)
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        before_torch()  # MHA_VIZ_TORCH_THREADS (1 when hosted), huge pages; before the command imports torch
        if args.command != "models":
            adapt(
                probe=True
            )  # else: the cores other processes leave free (a busy machine), see mha_viz/runtime/threads.py
        commands = {
            "trace": _trace_command,
            "roles": _roles_command,
            "induction": _induction_command,
            "models": _models_command,
            "importance": importance_cli.command,
            "corpus": corpus_cli.command,
            "patch": patch_cli.command,
            "variants": variants_cli.command,
            "export": export_cli.command,
        }
        commands[args.command](args)
        return 0
    except MhaVizError as exc:
        print(f"mha-viz: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error; quiet at exit too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        print(f"mha-viz: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_FAILURE
    except Exception as exc:  # never a traceback for users; MHA_VIZ_DEBUG=1 shows it
        if os.environ.get("MHA_VIZ_DEBUG"):
            raise
        print(f"mha-viz: internal error: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
