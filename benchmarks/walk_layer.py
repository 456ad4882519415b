"""The walk of the layer from the sidebar to the Heads heatmap: which files the chosen layer passes through.

Runs the real dashboard (AppTest, the bundled MiniLM, ?view=Heads&layer=3) with a profile hook in the script's
thread. From the moment ui/sidebar.py's layer_control returns until the Heads grid's figure is built
(figures' heads_grid), every call of a mha_viz function that is handed the layer is logged by its file: an argument
named layer/la/lay holding it (or a (part, layer) key), or an argument that carries it (a Ctx, a Selection, a layer
handle: ``.layer``, ``.sel.layer``). Prints how many distinct files, and how many times the walk comes back to a
file it had left, for every such call and for the reader's walk (the files in walk order; -v: every call): that
leaves out calls that get it only as ``self`` (a Ctx's or a Selection's own accessors) and the generic walkers of
any value (memo keys, sizes).
Issue 36's figure (29 files, 38 returns) was counted by hand.

    .venv/bin/python benchmarks/walk_layer.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

LAYER = 3


def _app(out: str, layer: int) -> None:
    import json as _json
    import sys as _sys
    from pathlib import Path as _Path

    import mha_viz

    root = str(_Path(mha_viz.__file__).parent) + "/"
    names = {"layer", "la", "lay"}
    state = {"on": False, "done": False}
    walk: list[str] = []

    def carries(name: str, value: object) -> bool:
        if name in names:
            return value == layer or (isinstance(value, tuple) and layer in value)
        for path in ("layer", "sel.layer", "at.layer"):
            v = value
            for attr in path.split("."):
                v = getattr(v, attr, None) if not isinstance(v, (int, str, float, bytes, type(None))) else None
            if isinstance(v, int) and v == layer:
                return True
        return False

    def hook(frame, event, arg):
        code = frame.f_code
        if not code.co_filename.startswith(root) or state["done"]:
            return
        rel = code.co_filename[len(root) :]
        if event == "return" and rel == "ui/sidebar.py" and code.co_name == "layer_control":
            state["on"] = True
            walk.append(f"{rel}:{code.co_name}")
            return
        if event != "call" or not state["on"]:
            return
        if rel.startswith("figures/") and code.co_name == "heads_grid":  # the Heads grid's figure: the end
            walk.append(f"{rel}:{code.co_name}")
            state["done"] = True
            return
        n = code.co_argcount + code.co_kwonlyargcount
        args = code.co_varnames[:n]
        handed = [a for a in args if carries(a, frame.f_locals.get(a))]
        if handed:  # "~": only as ``self`` (a method of the value that carries it: an accessor, not a step)
            walk.append(f"{rel}:{code.co_name}" + ("~" if handed == ["self"] else ""))

    from mha_viz.ui import main

    _sys.setprofile(hook)
    try:
        main()
    finally:
        _sys.setprofile(None)
        _Path(out).write_text(_json.dumps(walk))


def walk(layer: int = LAYER) -> list[str]:
    from streamlit.testing.v1 import AppTest

    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "walk.json")
        at = AppTest.from_function(_app, args=(out, layer), default_timeout=300)
        at.query_params["view"] = "Heads"
        at.query_params["layer"] = str(layer)
        at.run()
        if at.exception:
            raise SystemExit(f"the page failed: {[e.value for e in at.exception]}")
        return json.loads(Path(out).read_text())


GENERIC = ("ui/memo.py", "models/capture.py")  # walkers of any value (cache keys, sizes): not steps of the walk


def count(steps: list[str]) -> tuple[list[str], int, int]:
    """(the files in walk order, consecutive calls in one file merged; distinct files; returns to a file left)."""
    files: list[str] = []
    for f in steps:
        if not files or files[-1] != f:
            files.append(f)
    seen: set[str] = set()
    returns = 0
    for f in files:
        returns += f in seen
        seen.add(f)
    return files, len(seen), returns


def main() -> None:
    calls = walk()
    if "-v" in sys.argv:
        print("\n".join(calls))
    raw = [c.split(":")[0] for c in calls]
    steps = [c.split(":")[0] for c in calls if not c.endswith("~") and not c.startswith(GENERIC)]
    files, n, back = count(raw)
    print(f"every call handed the layer: files passed: {n}; returns to a file already left: {back}; calls: {len(raw)}")
    files, n, back = count(steps)
    print(" -> ".join(files))
    print(
        f"the reader's walk (no accessors of the value itself, no cache-key and size walkers): files passed: {n}; "
        f"returns to a file already left: {back}; calls: {len(steps)}"
    )
    if not any(f.startswith("figures/") for f in files):
        print("(the walk never reached figures/)", file=sys.stderr)


if __name__ == "__main__":
    main()
