"""Process plumbing: torch's thread count on a shared machine, how big tensors get memory, garbage-collector
pauses."""

from __future__ import annotations

from mha_viz.runtime.allocator import huge_pages
from mha_viz.runtime.threads import configure_threads


def before_torch() -> None:
    """What a process sets before it imports torch: the threads per request (MHA_VIZ_TORCH_THREADS; 1 when
    hosted) and huge pages for big tensors (runtime.allocator)."""
    configure_threads()
    huge_pages()
