"""Memory for big tensors (runtime.allocator): huge pages are asked for before torch loads, so a 2048-token pass
is not spent faulting in 4 KB pages; an explicit setting wins; the values computed do not depend on it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
# A child that prepares the process as the app does, then fills a 64 MB tensor and reports the huge pages its
# process holds (kB) and a checksum of a product computed in it.
CHILD = """
from mha_viz.runtime import before_torch
before_torch()
import os, torch
g = torch.Generator().manual_seed(0)
a = torch.randn(4096, 4096, generator=g)  # 64 MB
b = a @ a[:, :64]
huge = 0
with open("/proc/self/smaps_rollup") as fh:
    for line in fh:
        if line.startswith("AnonHugePages:"):
            huge = int(line.split()[1])
print(os.environ.get("THP_MEM_ALLOC_ENABLE"), huge, repr(float(b.double().sum())))
"""


def _child(setting: str | None) -> tuple[str, int, str]:
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    if setting is not None:
        env["THP_MEM_ALLOC_ENABLE"] = setting
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True,
                         timeout=120)  # fmt: skip
    flag, huge, total = out.stdout.split()
    return flag, int(huge), total


def test_huge_pages_are_asked_for_before_torch_and_change_no_value() -> None:
    on_flag, on_huge, on_sum = _child(None)
    off_flag, off_huge, off_sum = _child("0")
    assert on_flag == "1" and off_flag == "0"  # set when unset; an explicit setting is left alone
    assert on_sum == off_sum  # the same product, to the last bit, whichever memory holds it
    mode = THP.read_text() if THP.exists() else "[never]"
    if "[never]" not in mode:  # the kernel gives huge pages to those who ask: the 64 MB tensor is in them
        assert on_huge >= 32 * 1024 > off_huge or ("[always]" in mode and on_huge >= 32 * 1024)


def test_the_test_process_runs_as_the_app_does() -> None:
    assert os.environ.get("THP_MEM_ALLOC_ENABLE") in ("1", "0")  # conftest set it (or the caller did) before torch


NOTEBOOK = """
import os, sys
{first}
import mha_viz.show
print(os.environ.get("THP_MEM_ALLOC_ENABLE"))
"""


def test_the_notebook_api_asks_for_huge_pages_unless_torch_came_first() -> None:
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}

    def flag(first: str) -> str:
        out = subprocess.run([sys.executable, "-c", NOTEBOOK.format(first=first)], env=env, capture_output=True,
                             text=True, check=True, timeout=120)  # fmt: skip
        return out.stdout.split()[-1]

    assert flag("") == "1"  # import mha_viz.show first: torch loads with huge pages
    assert flag("import torch") == "None"  # torch already read its setting: nothing is changed behind its back


# A child that prepares its process one way, frees a 40 MB block (glibc would raise its mmap threshold past it),
# then runs 30 "layers" that each make four 5-15 MB intermediates and keep one 3 MB tensor (as a recording keeps q,
# k, v): it prints how much its memory grew and how much it keeps (MB).
HEAP = """
{prepare}
import torch
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
base = rss()
big = torch.ones(40 * 2**18)
del big
kept = []
for i in range(30):
    tmp = [torch.ones((5 + (i * 7 + j) % 11) * 2**18) for j in range(4)]
    kept.append(torch.ones(3 * 2**18))
    del tmp
print((rss() - base) / 2**20, sum(k.nbytes for k in kept) / 2**20)
"""


def test_freed_intermediates_go_back_to_the_system_in_the_app_cli_and_notebook() -> None:
    """An 8,192-token recording peaked at 2.75 GB, 0.64 GB of it freed heap, where the process had not set the
    allocator (the notebook, the CLI): intermediates came from a heap that the kept tensors pinned. Measured here:
    without the setting this child grows 230 MB for 90 MB kept."""

    def grown(prepare: str) -> tuple[float, float]:
        out = subprocess.run([sys.executable, "-c", HEAP.format(prepare=prepare)], capture_output=True, text=True,
                             check=True, timeout=120)  # fmt: skip
        grew, kept = map(float, out.stdout.split()[-2:])
        return grew, kept

    for prepare in ("from mha_viz.runtime import before_torch\nbefore_torch()", "import mha_viz.show"):
        grew, kept = grown(prepare)
        assert kept == 90.0 and grew < kept + 32, (prepare, grew)  # what is kept, and little more
