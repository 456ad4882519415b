"""Process plumbing: torch's thread count on a shared machine, how big tensors get memory, garbage-collector
pauses."""

from __future__ import annotations

from mha_viz.runtime.allocator import huge_pages, tune_allocator
from mha_viz.runtime.threads import configure_threads


def before_torch() -> None:
    """What a process sets before it imports torch: the threads per request (MHA_VIZ_TORCH_THREADS; 1 when
    hosted), huge pages for big tensors, and big blocks mapped on their own so they go back to the system when
    freed (runtime.allocator: without it an 8,192-token recording's peak was 2.75 GB, 0.64 GB of it freed heap)."""
    configure_threads()
    huge_pages()
    tune_allocator()
