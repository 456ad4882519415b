"""How often a client may run pages (issue 35 §4.2): ten sessions from one address, each asking for a rerun every
50 ms, kept another person's page from being served for minutes.

A page run starts when a client sends a ``rerun_script`` message. The page stream's middleware (limits.py) hands
each one to Streamlit only when this admits it:

- **per session**: a token bucket (session_burst reruns at once, session_rate a second after that);
- **per client address**: another bucket over all its sessions (client_burst, client_rate), and at most
  client_runs of its sessions running a page at once (a rerun of a session that is running already replaces
  that run, as Streamlit does, so it needs no new place).

A rerun that is not admitted is held, not lost: a later rerun of the same session replaces the held one (only the
latest widget values matter), and the held one goes to Streamlit as soon as it is admitted (a token comes, or one
of the client's runs finishes). A session's run counts as running from its rerun until Streamlit sends its
``script_finished`` (other than "finished early for a rerun"), or for at most stale_s.

Settings: MHA_VIZ_RERUNS_PER_S (session_rate), MHA_VIZ_CLIENT_RERUNS_PER_S (client_rate), MHA_VIZ_CLIENT_RUNS
(client_runs: 2 in hosted mode, else LOCAL_CLIENT_RUNS).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mha_viz.config import hosted
from mha_viz.serve.settings import env_number

LOCAL_CLIENT_RUNS = 10  # client_runs outside hosted mode (one person's tabs; the session cap per client is 10)
SMALL = 1024  # bytes: a script_finished message is far smaller; bigger outbound messages are never parsed


@dataclass
class Bucket:
    rate: float  # tokens a second
    burst: float  # tokens at most
    tokens: float = -1.0
    at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = self.burst

    def level(self, now: float) -> float:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        return self.tokens

    def wait_s(self, now: float) -> float:
        """Seconds until a token is there."""
        return max(0.0, (1.0 - self.level(now)) / self.rate)


class Session:
    """One page stream's part: its bucket, its held rerun, whether it runs a page."""

    def __init__(self, client: str, rate: float, burst: float) -> None:
        self.client = client
        self.bucket = Bucket(rate, burst)
        self.running_since: float | None = None
        self.coalesced = 0  # reruns replaced by a later one while held


@dataclass
class Reruns:
    session_rate: float = 2.0
    session_burst: float = 4.0
    client_rate: float = 4.0
    client_burst: float = 8.0
    client_runs: int = 2
    stale_s: float = 120.0
    clients: dict[str, Bucket] = field(default_factory=dict)  # per client address
    running: dict[str, set[Session]] = field(default_factory=dict)
    sessions: dict[str, int] = field(default_factory=dict)  # open sessions per client

    @classmethod
    def from_env(cls) -> Reruns:
        """The defaults, with MHA_VIZ_RERUNS_PER_S, MHA_VIZ_CLIENT_RERUNS_PER_S and MHA_VIZ_CLIENT_RUNS where set."""
        d = cls()
        session_rate = env_number("MHA_VIZ_RERUNS_PER_S", d.session_rate)
        client_rate = env_number("MHA_VIZ_CLIENT_RERUNS_PER_S", d.client_rate)
        return cls(
            session_rate=session_rate, session_burst=max(1.0, 2 * session_rate),
            client_rate=client_rate, client_burst=max(1.0, 2 * client_rate),
            client_runs=int(env_number("MHA_VIZ_CLIENT_RUNS", d.client_runs if hosted() else LOCAL_CLIENT_RUNS)),
        )  # fmt: skip

    def open(self, client: str) -> Session:
        self.sessions[client] = self.sessions.get(client, 0) + 1
        self.clients.setdefault(client, Bucket(self.client_rate, self.client_burst))
        return Session(client, self.session_rate, self.session_burst)

    def close(self, session: Session) -> None:
        self.finished(session)
        self.sessions[session.client] -= 1
        if not self.sessions[session.client]:
            del self.sessions[session.client]
            self.clients.pop(session.client, None)

    def _busy(self, session: Session, now: float) -> bool:
        runs = self.running.get(session.client, set())
        for other in [s for s in runs if now - (s.running_since or now) > self.stale_s]:
            runs.discard(other)
            other.running_since = None
        return session.running_since is None and len(runs) >= self.client_runs

    def admit(self, session: Session) -> bool:
        """Whether a rerun of ``session`` may go to Streamlit now (then its tokens are taken)."""
        now = time.monotonic()
        client = self.clients[session.client]
        if self._busy(session, now) or session.bucket.level(now) < 1 or client.level(now) < 1:
            return False
        session.bucket.tokens -= 1
        client.tokens -= 1
        session.running_since = now
        self.running.setdefault(session.client, set()).add(session)
        return True

    def wait_s(self, session: Session) -> float:
        """About when a held rerun of ``session`` may be admitted (a run's end also wakes it)."""
        now = time.monotonic()
        return min(0.1, max(0.02, session.bucket.wait_s(now), self.clients[session.client].wait_s(now)))

    def finished(self, session: Session) -> None:
        session.running_since = None
        runs = self.running.get(session.client)
        if runs is not None:
            runs.discard(session)
            if not runs:
                del self.running[session.client]


def run_finished(data: bytes) -> bool:
    """Whether an outbound message is a page run's end (``script_finished``, not "finished early for a rerun")."""
    if len(data) > SMALL:
        return False
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    msg = ForwardMsg()
    try:
        msg.ParseFromString(data)
    except Exception:
        return False
    return msg.WhichOneof("type") == "script_finished" and msg.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN
