"""Test inputs shared by several test files (issue 36 §4: test files import helpers, never each other): hostile
text for the HTML sinks, and long texts over a model's token limit."""

from __future__ import annotations

from mha_viz.models.load import LoadedModel

PAYLOADS = [
    "<img src=x onerror=alert(1)>",
    "<svg onload=alert(1)>",
    '<a href="javascript:alert(1)">click</a>',
    '<span style="font-size:60px">big</span>',
    "&lt;img src=x onerror=alert(1)&gt;",
    r"$\href{javascript:alert(1)}{x}$",
]


def long_text(n_sentences: int) -> str:
    """Varied English: ``n_sentences`` numbered sentences (about 17 MiniLM tokens each)."""
    words = ("animal", "street", "river", "teacher", "garden", "engine", "letter", "window")
    return " ".join(
        f"Sentence {i}: the {words[i % 8]} did not cross the {words[(3 * i + 1) % 8]} because it was too tired."
        for i in range(n_sentences)
    )


def over_limit(lm: LoadedModel, extra: int) -> str:
    """A text with at least ``extra`` tokens more than ``lm`` takes."""
    n = 1
    while len(lm.tokenizer(long_text(n))["input_ids"]) < lm.max_tokens + extra:
        n += 4
    return long_text(n)
