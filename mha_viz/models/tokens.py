"""Text to tokens: readable, distinct labels for every axis; caps and cleaning before tokenising."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass

from mha_viz.config import MAX_TEXT_CHARS, MAX_WORDS  # checked before tokenising: a megabyte of text is refused at once
from mha_viz.trace import MhaVizError

_VISIBLE_WS = {"\n": "↵", "\r": "↵", "\t": "⇥", " ": "␣"}


@dataclass(frozen=True)
class Tokens:
    """One tokenised text. ``labels`` are distinct display labels; ``pieces`` the readable text."""

    ids: tuple[int, ...]
    pieces: tuple[str, ...]
    labels: tuple[str, ...]
    special: tuple[bool, ...]
    cut: Cut | None = None  # set when the text was longer than the model takes and was cut


@dataclass(frozen=True)
class Cut:
    """What was dropped when a text was cut to the model's limit (the end of the text is dropped)."""

    what: str  # "text", "target text"
    limit: int  # tokens the model takes (special tokens included)
    total_tokens: int  # tokens of the whole text
    kept_chars: int  # characters of the text before the cut
    total_chars: int
    unit: str = "tokens"  # "words" for word tokens

    @property
    def dropped_tokens(self) -> int:
        return self.total_tokens - self.limit

    @property
    def dropped_chars(self) -> int:
        return self.total_chars - self.kept_chars


def cut_notice(cut: Cut, model_name: str, text: str | None = None) -> str:
    """One line saying what was dropped and where the cut is (the words just before it, if ``text``)."""
    where = f"after character {cut.kept_chars:,} of {cut.total_chars:,}"
    if text:
        tail = " ".join(text[: cut.kept_chars].split()[-4:])
        where += f" (after “…{tail[-40:]}”)" if tail else ""
    takes = "take" if model_name.endswith("tokens") else "takes"
    return (
        f"The {cut.what} has {cut.total_tokens:,} {cut.unit}; {model_name} {takes} at most {cut.limit:,}, "
        f"so it was cut {where}: the last {cut.dropped_tokens:,} {cut.unit} "
        f"({cut.dropped_chars:,} characters) are not analysed."
    )


def readable(piece: str) -> str:
    """A token's text made visible: outer spaces dropped, bare whitespace shown as a symbol."""
    stripped = piece.strip()
    if stripped:
        return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in stripped)
    return "".join(_VISIBLE_WS.get(ch, "␣") for ch in piece) or "∅"


def distinct_labels(pieces: list[str]) -> tuple[str, ...]:
    """Labels that stay distinct on a categorical axis: a repeated piece gets its position."""
    counts: dict[str, int] = {}
    for p in pieces:
        counts[p] = counts.get(p, 0) + 1
    labels = [p if counts[p] == 1 else f"{p} ({i})" for i, p in enumerate(pieces)]
    if len(set(labels)) != len(labels):  # a piece that looked like "x (3)" itself
        labels = [f"{i}:{p}" for i, p in enumerate(pieces)]
    return tuple(labels)


def clean_text(text: object, what: str = "text", max_chars: int = MAX_TEXT_CHARS) -> str:
    """The text to tokenise, or a clear error: not empty, not over ``max_chars`` characters, and
    with lone surrogates (which cannot be encoded, e.g. from a broken URL) replaced by U+FFFD."""
    if not isinstance(text, str) or not text.strip():
        raise MhaVizError(f"the {what} is empty; type a sentence to analyse")
    if len(text) > max_chars:
        raise MhaVizError(f"the {what} has {len(text):,} characters; the limit is {max_chars:,}. Shorten it")
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def make_tokens(tokenizer: object, ids: list[int]) -> Tokens:
    """Labels for token ids: readable pieces, distinct labels, and which ids are special ([UNK] is not)."""
    special_ids = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}  # [UNK] stands for real text
    piece = {i: readable(tokenizer.decode([i], clean_up_tokenization_spaces=False)) for i in set(ids)}  # each once
    pieces = [piece[i] for i in ids]
    return Tokens(
        ids=tuple(ids),
        pieces=tuple(pieces),
        labels=distinct_labels(pieces),
        special=tuple(i in special_ids for i in ids),
    )


def tokenize(
    tokenizer: object, text: str, max_tokens: int, model_name: str, what: str = "text", max_chars: int = MAX_TEXT_CHARS
) -> Tokens:
    """Tokenise ``text`` (special tokens included; at most ``max_chars`` characters).

    A text over the model's token limit is cut to the limit by the tokenizer's own truncation (so the
    closing special tokens stay); ``Tokens.cut`` then says what was dropped (cut_notice words it).
    Raises MhaVizError for empty or over-long text (in characters) and text with nothing but special tokens.
    """
    text = clean_text(text, what, max_chars)
    ids = list(tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])
    cut = None
    if len(ids) > max_tokens:
        kept, kept_chars = _truncated(tokenizer, text, max_tokens)
        cut = Cut(what, max_tokens, len(ids), kept_chars, len(text))
        ids = kept
    tokens = make_tokens(tokenizer, ids)
    if all(tokens.special):
        raise MhaVizError(f"the {what} has no visible characters the model can read; type a sentence to analyse")
    return tokens if cut is None else dataclasses.replace(tokens, cut=cut)


def _truncated(tokenizer: object, text: str, max_tokens: int) -> tuple[list[int], int]:
    """The first ``max_tokens`` ids as the tokenizer truncates (special tokens kept), and how many of the
    text's characters they cover."""
    try:
        enc = tokenizer(
            text, add_special_tokens=True, truncation=True, max_length=max_tokens, return_offsets_mapping=True
        )
        ends = [int(e) for s, e in enc["offset_mapping"] if e > s]  # special tokens have empty spans
        kept_chars = max(ends, default=0)
    except (NotImplementedError, ValueError, TypeError):  # a slow tokenizer has no offsets
        enc = tokenizer(text, add_special_tokens=True, truncation=True, max_length=max_tokens)
        special = set(getattr(tokenizer, "all_special_ids", []))
        body = [i for i in enc["input_ids"] if i not in special]
        kept_chars = min(len(text), len(tokenizer.decode(body, clean_up_tokenization_spaces=False)))
    ids = list(enc["input_ids"])
    if len(ids) > max_tokens:  # a tokenizer that ignores max_length
        raise MhaVizError(f"the tokenizer could not cut the text to {max_tokens} tokens; shorten the text")
    return ids, kept_chars


def decoder_tokens(tokenizer: object, target: str, start_id: int, max_tokens: int, model_name: str) -> Tokens:
    """The decoder's input for an encoder-decoder model: its start token, then the target text's tokens
    (teacher forcing, as in training)."""
    body = tokenize(tokenizer, target, max_tokens - 1, model_name, what="target text")
    cut = body.cut and dataclasses.replace(body.cut, limit=max_tokens, total_tokens=body.cut.total_tokens + 1)
    return dataclasses.replace(make_tokens(tokenizer, [int(start_id), *body.ids]), cut=cut)


def word_id(word: str) -> int:
    """A word's stable id: the first 8 bytes of sha256(word's UTF-8), big-endian, top bit cleared.

    The same word gets the same id in every process (unlike Python's salted hash()); case matters."""
    return int.from_bytes(hashlib.sha256(word.encode("utf-8")).digest()[:8], "big") & (2**63 - 1)


def word_tokens(text: str, max_words: int = MAX_WORDS) -> Tokens:
    """Word-level tokens: ``text`` split on whitespace, no [CLS]/[SEP], ids from word_id.

    More than ``max_words`` words are cut to the first ``max_words`` (``Tokens.cut`` says what was dropped).
    Raises MhaVizError for empty text."""
    text = clean_text(text)
    words = text.split()
    if not words:
        raise MhaVizError("the text is empty; type a sentence to analyse")
    cut = None
    if len(words) > max_words:
        ends = [m.end() for m in re.finditer(r"\S+", text)]  # the same words as str.split()
        cut = Cut("text", max_words, len(words), ends[max_words - 1], len(text), unit="words")
        words = words[:max_words]
    pieces = [readable(w) for w in words]
    return Tokens(
        ids=tuple(word_id(w) for w in words),
        pieces=tuple(pieces),
        labels=distinct_labels(pieces),
        special=tuple(False for _ in words),
        cut=cut,
    )
