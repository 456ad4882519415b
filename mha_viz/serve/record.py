"""The default page's first screen, recorded from the live model (issue 36 §6): what serve/light.py draws on a cold
server before torch is imported.

The preload calls check_or_record() once the model is loaded (start.py): with no stored page it stores one; with one
it computes the same page from the live model and compares it, the matrix bit for bit (float32, the same weights,
versions and code: the recording is the same computation; see docs/cold-start.md for the thread counts tried) and
every key field, label and text exactly; on any difference it deletes the stored files, logs a warning, and this
process never draws them again. At image build time: ``python -m mha_viz.serve.record`` (the Dockerfile) stores it.
Every page value comes from the functions the Lesson view itself draws with (ui/lesson_screen.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path

import numpy as np

from mha_viz.serve import page_store

log = logging.getLogger("mha_viz.serve.record")


def _plain(value: object) -> object:
    """As the JSON file gives it back (tuples as lists), so a live value compares equal to a stored one."""
    return json.loads(json.dumps(value, ensure_ascii=False))


def default_page() -> tuple[dict, dict, np.ndarray]:
    """(key, page, matrix) of the default page's first screen (the bundled model, the default text and controls,
    the first view), computed from the live model (loaded here if it is not yet). Shapes: matrix [rows, cols]."""
    from mha_viz.selection import Selection
    from mha_viz.ui import PAGE_HEADER, PAGE_TITLE
    from mha_viz.ui.cache import get_base, model_of
    from mha_viz.ui.context import Ctx
    from mha_viz.ui.found import found_head
    from mha_viz.ui.lesson_screen import FIRST_SCREEN, first_screen
    from mha_viz.ui.registry import VIEWS
    from mha_viz.ui.sidebar import DEFAULT_TEXT, default_controls, opening_layer

    controls = default_controls()  # the sidebar's, every control at its default (then mask_controls for an encoder)
    config = controls.config
    lm = model_of(config)
    part = lm.parts[0]
    found = found_head(Selection(config, DEFAULT_TEXT, None, part))  # the layer the page opens on (layer_control)
    layer = opening_layer(getattr(found, "layer", 0), lm.n_layers(part))
    sel = Selection(config, DEFAULT_TEXT, None, part, layer)
    screen = first_screen(Ctx(c=controls, sel=sel, base=get_base(sel)))
    if screen.first is None:
        raise ValueError("the default page draws no map")
    model_file = Path(lm.model.name_or_path) / "model.safetensors"
    key = {
        **page_store.light_key(model_file),
        "model_sha256": page_store.sha256_file(model_file),
        "device": config.device,
        "text": DEFAULT_TEXT,
        "config": dataclasses.asdict(config),
        "view": VIEWS[0],
        "layer": layer,
    }
    call, mark = screen.first.call, screen.first.mark
    figure = {"builder": call.builder, "x": call.x, "y": call.y, "title": call.title, "kwargs": call.kwargs,
              "mark": mark}  # fmt: skip
    page = {"title": PAGE_TITLE, "header": PAGE_HEADER, "intro": screen.intro, "captions": screen.captions,
            "columns": FIRST_SCREEN, "figure": figure}  # fmt: skip
    return _plain(key), _plain(page), np.ascontiguousarray(np.asarray(call.matrix, dtype=np.float32))


def differences(stored: page_store.Stored, key: dict, page: dict, matrix: np.ndarray) -> list[str]:
    """What differs between a stored page and the live one: key fields, page fields, the matrix (bit for bit)."""
    found = [f"key {k}" for k in sorted(set(key) | set(stored.key)) if stored.key.get(k) != key.get(k)]
    found += [f"page {k}" for k in sorted(set(page) | set(stored.page)) if stored.page.get(k) != page.get(k)]
    same = stored.matrix.shape == matrix.shape and np.array_equal(stored.matrix.view(np.uint32), matrix.view(np.uint32))
    if not same:
        worst = (
            float(np.nanmax(np.abs(stored.matrix.astype(np.float64) - matrix)))
            if stored.matrix.shape == matrix.shape
            else float("nan")
        )
        found.append(f"the matrix (shape {stored.matrix.shape} against {matrix.shape}, largest difference {worst:.3g})")
    return found


def check_or_record(where: Path | None = None) -> str:
    """Once the model is loaded: compare the stored first page with the live one ("checked"; "rejected" and deleted
    when anything differs), or store it when there is none ("recorded"; "unwritable" when the folder cannot be
    written). A store whose only differences are in the key's parts a cold server checks itself (the code, the
    versions, the model file's size and time: it was never drawn here) is deleted and stored again for the next
    start ("re-recorded"). "failed": the live page could not be computed (logged). Never raises. After any
    difference this process draws no stored page again (page_store.REJECTED)."""
    where = where or page_store.folder()
    try:
        key, page, matrix = default_page()
    except Exception as e:  # the page's own run reports it to the person; the store is left as it is
        log.warning("the default first page could not be computed: %s", f"{type(e).__name__}: {e}".splitlines()[0])
        return "failed"
    stored = page_store.read(where)
    if stored is None:
        return "recorded" if page_store.write(where, key, page, matrix) else "unwritable"
    wrong = differences(stored, key, page, matrix)
    if not wrong:
        return "checked"
    page_store.remove(where, "it differs from the live page in " + "; ".join(wrong))
    if all(w.removeprefix("key ") in page_store.LIGHT_FIELDS for w in wrong):  # new code or versions: not an error
        return "re-recorded" if page_store.write(where, key, page, matrix) else "rejected"
    return "rejected"


def main(argv: list[str] | None = None) -> int:
    """``python -m mha_viz.serve.record [FOLDER]``: store the default first page (at image build time)."""
    from mha_viz.runtime import before_torch

    args = sys.argv[1:] if argv is None else argv
    before_torch()  # the threads the server's pages use (MHA_VIZ_TORCH_THREADS; 1 when hosted)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("streamlit").setLevel(logging.ERROR)  # the caches used outside a page's run: said once each
    where = Path(args[0]) if args else page_store.folder()
    key, page, matrix = default_page()
    if not page_store.write(where, key, page, matrix):
        return 1
    print(f"stored the first page in {where} ({matrix.shape[0]} × {matrix.shape[1]}, layer {key['layer']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
