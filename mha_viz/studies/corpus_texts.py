"""A corpus's texts, streamed: read from a file (one per line, JSONL, CSV or Parquet), each input numbered and
either a text or the reason it cannot be scored, in batches for the scorer (studies.corpus)."""

from __future__ import annotations

import csv
import json
import os
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from mha_viz.config import MAX_TEXT_CHARS
from mha_viz.errors import MhaVizError

FORMATS = (".txt", ".jsonl", ".csv", ".parquet")
TOO_LONG = f"over {MAX_TEXT_CHARS:,} characters"
SKIP_REASONS = ("empty", "malformed", "over the model's limit", TOO_LONG)
_INVISIBLE = ("Cc", "Cf", "Zs", "Zl", "Zp")  # control, format (zero-width, BOM, ...) and space characters


@dataclass(frozen=True)
class Item:
    """One input: its position in the file (0-based), and its text or why it cannot be scored."""

    index: int
    text: str | None
    problem: str | None = None  # one of SKIP_REASONS


def read_texts(path: str, field_name: str | None = None) -> Iterator[Item]:
    """The file's texts, one at a time (never the whole file in memory). Text files: one text per line; JSONL:
    the ``field_name`` (default "text") of each line's object; CSV: the ``field_name`` column; Parquet: the
    ``field_name`` column, a record batch at a time. A line that cannot be read is an Item with a problem."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise MhaVizError(f"--texts must be a {', '.join(FORMATS)} file, got {path!r}")
    if not os.path.isfile(path):
        raise MhaVizError(f"no such file: {path}")
    if ext == ".parquet":
        yield from _parquet(path, field_name or "text")
        return
    with open(path, encoding="utf-8", errors="replace", newline="") as fh:
        if ext == ".txt":
            for i, line in enumerate(fh):
                yield text_item(i, line.rstrip("\r\n"))
        elif ext == ".jsonl":
            for i, line in enumerate(fh):
                yield _json_item(i, line, field_name or "text")
        else:
            reader = csv.DictReader(fh)
            name = field_name or "text"
            if reader.fieldnames is None or name not in reader.fieldnames:
                raise MhaVizError(f"{path} has no column {name!r}; its columns: {', '.join(reader.fieldnames or [])}")
            for i, row in enumerate(reader):
                value = row.get(name)
                yield text_item(i, value) if isinstance(value, str) else Item(i, None, "malformed")


def text_item(index: int, text: str) -> Item:
    """One text at ``index``, or why it is skipped: "empty" (only spaces, zero-width or other invisible characters),
    or over MAX_TEXT_CHARS characters (the limit of every text mha-viz reads). Either is counted, never fatal."""
    if len(text) > MAX_TEXT_CHARS:
        return Item(index, None, TOO_LONG)
    if all(c.isspace() or unicodedata.category(c) in _INVISIBLE for c in text):
        return Item(index, None, "empty")
    return Item(index, text)


def _json_item(index: int, line: str, name: str) -> Item:
    if not line.strip():
        return Item(index, None, "empty")
    try:
        value = json.loads(line)
    except ValueError:
        return Item(index, None, "malformed")
    text = value.get(name) if isinstance(value, dict) else None
    return text_item(index, text) if isinstance(text, str) else Item(index, None, "malformed")


def _parquet(path: str, name: str) -> Iterator[Item]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MhaVizError("reading Parquet needs pyarrow (pip install pyarrow)") from None
    table = pq.ParquetFile(path)
    if name not in table.schema_arrow.names:
        raise MhaVizError(f"{path} has no column {name!r}; its columns: {', '.join(table.schema_arrow.names)}")
    i = 0
    for batch in table.iter_batches(columns=[name], batch_size=1024):
        for value in batch.column(0).to_pylist():
            yield text_item(i, value) if isinstance(value, str) else Item(i, None, "malformed")
            i += 1


def count_inputs(path: str) -> int | None:
    """How many inputs the file holds (for the progress bar's ETA), or None when that costs a parse."""
    ext = os.path.splitext(path)[1].lower()
    if ext == ".parquet":
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    if ext in (".txt", ".jsonl"):
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    return None


def batches(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    """Consecutive batches of ``size`` inputs (the last may be shorter)."""
    batch: list[Item] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
