"""CSV cells that a spreadsheet cannot run: every .csv the app and the CLI write goes through ``writer``.

A token from the user's text (own weights' word tokens, a corpus line) such as ``=HYPERLINK("http://…"&A1)``
would open in Excel, LibreOffice or Google Sheets as a formula. Following OWASP's "CSV injection" advice, a text
cell that starts with = + - @, a tab or a carriage return gets a leading apostrophe, so it is shown as the text
it is. Numbers (``-0.25``, ``1e-06``) are left as they are: a number is not a formula."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping
from typing import IO, Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def safe_cell(value: object) -> object:
    """``value``, or for text a spreadsheet would read as a formula, that text after an apostrophe."""
    if not isinstance(value, str) or not value.startswith(FORMULA_START) or _NUMBER.fullmatch(value):
        return value
    return "'" + value


def safe_row(row: Iterable[object]) -> list[object]:
    return [safe_cell(v) for v in row]


class SafeWriter:
    """csv.writer whose cells pass through safe_cell."""

    def __init__(self, fh: IO[str]) -> None:
        self._w = csv.writer(fh)

    def writerow(self, row: Iterable[object]) -> None:
        self._w.writerow(safe_row(row))

    def writerows(self, rows: Iterable[Iterable[object]]) -> None:
        for row in rows:
            self.writerow(row)


def writer(fh: IO[str]) -> SafeWriter:
    """The CSV writer every .csv of the app and the CLI is written with."""
    return SafeWriter(fh)


def safe_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    """A csv.DictWriter row with its cells through safe_cell."""
    return {k: safe_cell(v) for k, v in row.items()}
