"""``python -m mha_viz trace``: attention patterns to .npz (with --full, every intermediate of one layer and its
weights), for a pretrained model or own weights."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mha_viz.cli.options import (
    add_device,
    add_input,
    check_out,
    heads_list,
    int_in,
    is_own,
    placement,
    say_cut,
    selection,
)
from mha_viz.config import (
    DTYPE_NAMES,
    EMBEDDINGS,
    INITS,
    MAX_D_MODEL,
    MAX_FILE_BYTES,
    MAX_HEADS,
    MAX_SEED,
    TOKENS,
    WO_MODES,
)
from mha_viz.errors import MhaVizError

if TYPE_CHECKING:  # the CLI parses its arguments before torch and numpy load (--help, errors: fast)
    import numpy as np

    from mha_viz.config import Config
    from mha_viz.trace import AttentionTrace, AttentionWeights


def add_parser(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("trace", help="export attention patterns (and intermediates) to .npz")
    add_input(t, own=True)
    t.add_argument("--layer", type=int_in(0, None, "--layer"), default=None, help="layer to export (default: all)")
    t.add_argument(
        "--heads",
        type=int_in(1, MAX_HEADS, "--heads"),
        default=None,
        help=f"re-split into N heads, 1 to {MAX_HEADS}, dividing d_model (own weights: the head count)",
    )
    t.add_argument("--wo", choices=WO_MODES, default=WO_MODES[0], help="W^O variant")
    t.add_argument("--ablate", type=heads_list, default=(), help="heads whose W^O block is zeroed, e.g. 0,3")
    t.add_argument("--causal", action="store_true", help="add a causal (look-ahead) mask")
    t.add_argument("--no-scale", action="store_true", help="drop the 1/sqrt(d_k) scaling")
    add_device(t)
    t.add_argument("--dtype", choices=DTYPE_NAMES, default=DTYPE_NAMES[0])
    t.add_argument("--out", default=None, help="write FILE.npz (without it, print a summary)")
    t.add_argument("--full", action="store_true", help="also store every intermediate and the weights")
    own = t.add_argument_group("own weights (--model own)")
    own.add_argument("--d-model", type=int_in(1, MAX_D_MODEL, "--d-model"), default=512, help=f"1 to {MAX_D_MODEL}")
    own.add_argument(
        "--seed",
        type=int_in(0, MAX_SEED, "--seed"),
        default=0,
        help=f"seed for own weights, random embeddings, random W^O (0 to {MAX_SEED})",
    )
    own.add_argument("--init", choices=INITS, default=INITS[0])
    own.add_argument("--bias", action="store_true", help="own xavier weights with (zero) biases")
    own.add_argument("--embeddings", choices=EMBEDDINGS, default=EMBEDDINGS[0])
    own.add_argument(
        "--tokens", choices=TOKENS, default=None,
        help="word pieces of the bundled tokenizer (default) or words split on whitespace",
    )  # fmt: skip
    own.add_argument("--positions", action="store_true", help="add position embeddings to X")
    own.add_argument("--weights", default=None, help="own weights from a .safetensors file")


def _config(args: argparse.Namespace, device: str) -> Config:
    from mha_viz.config import Config

    weights = None
    if args.weights:
        if not args.weights.endswith(".safetensors"):
            raise MhaVizError("--weights takes a .safetensors file (pickle files are not accepted)")
        with open(args.weights, "rb") as fh:
            weights = fh.read(MAX_FILE_BYTES + 1)  # one byte more: own.load_weights refuses a larger file
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
        tokens=args.tokens or TOKENS[0],
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
    from mha_viz.pipeline.road import layer_of, load, record, trace_at
    from mha_viz.pipeline.what_ifs import edit_weights

    sel = selection(args, _config(args, str(resolve_device(args.device))))
    config = sel.config
    if config.own:
        if sel.layer not in (None, 0):
            raise MhaVizError(f"own weights have one layer (0); got --layer {sel.layer}")
        if sel.target or sel.part not in (None, "encoder"):
            raise MhaVizError("own weights have one self-attention layer; --target and --part are not used")
        tokens, weights, trace = own_trace(load(config), sel.text, config)
        say_cut(tokens, "word tokens" if config.tokens == "words" else "the bundled tokenizer", sel.text)
        return tokens.labels, tokens.labels, [trace], weights
    if args.full and sel.layer is None:
        raise MhaVizError("--full stores one layer's intermediates; add --layer N")
    lm = load(config)
    rec = record(lm, sel.text, sel.target)
    say_cut(rec.tokens, lm.name, sel.text)
    say_cut(rec.target, lm.name, sel.target)
    chosen = [sel] if sel.layer is not None else [sel.at(layer=i) for i in range(lm.n_layers(lm.part(sel.part)))]
    layers = [layer_of(lm, rec, s) for s in chosen]  # each resolved once: its part checked, its site looked up
    found = [trace_at(at, config) for at in layers]
    weights = None
    if args.full and layers[0].site.qkv:
        weights = edit_weights(layers[0].weights(), config)
    part = layers[0].part
    return rec.query_tokens(part).labels, rec.key_tokens(part).labels, found, weights


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


def command(args: argparse.Namespace) -> None:
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
