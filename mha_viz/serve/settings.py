"""The page stream's limits as numbers (limits.py applies them), each from the environment where it is set."""

from __future__ import annotations

import os
from dataclasses import dataclass


def env_number(name: str, default: float) -> float:
    """A positive finite number from the environment, else ``default``."""
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        return default
    return value if value > 0 and value == value and value != float("inf") else default


@dataclass(frozen=True)
class Limits:
    # A session costs ~11-14 MB while it lives (a 512-token Heads page; 200 cost +2.8 GB in the soak):
    # 60 of them ~0.8 GB. The page itself is ~750 kB of messages; 64 MB leaves room for any one page.
    max_sessions: int = 60  # open page streams in the process
    max_per_client: int = 10  # from one client address
    queue_bytes: int = 64 * 2**20  # waiting to be sent to one session
    total_bytes: int = 256 * 2**20  # waiting to be sent to all sessions together
    stall_s: float = 120.0  # a client that takes nothing for this long is dropped

    @classmethod
    def from_env(cls) -> Limits:
        """The limits this deployment sets (MHA_VIZ_MAX_SESSIONS, MHA_VIZ_MAX_SESSIONS_PER_CLIENT,
        MHA_VIZ_SEND_QUEUE_MB, MHA_VIZ_SEND_TOTAL_MB, MHA_VIZ_SEND_STALL_S), defaults where unset or unreadable."""
        d = cls()
        return cls(
            max_sessions=int(env_number("MHA_VIZ_MAX_SESSIONS", d.max_sessions)),
            max_per_client=int(env_number("MHA_VIZ_MAX_SESSIONS_PER_CLIENT", d.max_per_client)),
            queue_bytes=int(env_number("MHA_VIZ_SEND_QUEUE_MB", d.queue_bytes / 2**20) * 2**20),
            total_bytes=int(env_number("MHA_VIZ_SEND_TOTAL_MB", d.total_bytes / 2**20) * 2**20),
            stall_s=env_number("MHA_VIZ_SEND_STALL_S", d.stall_s),
        )
