"""What a script gets from a hosted server with uploads and big frames (issue 35 §4.1, §4.8, §4.11).

Run:  python benchmarks/bench_client_abuse.py [--files 100] [--mb 15]
Starts `streamlit run app.py` with MHA_VIZ_HOSTED=1 on loopback, then, printing the HTTP statuses, the time and
the server's resident memory (RSS) before and after each:
  1. the issue's attack: --files PUTs of --mb MB to made-up file ids of a session on a page with no file uploader
     (XSRF passed by echoing the cookie /_stcore/health sets);
  2. the same from a session on a page with a file uploader, each file to an upload URL the server gave it;
  3. that session closes: RSS 3 s later (main: its files were held until Streamlit shut it down, minutes later);
  4. six websocket frames announcing 199 MB (under Streamlit's 200 MB server.maxMessageSize), each then sent up to
     its last megabyte (main: the server held them all);
  5. GET /_stcore/metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.stream_client import serve
from tests.test_client_limits import OWN, open_session, put

MB = 10**6


def _statuses(codes: list) -> str:
    return ", ".join(f"{codes.count(c)} × {c}" for c in sorted(set(codes)))


async def uploads(server, files: int = 100, mb: int = 15) -> list[str]:
    """Attacks 1-3; what each got, one line each (``server``: .port, .ws_url, .rss_mb())."""
    plain = await open_session(server, "view=Heads")
    rss, start = server.rss_mb(), time.monotonic()
    codes = []
    for i in range(files):
        path = f"/_stcore/upload_file/{plain.session_id}/{i:08d}-0000-4000-8000-000000000000"
        codes.append(await asyncio.to_thread(put, server, path, mb * MB))
    out = [f"1. {files} PUTs of {mb} MB, no file uploader: {_statuses(codes)} in "
           f"{time.monotonic() - start:.1f} s; RSS {rss:.0f} -> {server.rss_mb():.0f} MB"]  # fmt: skip
    own = await open_session(server, OWN)
    rss, start, codes = server.rss_mb(), time.monotonic(), []
    for _ in range(files):
        (url,) = await own.upload_urls(1)
        codes.append(await asyncio.to_thread(put, server, url, mb * MB))
    out.append(f"2. {files} PUTs of {mb} MB to issued URLs of a page with a file uploader: {_statuses(codes)} "
               f"in {time.monotonic() - start:.1f} s; RSS {rss:.0f} -> {server.rss_mb():.0f} MB")  # fmt: skip
    await own.ws.close()
    await plain.ws.close()
    await asyncio.sleep(3)
    return [*out, f"3. 3 s after that session closed: RSS {server.rss_mb():.0f} MB"]


def big_frames(server, n: int = 6) -> str:
    """Attack 4; what it got, one line."""
    socks, statuses = [], []
    rss, start = server.rss_mb(), time.monotonic()
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(f"GET /_stcore/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                     "Sec-WebSocket-Protocol: streamlit\r\n\r\n".encode())  # fmt: skip
        head = b""
        while b"\r\n\r\n" not in head:
            byte = sock.recv(1)
            if not byte:  # closed before its answer
                break
            head += byte
        statuses.append(head.split(b" ", 2)[1].decode() if head.count(b" ") >= 2 else "closed")
        with contextlib.suppress(OSError):  # an upgrade refused may close at once
            sock.sendall(bytes([0x82, 0xFF]) + (199 * 10**6).to_bytes(8, "big") + os.urandom(4))
        socks.append(sock)
    sent = []
    for sock in socks:
        total = 0
        try:
            for _ in range(189):  # 189 MiB: the frame is not complete
                sock.sendall(b"\0" * 2**20)
                total += 1
        except OSError:
            pass
        sent.append(total)
    took = f"in {time.monotonic() - start:.1f} s; RSS {rss:.0f} -> {server.rss_mb():.0f} MB"
    line = (
        f"4. {n} frames announcing 199 MB (upgrades: {_statuses(statuses)}): the server took {sent} MB of each, {took}"
    )
    for sock in socks:
        sock.close()
    return line


def metrics(server) -> str:
    """Attack 5; what it got, one line."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/_stcore/metrics", timeout=10) as resp:
            return f"5. /_stcore/metrics: {resp.status}, {len(resp.read())} bytes"
    except urllib.error.HTTPError as err:
        return f"5. /_stcore/metrics: {err.code}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--mb", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp), {"MHA_VIZ_HOSTED": "1"}) as server:
        print("\n".join(asyncio.run(uploads(server, args.files, args.mb))))
        print(big_frames(server))
        print(metrics(server))


if __name__ == "__main__":
    main()
