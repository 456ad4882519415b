"""The project's one exception type, in a module that imports nothing heavy (the CLI parses before torch loads)."""

from __future__ import annotations


class MhaVizError(ValueError):
    """A problem a person can fix (bad input, unsupported model, ...). The message says how."""
