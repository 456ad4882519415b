"""Where a model's layers go when it is larger than one device: transformers' ``device_map`` through accelerate.

A Placement says how to spread the model ("auto": the GPUs in order, then the CPU, then disk), how much memory
each device may hold (``max_memory``: {GPU index | "cpu" | "mps": size}) and where disk-offloaded weights go
(``offload_folder``; with safetensors weights transformers reads offloaded layers straight from the model's own
files, so the folder is needed only for weights it has to convert). It travels as one plain string (``encode``),
so a Config, a cache key and a CLI run carry it like any other setting; the string is joined to the device as
"<device>|<placement>" in Config.model_device, and load_model splits it again.

Light on purpose (no torch, no transformers): the CLI parses it while reading its arguments.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from mha_viz.config import PLACEMENT_SEP as SEP
from mha_viz.errors import MhaVizError

MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)(KB|MB|GB|TB|KIB|MIB|GIB|TIB)?$", re.IGNORECASE)  # no unit: bytes
_UNITS = {"": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30,
          "TIB": 2**40}  # fmt: skip
_KEYS = ("cpu", "mps")
MEMORY_MAP_SYNTAX = 'per device, e.g. "0=20GiB,1=20GiB,cpu=30GiB" or JSON {"0": "20GiB", "cpu": "30GiB"}'


@dataclass(frozen=True)
class Placement:
    """transformers' device_map, max_memory and offload_folder as plain values."""

    device_map: str = "auto"
    max_memory: tuple[tuple[str, str], ...] = ()  # ((device, size), ...): ("0", "2GiB"), ("cpu", "1GiB")
    offload_folder: str = ""

    def encode(self) -> str:
        """One string (JSON) for a Config or a cache key."""
        return json.dumps({"map": self.device_map, "mem": [list(p) for p in self.max_memory],
                           "folder": self.offload_folder}, sort_keys=True)  # fmt: skip

    @classmethod
    def decode(cls, text: str) -> Placement:
        try:
            data = json.loads(text)
            found = cls(str(data["map"]), tuple((str(k), str(v)) for k, v in data["mem"]), str(data["folder"]))
        except (ValueError, KeyError, TypeError):
            raise MhaVizError(f"not a model placement: {text[:80]!r}") from None
        return check(found)

    def kwargs(self) -> dict:
        """The keyword arguments of from_pretrained: device_map, max_memory ({0: "2GiB", "cpu": "1GiB"}),
        offload_folder (when given)."""
        out: dict = {"device_map": self.device_map}
        if self.max_memory:
            out["max_memory"] = {int(k) if k.isdigit() else k: to_bytes(v) for k, v in self.max_memory}
        if self.offload_folder:
            out["offload_folder"] = self.offload_folder
        return out

    def describe(self) -> str:
        """One line for people: how the model is spread."""
        mem = ", ".join(f"{'GPU ' + k if k.isdigit() else k} ≤ {v}" for k, v in self.max_memory)
        folder = f"; offloaded weights in {self.offload_folder}" if self.offload_folder else ""
        return f"device map {self.device_map}" + (f" ({mem})" if mem else "") + folder


def check(p: Placement) -> Placement:
    """``p`` when its values are valid, else a MhaVizError saying which is not."""
    if p.device_map not in MAPS:
        raise MhaVizError(f"device map must be one of {', '.join(MAPS)}; got {p.device_map!r}")
    for key, size in p.max_memory:
        if not (key.isdigit() or key in _KEYS):
            raise MhaVizError(f"max memory: {key!r} is not a device; use a GPU index (0, 1, ...), cpu or mps")
        if not _SIZE.match(size):
            raise MhaVizError(f"max memory: {size!r} for {key} is not a size; write e.g. 2GiB, 500MB")
    if len({k for k, _ in p.max_memory}) != len(p.max_memory):
        raise MhaVizError("max memory names a device twice")
    if "\n" in p.offload_folder or "\x00" in p.offload_folder:
        raise MhaVizError("the offload folder must be a plain path")
    return p


def to_bytes(size: str) -> int:
    """ "2GiB" -> 2147483648 (units are bytes whatever their case: "2gb" is 2·10⁹ bytes, not bits)."""
    found = _SIZE.match(size.strip())
    if found is None:
        raise MhaVizError(f"max memory: {size!r} is not a size; write e.g. 2GiB, 500MB")
    return int(float(found.group(1)) * _UNITS[(found.group(2) or "").upper()])


def parse_max_memory(text: str) -> tuple[tuple[str, str], ...]:
    """ "0=2GiB,cpu=1GiB" or a JSON object {"0": "2GiB", "cpu": "1GiB"} -> (("0", "2GiB"), ("cpu", "1GiB")).
    Sizes are strings with a unit (bytes as a plain number are accepted too)."""
    text = text.strip()
    if not text:
        return ()
    if text.startswith(("{", "[")):
        try:
            data = json.loads(text)
        except ValueError:
            raise MhaVizError(f"max memory is not valid JSON: {text[:80]!r}") from None
        if not isinstance(data, dict):
            raise MhaVizError('max memory JSON must be an object like {"0": "2GiB", "cpu": "1GiB"}')
        pairs = [(str(k), _size(v)) for k, v in data.items()]
    else:
        pairs = []
        for part in text.split(","):
            key, eq, value = part.partition("=")
            if not eq or not key.strip() or not value.strip():
                raise MhaVizError(f"max memory: {part.strip()!r} is not DEVICE=SIZE; {MEMORY_MAP_SYNTAX}")
            pairs.append((key.strip().lower(), _size(value)))
    found = tuple(pairs)
    check(Placement(max_memory=found))
    return found


def _size(value: object) -> str:
    if isinstance(value, bool):
        raise MhaVizError(f"max memory: {value!r} is not a size")
    return str(value).strip().replace(" ", "")


def where(device_map: dict[str, str]) -> str:
    """One line for people: how many of the model's blocks each device holds ("GPU 0: 12, cpu: 6, disk: 14")."""
    counts: dict[str, int] = {}
    for device in device_map.values():
        name = f"GPU {device}" if str(device).isdigit() else str(device)
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name}: {n}" for name, n in counts.items()) + " (blocks of the model per device)"


def split(model_device: str) -> tuple[str, Placement | None]:
    """(device, placement or None) from a model device string (join's inverse)."""
    device, sep, rest = str(model_device).partition(SEP)
    return device, (Placement.decode(rest) if sep else None)
