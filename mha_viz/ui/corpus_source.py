"""The Corpus view's choice of corpus (issue 26 §2): the bundled examples, an uploaded text file (one text per line,
within the app's upload limit, at most max_corpus_texts() texts) or a stats file written by `mha-viz corpus`; and the
run over the texts, cached per (model, corpus digest, part)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import streamlit as st

from mha_viz.analysis.corpus_stats import StatsTable, read_stats
from mha_viz.config import MAX_TEXT_CHARS, MAX_UPLOAD_BYTES, MAX_UPLOAD_MB, Config, hosted, max_corpus_texts
from mha_viz.errors import MhaVizError
from mha_viz.studies.corpus_run import CorpusRun, Progress, bundled_texts, digest, run_corpus
from mha_viz.studies.corpus_texts import text_item
from mha_viz.ui.cache import model_of
from mha_viz.ui.links import check_choice, check_int, plain
from mha_viz.ui.memo import CACHES, SizedCache

SOURCES = {
    "examples": "the bundled examples",
    "upload": "a text file (.txt, one text per line)",
    "stats": "a stats file (.csv) from mha-viz corpus",
}
RUNS = SizedCache("corpus", max_entries=8, max_bytes=64 * 2**20)  # a run keeps 10 scores per head and text
CACHES.append(RUNS)


@dataclass(frozen=True)
class Texts:
    """Texts to score: the corpus's (at most the cap), with the number the user chose to use."""

    texts: tuple[str, ...]
    name: str  # what the corpus is, for captions

    @property
    def digest(self) -> str:
        return digest(self.texts)


def choose_corpus() -> Texts | StatsTable | None:
    """The corpus picker: texts to score, a stats table to show, or None (the page says why)."""
    labels = list(SOURCES.values())
    check_choice("corpus_source", labels, labels[0])
    source = st.radio(
        "Corpus", list(SOURCES), format_func=SOURCES.get, key="corpus_source", bind="query-params", horizontal=True
    )
    if source == "stats":
        return _stats_file()
    if source == "upload":
        found = _text_file()
        if found is None:
            return None
        lines, name = found
    else:
        lines, name = list(bundled_texts()), "the bundled examples"
    cap = max_corpus_texts()
    if len(lines) > cap:
        where = "on this hosted server" if hosted() else "in the dashboard (the command line takes any number)"
        st.warning(f"{name.capitalize()} has {len(lines):,} texts; the first {cap:,} are used: the limit {where}.")
        lines = lines[:cap]
    n = len(lines)
    bind = check_int("corpus_n", 1, n, n)
    used = int(st.number_input(f"Texts used (of {n})", 1, n, n, key="corpus_n", bind=bind,
                               help="The first N texts of the corpus are scored."))  # fmt: skip
    return Texts(tuple(lines[: min(max(used, 1), n)]), name)


def _text_file() -> tuple[list[str], str] | None:
    upload = st.file_uploader(
        "Texts, one per line (.txt)", type=["txt"], key="corpus_upload", max_upload_size=MAX_UPLOAD_MB
    )
    if upload is None:
        st.info("Choose a .txt file with one text per line (UTF-8).")
        return None
    if upload.size > MAX_UPLOAD_BYTES:
        st.error(f"That file is over {MAX_UPLOAD_MB} MB (the upload limit); choose a smaller file, or "
                 "score it with the command line: python -m mha_viz corpus --texts FILE --out heads.csv")  # fmt: skip
        return None
    text = upload.getvalue().decode("utf-8", errors="replace")
    items = [text_item(i, line.strip()) for i, line in enumerate(text.splitlines())]
    kept = [item.text for item in items if item.text is not None]
    if not kept:
        st.error("That file has no text in it (it is empty or holds only blank lines, invisible characters or lines "
                 f"over {MAX_TEXT_CHARS:,} characters). Choose a .txt file with one text per line.")  # fmt: skip
        return None
    why = Counter(item.problem for item in items if item.text is None)
    if why:
        st.caption(f"{sum(why.values()):,} line(s) skipped: " + ", ".join(f"{n:,} {w}" for w, n in why.items()) + ".")
    return kept, "your file"


def _stats_file() -> StatsTable | None:
    upload = st.file_uploader(
        "Stats file written by mha-viz corpus (.csv)", type=["csv"], key="corpus_stats", max_upload_size=MAX_UPLOAD_MB
    )
    if upload is None:
        st.info("Choose the .csv that `python -m mha_viz corpus --texts FILE --out heads.csv` wrote.")
        return None
    if upload.size > MAX_UPLOAD_BYTES:
        st.error(f"That file is over {MAX_UPLOAD_MB} MB (the upload limit); choose a smaller file.")
        return None
    try:
        return read_stats(upload.getvalue(), "That file")
    except MhaVizError as e:
        st.error(plain(str(e)))  # the message may quote the file
        return None


def _key(config: Config, texts: Texts, part: str | None) -> tuple:
    return (config.model_name, config.model_device, texts.digest, len(texts.texts), part)


def has_run(config: Config, texts: Texts, part: str | None) -> bool:
    return _key(config, texts, part) in RUNS


def get_run(config: Config, texts: Texts, part: str | None, progress: Progress | None = None) -> CorpusRun:
    """The corpus run on the page's model, computed once per (model, corpus digest, part)."""

    def compute() -> CorpusRun:
        return run_corpus(model_of(config), config.model_name, config.device, part, texts.texts, progress)

    return RUNS.get_or_compute(_key(config, texts, part), compute)
