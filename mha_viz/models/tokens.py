"""Text to tokens: readable, distinct labels for every axis; caps and cleaning before tokenising."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from mha_viz.trace import MhaVizError

_VISIBLE_WS = {"\n": "↵", "\r": "↵", "\t": "⇥", " ": "␣"}
MAX_TEXT_CHARS = 20_000  # checked before tokenising: a megabyte of text is refused at once


@dataclass(frozen=True)
class Tokens:
    """One tokenised text. ``labels`` are distinct display labels; ``pieces`` the readable text."""

    ids: tuple[int, ...]
    pieces: tuple[str, ...]
    labels: tuple[str, ...]
    special: tuple[bool, ...]


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


def clean_text(text: object, what: str = "text") -> str:
    """The text to tokenise, or a clear error: not empty, not over MAX_TEXT_CHARS characters, and
    with lone surrogates (which cannot be encoded, e.g. from a broken URL) replaced by U+FFFD."""
    if not isinstance(text, str) or not text.strip():
        raise MhaVizError(f"the {what} is empty; type a sentence to analyse")
    if len(text) > MAX_TEXT_CHARS:
        raise MhaVizError(f"the {what} has {len(text):,} characters; the limit is {MAX_TEXT_CHARS:,}. Shorten it")
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def make_tokens(tokenizer: object, ids: list[int]) -> Tokens:
    """Labels for token ids: readable pieces, distinct labels, and which ids are special ([UNK] is not)."""
    special_ids = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}  # [UNK] stands for real text
    pieces = [readable(tokenizer.decode([i], clean_up_tokenization_spaces=False)) for i in ids]
    return Tokens(
        ids=tuple(ids),
        pieces=tuple(pieces),
        labels=distinct_labels(pieces),
        special=tuple(i in special_ids for i in ids),
    )


def tokenize(tokenizer: object, text: str, max_tokens: int, model_name: str, what: str = "text") -> Tokens:
    """Tokenise ``text`` (special tokens included).

    Raises MhaVizError for empty or over-long text, text with nothing but special tokens, and
    texts over the model's token limit.
    """
    text = clean_text(text, what)
    ids = list(tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])
    if len(ids) > max_tokens:
        raise MhaVizError(
            f"the {what} has {len(ids)} tokens; {model_name} takes at most {max_tokens}. Shorten the {what}"
        )
    tokens = make_tokens(tokenizer, ids)
    if all(tokens.special):
        raise MhaVizError(f"the {what} has no visible characters the model can read; type a sentence to analyse")
    return tokens


def decoder_tokens(tokenizer: object, target: str, start_id: int, max_tokens: int, model_name: str) -> Tokens:
    """The decoder's input for an encoder-decoder model: its start token, then the target text's tokens
    (teacher forcing, as in training)."""
    body = tokenize(tokenizer, target, max_tokens - 1, model_name, what="target text")
    return make_tokens(tokenizer, [int(start_id), *body.ids])


MAX_WORDS = 512  # the same cap as word pieces (the bundled tokenizer's model takes 512)


def word_id(word: str) -> int:
    """A word's stable id: the first 8 bytes of sha256(word's UTF-8), big-endian, top bit cleared.

    The same word gets the same id in every process (unlike Python's salted hash()); case matters."""
    return int.from_bytes(hashlib.sha256(word.encode("utf-8")).digest()[:8], "big") & (2**63 - 1)


def word_tokens(text: str, max_words: int = MAX_WORDS) -> Tokens:
    """Word-level tokens: ``text`` split on whitespace, no [CLS]/[SEP], ids from word_id.

    Raises MhaVizError for empty text and for more than ``max_words`` words."""
    words = clean_text(text).split()
    if not words:
        raise MhaVizError("the text is empty; type a sentence to analyse")
    if len(words) > max_words:
        raise MhaVizError(f"the text has {len(words)} words; word tokens take at most {max_words}. Shorten the text")
    pieces = [readable(w) for w in words]
    return Tokens(
        ids=tuple(word_id(w) for w in words),
        pieces=tuple(pieces),
        labels=distinct_labels(pieces),
        special=tuple(False for _ in words),
    )
