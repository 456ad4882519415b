"""``mha-viz corpus --texts FILE --out F.csv``: every head's role scores over a corpus (mha_viz.studies.corpus)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from mha_viz.cli.options import add_device, add_model, add_part, check_out, is_own, placement, say_spread
from mha_viz.config import CORPUS_BATCH
from mha_viz.errors import MhaVizError

if TYPE_CHECKING:
    from mha_viz.studies.corpus_texts import Item


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("corpus", help="every head's role scores averaged over a corpus of texts, to CSV or Parquet")
    p.add_argument("--texts", required=True, help="FILE: .txt (one text per line), .jsonl, .csv or .parquet")
    p.add_argument("--field", default=None, help="the text's field or column in .jsonl, .csv, .parquet (default text)")
    add_model(p, default="")
    add_part(p)
    p.add_argument("--out", required=True, help="write F.csv or F.parquet: one row per head")
    p.add_argument("--engine", choices=("local", "ray"), default="local", help="this process (default) or Ray")
    p.add_argument("--address", default=None, help="with --engine ray: join this Ray cluster (default: start one)")
    p.add_argument("--workers", type=int, default=2, help="with --engine ray: worker processes (default 2)")
    p.add_argument("--batch", type=int, default=CORPUS_BATCH,
                   help=f"texts per batch: run through the model together, padded (default {CORPUS_BATCH}); the unit "
                   "of work and of checkpoints")  # fmt: skip
    p.add_argument("--no-pad", action="store_true",
                   help="one text per forward pass: exactly the per-text numbers of `mha-viz roles` (padded batches "
                   "agree with them to float32 rounding, about 1e-6)")  # fmt: skip
    p.add_argument("--resume", action="store_true", help="go on from the checkpoint beside --out")
    add_device(p)


class Progress:
    """texts/s and ETA on a terminal (stderr), nothing otherwise."""

    def __init__(self, total: int | None, start_inputs: int) -> None:
        self.total, self.start, self.t0 = total, start_inputs, time.perf_counter()
        self.tty = sys.stderr.isatty()

    def __call__(self, inputs: int) -> None:
        if not self.tty:
            return
        rate = (inputs - self.start) / max(time.perf_counter() - self.t0, 1e-9)
        eta = "" if not self.total or rate <= 0 else f", ETA {(self.total - inputs) / rate:.0f} s"
        of = f"/{self.total}" if self.total else ""
        print(f"\r{inputs}{of} texts, {rate:.1f} texts/s{eta}   ", end="", file=sys.stderr, flush=True)


def command(args: argparse.Namespace) -> None:
    from mha_viz.attention import resolve_device
    from mha_viz.studies import corpus, corpus_texts

    check_out(args.out, ".csv", ".parquet")
    if is_own(args):
        raise MhaVizError("corpus needs a pretrained model; own weights have no trained roles")
    if args.batch < 1 or args.workers < 1:
        raise MhaVizError("--batch and --workers must be at least 1")
    items = corpus_texts.read_texts(args.texts, args.field)  # checks the file before the model loads
    first = next(items, None)
    device = str(resolve_device(args.device))
    spread = placement(args)
    meta = {"texts": os.path.abspath(args.texts), "field": args.field, "model": args.model, "part": args.part,
            "batch": args.batch, "padded": not args.no_pad}  # fmt: skip
    t0 = time.perf_counter()
    sums = corpus.load_checkpoint(args.out, meta) if args.resume else None
    resumed = 0 if sums is None else sums.inputs
    progress = Progress(corpus_texts.count_inputs(args.texts), resumed)

    def done(s: corpus.Sums) -> None:
        corpus.save_checkpoint(args.out, s, meta)
        progress(s.inputs)

    remaining = _chain(first, items)
    for _ in range(resumed):  # the inputs the checkpoint has counted already
        next(remaining, None)
    work = corpus_texts.batches(remaining, args.batch)
    options = {"batched": not args.no_pad, "placement": spread}
    if args.engine == "local":
        scorer = corpus.Scorer(args.model, args.part, device, **options)
        say_spread(scorer.lm)
        sums = corpus.run_local(scorer, work, sums, done)
    else:
        from mha_viz.studies.corpus_ray import run_ray

        sums = run_ray(args.model, args.part, device, work, sums, done, args.workers, args.address, options)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    skipped = ", ".join(f"{n} {why}" for why, n in (sums.skipped.items() if sums else ()) if n) or "none"
    if sums is None or sums.texts == 0:  # a table of no text would hold NaN scores (issue 35 §4.11)
        raise MhaVizError(f"{args.texts} has no text that could be scored (skipped: {skipped}); nothing written")
    corpus.write_table(args.out, sums.table())
    if os.path.exists(corpus.checkpoint_path(args.out)):
        os.remove(corpus.checkpoint_path(args.out))
    again = f" (resumed after {resumed} inputs)" if resumed else ""
    print(f"wrote {args.out}: {sums.texts} texts, {sums.tokens} tokens, {time.perf_counter() - t0:.1f} s{again}; "
          f"skipped: {skipped}")  # fmt: skip


def _chain(first: Item | None, rest: Iterator[Item]) -> Iterator[Item]:
    if first is not None:
        yield first
    yield from rest
