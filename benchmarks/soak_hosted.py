"""A hostile soak on loopback: can any request take a hosted-mode server down?

Run:  python benchmarks/soak_hosted.py [--seconds 180] [--sessions 4] [--port N]
Starts `streamlit run app.py` with MHA_VIZ_HOSTED=1 on 127.0.0.1 (offline: HF_HUB_OFFLINE=1), measures a
normal user alone first (the default page, then a layer change), sends every hostile request below once
alone (how far each one by itself raises the server's memory; --skip-alone skips this), then runs
--sessions Chromium sessions at once, each cycling (from its own starting point) through:
  - the worst URLs: own weights at big sizes with a 510-word text in Compare heads, Heads, Head count and
    W^O (d_model 2048, 256 heads), the bundled model's all-layer views on 510 words, out-of-range values;
  - crafted .safetensors uploads: deeply nested header JSON, a 5000-digit integer in a shape, weights of
    1e30, a truncated file, a header length of 2**63, a 17 MB file, and one valid file as a control;
  - normal traffic: the default page and a layer change, whose first head-grid heatmap (head 0) must equal
    what mha_viz.pipeline.road.traces computes for the seed sentence at that layer.
Alongside them (--attacks-after s in; --skip-attacks skips it) a script runs issue 35 §4's attacks with the
functions of bench_client_abuse.py and bench_rerun_spam.py: PUTs to the upload route without a file uploader
and over the caps, six websocket frames announcing 199 MB, GET /_stcore/metrics, then rerun spam from another
address (--spam-sessions streams, a rerun every --spam-every s for --spam-seconds) while another person
(127.0.0.2) asks for pages; after the spam that person asks for a page every second until one is served within
2x its time alone (measured before the soak), and once the soak is over the server's CPU must go idle: both
counted from the spam's end (the recovery).
A background thread samples the server's resident memory (VmRSS of the process and its children) every
0.25 s; a request's rise is the highest RSS while it ran less the RSS when it began (under load, other
sessions' requests overlap it, so that figure is an upper bound). Bounded: new requests stop after
--seconds (and after --max-items per session); one page may take at most --item-timeout seconds.

Outcome of a hostile page: "picture" (drawn, no error), "refused" (an error message shown: a refusal),
"traceback" (st.exception / a Python traceback shown), "blank" (the run ended with nothing drawn and no
message), "timeout" (still running at --item-timeout). Tracebacks, blank pages and crafted files that were
accepted are failures.
Prints peak and final server RSS, the largest rise during one hostile request, refusals, failures, wrong
results, normal reruns under load against the same reruns alone, what each issue-35 attack got and the recovery
after the rerun spam, and whether the server stayed up, with
the goals: peak RSS <= 2.5 GB, no request raises it by more than 1 GB, the server never dies, 0 wrong
results. Exit status 0 unless the server died, a wrong result was seen or a hostile page failed (slowness
never fails it: these are figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import CHROMIUM, CHROMIUM_ARGS, FIRST_GRID_JS, SENTENCE, App, check_chromium

GB = 1024  # MB
PEAK_GOAL_MB = 2.5 * GB
RISE_GOAL_MB = 1 * GB
SLOWDOWN_GOAL = 2.0
SAMPLE_S = 0.25
TOL = 1e-5  # |shown weight - single-process weight|
N_LAYERS = 6  # the bundled MiniLM
APP = "[data-testid='stApp']"
RUNNING = f"{APP}:not([data-test-script-state='notRunning'])"
UPLOADER = "[data-testid='stFileUploader'] input[type='file']"
SENT_JS = "() => !document.querySelector(\"[data-testid='stFileChipIconSpinner']\")"  # the upload is over

# What a finished page shows: {exception, error, content, skeleton (still drawing)}.
PAGE_STATE_JS = """() => {
  const app = document.querySelector("[data-testid='stApp']");
  const visible = el => el.offsetParent !== null || el.getClientRects().length > 0;
  const exc = [...document.querySelectorAll("[data-testid='stException']")];
  const err = [...document.querySelectorAll("[data-testid='stAlertContentError']")];
  const content = document.querySelectorAll(
    ".js-plotly-plot, [data-testid='stPlotlyChart'], [data-testid='stDataFrame'], [data-testid='stTable'], " +
    "[data-testid='stAlert'], [data-testid='stException'], [data-testid='stMetric']").length;
  return {
    done: !!app && app.getAttribute('data-test-script-state') === 'notRunning',
    exception: exc.map(e => e.innerText.slice(0, 600)),
    error: err.map(e => e.innerText.slice(0, 300)),
    content: content,
    skeleton: [...document.querySelectorAll("[data-testid='stSkeleton']")].filter(visible).length,
  };
}"""
SETTLED_JS = f"() => {{ const s = ({PAGE_STATE_JS})(); return s.done && s.content > 0 && s.skeleton === 0; }}"
# The first head grid equals the reference: arg = {labels: 'a|b|…', z: [[…]], tol}.
GRID_MATCHES_JS = f"""(arg) => {{
  const app = document.querySelector("[data-testid='stApp']");
  if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  const g = ({FIRST_GRID_JS})();
  if (!g || g.n !== 12 || g.x.join('|') !== arg.labels || g.z.length !== arg.z.length) return false;
  for (let i = 0; i < arg.z.length; i++)
    for (let j = 0; j < arg.z[i].length; j++)
      if (!(Math.abs(g.z[i][j] - arg.z[i][j]) <= arg.tol)) return false;
  return true;
}}"""


# --- requests ------------------------------------------------------------------------------------
def long_text(tokenizer, max_tokens: int = 512) -> str:
    """About 510 short words that are one token each, so the text fills the model's 512 positions."""
    words = ("cat", "dog", "sat", "ran", "red", "big", "old", "sun", "hat", "car", "bus", "map", "pen", "cup", "box")
    n = max_tokens - 2
    while n > 1:
        text = " ".join(words[i % len(words)] for i in range(n))
        if len(tokenizer(text)["input_ids"]) <= max_tokens:
            return text
        n -= 10
    raise RuntimeError("could not build the long text")


def hostile_urls(long: str) -> list[tuple[str, str]]:
    """(name, query string) of the worst pages to ask for."""
    own = {"src": "Own weights", "text": long}
    q = [
        ("own 512/64 Compare heads, 510 words", {**own, "d_model": 512, "own_heads": 64, "view": "Compare heads"}),
        ("own 512/64 Heads, 510 words", {**own, "d_model": 512, "own_heads": 64, "view": "Heads"}),
        ("own 2048/256 W^O, 510 words", {**own, "d_model": 2048, "own_heads": 256, "view": "W^O"}),
        ("own 512/64 Head count, 510 words", {**own, "d_model": 512, "own_heads": 64, "view": "Head count"}),
        ("bundled Overview, 510 words", {"text": long, "view": "Overview"}),
        ("bundled Head roles, 510 words", {"text": long, "view": "Head roles"}),
        ("bundled Two sentences, 2 x 510 words", {"text": long, "text_b": long, "view": "Two sentences"}),
        ("layer=999", {"layer": 999}),
        ("own_heads=0", {"src": "Own weights", "own_heads": 0}),
        ("d_model=99999", {"src": "Own weights", "d_model": 99999}),
        ("view=nonexistent", {"view": "nonexistent"}),
        ("text of 12000 characters", {"text": "x " * 6000}),
        ("model off the allow-list", {"src": "Hugging Face", "model_id": "EleutherAI/gpt-j-6b"}),
        # issue 21: numbers in links, and the worst pages found by the last attack
        ("wo_seed of 5000 nines", {"view": "W^O", "wo_mode": "random orthogonal", "wo_seed": "9" * 5000}),
        ("wo_seed=inf", {"view": "W^O", "wo_mode": "random orthogonal", "wo_seed": "inf"}),
        ("d_model=inf, own_heads=2.9", {"src": "Own weights", "d_model": "inf", "own_heads": "2.9"}),
        ("seed of 309 digits", {"src": "Own weights", "seed": "1" * 309}),
        ("ind_length=-inf", {"view": "Induction", "ind_length": "-inf", "ind_seed": "1e3"}),
        ("lines_start of 400 digits", {"view": "Lines", "text": long, "lines_start": "7" * 400}),
        ("imp_texts unknown", {"view": "Head importance", "imp_texts": "everything"}),
        ("text_b of 6000 characters", {"view": "Two sentences", "text_b": "y " * 3000}),
        ("SmolLM2 Next token, 510 words", {"src": "SmolLM2-135M (bundled)", "text": long, "view": "Next token"}),
        ("own 2048/256 Heads, 510 words", {**own, "d_model": 2048, "own_heads": 256, "view": "Heads"}),
    ]
    urls = [(name, "?" + urlencode(params)) for name, params in q]
    many = "&".join(f"p{i}=1" for i in range(2000))  # `view` after 2,000 other parameters
    return [*urls, ("view after 2000 parameters", f"?{many}&view=Overview")]


def _safetensors(header: dict | str, body: bytes = b"") -> bytes:
    raw = (header if isinstance(header, str) else json.dumps(header)).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def crafted_uploads() -> list[tuple[str, bytes, str]]:
    """(name, file bytes, expected outcome) of the uploads: crafted files must be refused."""
    import torch
    from safetensors.torch import save as st_save

    from mha_viz.own import FORMAT_TAG, init_weights, save_weights

    d, h = 64, 4
    shapes = {"W_Q": [h, d, d // h], "W_K": [h, d, d // h], "W_V": [h, d, d // h], "W_O": [h, d // h, d]}
    valid = save_weights(init_weights(d, h))
    nested = '{"__metadata__": ' + "[" * 30_000 + "]" * 30_000 + "}"
    long_int = '{"W_Q": {"dtype": "F32", "shape": [4, 64, ' + "9" * 5000 + '], "data_offsets": [0, 4]}}'
    huge = {n: torch.full(s, 1e30) for n, s in shapes.items()}
    return [
        ("upload: header nested 30000 deep", _safetensors(nested), "refused"),
        ("upload: 5000-digit integer in a shape", _safetensors(long_int), "refused"),
        ("upload: weights of 1e30", st_save(huge, metadata={"format": FORMAT_TAG}), "refused"),
        ("upload: truncated file", valid[: len(valid) // 2], "refused"),
        ("upload: header length 2**63", struct.pack("<Q", 2**63) + b"{}" * 64, "refused"),
        ("upload: 17 MB file", _safetensors({"W_Q": {}}, b"\0" * (17 * 2**20)), "refused"),
        ("upload: valid 64/4 weights (control)", valid, "picture"),
    ]


@dataclass(frozen=True)
class Item:
    kind: str  # "url" | "upload" | "normal"
    name: str
    query: str = ""
    data: bytes = b""
    expect: str = "either"  # "refused" | "picture" | "either"


@dataclass
class Result:
    session: int
    item: Item
    start: float
    end: float
    outcome: str  # picture | refused | traceback | blank | timeout | unexpected | ok | wrong | slow
    detail: str = ""
    seconds: dict[str, float] = field(default_factory=dict)  # normal traffic: "default", "layer" timings


# --- the server and its memory -------------------------------------------------------------------
class HostedApp(App):
    """harness.App with MHA_VIZ_HOSTED=1, offline, on the chosen loopback port."""

    def __init__(self, port: int | None) -> None:
        env = {"MHA_VIZ_HOSTED": "1", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
               "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
        super().__init__(env=env, port=port)

    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/_stcore/stream"

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def tree_rss_mb(pid: int) -> float:
    """VmRSS of the process and all its descendants (MB); nan once the process is gone."""
    total, todo, seen = 0.0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/status") as fh:
                total += next((int(line.split()[1]) for line in fh if line.startswith("VmRSS:")), 0) / 1024
        except OSError:
            if p == pid:
                return float("nan")
            continue
        todo += _children(p)
    return total


class Sampler(threading.Thread):
    """Samples the server's resident memory every SAMPLE_S seconds: (monotonic time, MB)."""

    def __init__(self, app: HostedApp) -> None:
        super().__init__(daemon=True)
        self.app = app
        self.samples: list[tuple[float, float]] = []
        self.died_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            now = time.monotonic()
            if not self.app.alive():
                self.died_at = self.died_at or now
            else:
                mb = tree_rss_mb(self.app.proc.pid)
                if mb == mb:
                    self.samples.append((now, mb))
            self.stop.wait(SAMPLE_S)

    def peak(self) -> float:
        return max((mb for _, mb in self.samples), default=float("nan"))

    def rise(self, start: float, end: float) -> float:
        """How far the memory rose during [start, end] above its level when it began (MB)."""
        before = [mb for t, mb in self.samples if t <= start]
        during = [mb for t, mb in self.samples if start <= t <= end + SAMPLE_S]
        if not during:
            return 0.0
        base = before[-1] if before else during[0]
        return max(during) - base

    def largest_jump(self, spans: list[tuple[float, float, str]]) -> tuple[float, str]:
        """The largest rise between consecutive samples taken while a hostile page loaded, and those pages."""
        best, names = 0.0, ""
        for (_, a), (t, b) in zip(self.samples, self.samples[1:], strict=False):
            if b - a > best:
                loading = [n for s, e, n in spans if s <= t <= e + SAMPLE_S]
                if loading:
                    best, names = b - a, "; ".join(sorted(set(loading)))
        return best, names


# --- the browser side ----------------------------------------------------------------------------
class Refs:
    """The single-process answer: the seed sentence's token labels and head 0's pattern in every layer."""

    def __init__(self, lm) -> None:
        from mha_viz.config import Config
        from mha_viz.pipeline.road import traces

        tokens, _, found = traces(Config(device="cpu"), SENTENCE, layers=list(range(N_LAYERS)), lm=lm)
        self.labels = "|".join(tokens.labels)
        self.z = [t.pattern[0].numpy().astype(np.float64) for t in found]  # [n, n] per layer

    def arg(self, layer: int) -> dict:
        return {"labels": self.labels, "z": self.z[layer].tolist(), "tol": TOL}


async def _state(page) -> dict:
    try:
        return await page.evaluate(PAGE_STATE_JS)
    except Exception as exc:
        return {"done": False, "exception": [], "error": [], "content": 0, "skeleton": 0, "js": str(exc)[:200]}


async def _settle(page, timeout_s: float, saw_start_s: float = 0.0) -> dict:
    """Wait for the run to end with something drawn (or timeout_s); return what the page shows."""
    from playwright.async_api import TimeoutError as PwTimeout

    if saw_start_s:
        with contextlib.suppress(PwTimeout):  # the state reads "notRunning" until the rerun starts
            await page.locator(RUNNING).wait_for(state="attached", timeout=saw_start_s * 1000)
    with contextlib.suppress(PwTimeout):
        await page.wait_for_function(SETTLED_JS, timeout=timeout_s * 1000, polling=250)
    return await _state(page)


def _classify(state: dict, expect: str) -> tuple[str, str]:
    if state.get("exception"):
        return "traceback", state["exception"][0]
    if not state.get("done"):
        return "timeout", state.get("js", "still running")
    if state.get("error"):
        outcome, detail = "refused", state["error"][0]
    elif state.get("content", 0) == 0:
        return "blank", "the run ended with nothing drawn and no message"
    else:
        outcome, detail = "picture", ""
    if expect != "either" and outcome != expect:
        return "unexpected", f"expected {expect}, got {outcome}: {detail}"
    return outcome, detail


async def hostile_page(page, url: str, item: Item, timeout_s: float) -> tuple[str, str]:
    await page.goto(url + "/" + item.query, timeout=timeout_s * 1000)
    return _classify(await _settle(page, timeout_s), item.expect)


async def upload(page, url: str, item: Item, timeout_s: float) -> tuple[str, str]:
    await page.goto(url + "/?" + urlencode({"src": "Own weights", "d_model": 64, "own_heads": 4}))
    before = await _settle(page, timeout_s)
    if before.get("exception") or not before.get("done"):
        return _classify(before, "either")
    files = {"name": "weights.safetensors", "mimeType": "application/octet-stream", "buffer": item.data}
    await page.locator(UPLOADER).set_input_files(files, timeout=timeout_s * 1000)
    chip = page.locator("[data-testid='stFileChip']")  # the file as the uploader shows it: sending, sent, refused
    await chip.wait_for(timeout=timeout_s * 1000)
    await page.wait_for_function(SENT_JS, timeout=timeout_s * 1000, polling=100)
    if await page.locator("[data-testid='stFileChipIconError']").count():  # refused by the uploader itself
        text = " ".join((await chip.inner_text()).split())
        return _classify({"done": True, "exception": [], "error": [f"the uploader: {text}"], "content": 1}, item.expect)
    return _classify(await _settle(page, timeout_s, saw_start_s=10), item.expect)


async def normal(page, url: str, refs: Refs, layer: int, timeout_s: float) -> tuple[str, str, dict[str, float]]:
    """The Heads view at layer 0, then the Layer picker set to ``layer``: each checked against refs, timed."""
    from playwright.async_api import TimeoutError as PwTimeout

    took: dict[str, float] = {}
    t0 = time.perf_counter()
    await page.goto(url + "/?view=Heads&layer=0", timeout=timeout_s * 1000)  # the page opens on the Lesson
    for step, want in (("default", 0), ("layer", layer)):
        if step == "layer":
            await page.get_by_role("combobox", name="Layer", exact=True).click(timeout=timeout_s * 1000)
            option = page.get_by_role("option", name=str(layer), exact=True)
            await option.wait_for(timeout=timeout_s * 1000)
            t0 = time.perf_counter()
            await option.click(timeout=timeout_s * 1000)
        try:
            await page.wait_for_function(GRID_MATCHES_JS, arg=refs.arg(want), timeout=timeout_s * 1000, polling=100)
        except PwTimeout:
            outcome, detail = await _why_not(page, refs, want)
            return outcome, f"{step} (layer {want}): {detail}", took
        took[step] = time.perf_counter() - t0
        state = await _state(page)
        if state["exception"] or state["error"]:
            return "wrong", f"{step}: a message on a normal page: {(state['exception'] + state['error'])[0]}", took
    return "ok", "", took


async def _why_not(page, refs: Refs, layer: int) -> tuple[str, str]:
    """After a timeout: still running (slow), or a wrong or missing result (wrong)."""
    state = await _state(page)
    if state["exception"] or state["error"]:
        return "wrong", f"a message on a normal page: {(state['exception'] + state['error'])[0][:300]}"
    if not state["done"]:
        return "slow", "still running"
    grid = await page.evaluate(FIRST_GRID_JS)
    if grid is None:
        return "wrong", "no heatmaps drawn"
    labels = "|".join(grid["x"])
    if labels != refs.labels or grid["n"] != 12:
        return "wrong", f"{grid['n']} heatmaps, tokens {labels[:120]!r}"
    diff = float(np.abs(np.asarray(grid["z"], dtype=np.float64) - refs.z[layer]).max())
    return "wrong", f"head 0 differs from the single-process weights by {diff:.2e}"


async def run_item(page, url: str, item: Item, refs: Refs, n: int, timeout_s: float) -> tuple[str, str, dict]:
    try:
        if item.kind == "normal":
            return await normal(page, url, refs, 1 + n % (N_LAYERS - 1), timeout_s)
        if item.kind == "upload":
            return (*await upload(page, url, item, timeout_s), {})
        return (*await hostile_page(page, url, item, timeout_s), {})
    except Exception as exc:  # a navigation or click that timed out: reported, never a crash of the soak
        state = await _state(page)
        if state.get("exception"):
            return "traceback", state["exception"][0], {}
        kind = "slow" if item.kind == "normal" else "timeout"
        return kind, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}", {}


async def session(
    i: int, browser, app: HostedApp, items: list[Item], refs: Refs, deadline: float, args, out: list[Result]
) -> None:
    ctx = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await ctx.new_page()
    try:
        for n in range(args.max_items):
            if time.monotonic() > deadline or not app.alive():
                break
            item = items[(i * len(items) // args.sessions + n) % len(items)]  # each starts elsewhere
            start = time.monotonic()
            outcome, detail, took = await run_item(page, app.url, item, refs, n + i, args.item_timeout)
            out.append(Result(i, item, start, time.monotonic(), outcome, detail, took))
            if outcome in ("traceback", "blank", "unexpected", "wrong") or not app.alive():
                print(f"  [{i}] {item.name}: {outcome.upper()} {detail[:300]}", flush=True)
            else:
                extra = " ".join(f"{k} {v:.2f}s" for k, v in took.items())
                print(f"  [{i}] {item.name}: {outcome} ({time.monotonic() - start:.1f} s) {extra}", flush=True)
    finally:
        await ctx.close()


def schedule(urls: list[Item], uploads: list[Item]) -> list[Item]:
    """Hostile URLs and uploads taken in turn, a normal user's visit after every two hostile requests."""
    hostile = [x for k in range(max(len(urls), len(uploads))) for x in (urls[k : k + 1] + uploads[k : k + 1])]
    out: list[Item] = []
    for k, x in enumerate(hostile, 1):
        out.append(x)
        if k % 2 == 0:
            out.append(Item("normal", "normal: default page + layer change"))
    return out


# --- the run -------------------------------------------------------------------------------------
async def soak(args) -> int:
    from playwright.async_api import async_playwright

    from mha_viz.models.load import load_model

    check_chromium()
    print("computing the single-process reference and the requests …", flush=True)
    lm = load_model(None, "cpu")
    refs = Refs(lm)
    long = long_text(lm.tokenizer, lm.max_tokens)
    urls = [Item("url", name, query=q) for name, q in hostile_urls(long)]
    uploads = [Item("upload", name, data=data, expect=exp) for name, data, exp in crafted_uploads()]
    items = schedule(urls, uploads)
    del lm
    print(f"long text: {len(long.split())} words; {len(urls)} hostile URLs, {len(uploads)} uploads", flush=True)

    app = HostedApp(args.port)
    sampler = Sampler(app)
    results: list[Result] = []
    baseline: list[Result] = []
    alone: list[Result] = []
    try:
        app.wait(timeout=180)
        sampler.start()
        print(f"hosted-mode server up on {app.url}: {tree_rss_mb(app.proc.pid):.0f} MB resident", flush=True)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            # 1. A normal user alone: a warm-up visit (model load, Plotly fetched), then measured visits.
            ctx = await browser.new_context(viewport={"width": 1400, "height": 1000})
            page = await ctx.new_page()
            plain = Item("normal", "normal (alone)")
            for n in range(args.baseline_rounds + 1):
                start = time.monotonic()
                outcome, detail, took = await run_item(page, app.url, plain, refs, n, args.item_timeout)
                if n:
                    baseline.append(Result(-1, plain, start, time.monotonic(), outcome, detail, took))
                print(f"  alone, round {n}{' (warm-up)' if n == 0 else ''}: {outcome} {detail} "
                      + " ".join(f"{k} {v:.2f}s" for k, v in took.items()), flush=True)  # fmt: skip
            await ctx.close()
            # 2. Every hostile request once, alone: how far each one raises the server's memory by itself.
            if not args.skip_alone:
                print("each hostile request alone:", flush=True)
                ctx = await browser.new_context(viewport={"width": 1400, "height": 1000})
                page = await ctx.new_page()
                for item in [*urls, *uploads]:
                    if not app.alive():
                        break
                    start = time.monotonic()
                    outcome, detail, _ = await run_item(page, app.url, item, refs, 0, args.item_timeout)
                    end = time.monotonic()
                    await asyncio.sleep(2 * SAMPLE_S)
                    alone.append(Result(-1, item, start, end, outcome, detail))
                    rise = sampler.rise(start, end)
                    print(f"  {item.name}: {outcome} ({end - start:.1f} s, +{rise:.0f} MB) {detail[:200]}", flush=True)
                await ctx.close()
            # 2b. What a script (no browser, no Origin header) can send: clear_cache, clients that never read.
            await script_attacks(app, long)
            got = None if args.skip_attacks else Attacks()
            if got:  # another person's page alone (a warm-up first), the yardstick of the recovery
                await _other_page(app, f"{SPAM_QUERY}&user=warm", 300)
                got.alone_s = await _other_page(app, f"{SPAM_QUERY}&user=0", 300) or float("nan")
                print(f"another person's page alone ({OTHER}): {got.alone_s:.2f} s", flush=True)
            rss_before = tree_rss_mb(app.proc.pid)
            # 3. The soak: every session at once until the deadline.
            print(
                f"soak: {args.sessions} sessions for {args.seconds:.0f} s (server at {rss_before:.0f} MB)", flush=True
            )
            soak_start = time.monotonic()
            deadline = soak_start + args.seconds
            await asyncio.gather(
                *(session(i, browser, app, items, refs, deadline, args, results) for i in range(args.sessions)),
                *([attacks(app, args, got)] if got else []),
            )
            soak_s = time.monotonic() - soak_start
            if got and got.spam_end and app.alive():  # everything has stopped: how soon is the server idle?
                import bench_rerun_spam

                now = time.monotonic()
                idle = await asyncio.to_thread(bench_rerun_spam.recovery_s, app.proc.pid, args.recovery_limit)
                got.idle_after_s = idle
                got.idle_s = None if idle is None else now + idle - got.spam_end
            # 4. Afterwards: one more normal visit alone must still be right.
            after: list[Result] = []
            if app.alive():
                ctx = await browser.new_context(viewport={"width": 1400, "height": 1000})
                page = await ctx.new_page()
                start = time.monotonic()
                outcome, detail, took = await run_item(page, app.url, plain, refs, 2, args.item_timeout)
                after.append(Result(-1, plain, start, time.monotonic(), outcome, detail, took))
                await ctx.close()
            await browser.close()
        await asyncio.sleep(5)  # sessions closed: let the server drop them
        final_rss = tree_rss_mb(app.proc.pid) if app.alive() else float("nan")
        hwm = app.peak_mb() if app.alive() else float("nan")
        sampler.stop.set()
        sampler.join()
        alive = app.alive() and sampler.died_at is None
        if not alive:
            print("SERVER DIED. Log:\n" + app.tail(), flush=True)
        return report(args, results, alone, baseline, after, sampler, rss_before, final_rss, hwm, alive, soak_s, got)
    finally:
        sampler.stop.set()
        app.__exit__()


async def script_attacks(app: App, long: str, cycles: int = 3, silent: int = 60, hold_s: float = 20.0) -> None:
    """Raw websocket clients against the server (issue 21 §2.1, §2.3), with the server's RSS before and after:
    ``cycles`` × (Streamlit's clear_cache message, then a SmolLM2 page), and ``silent`` clients that ask for a
    512-token Heads page and never read a byte, held ``hold_s`` seconds."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from stream_client import clear_cache, open_silent, run_page

    ws = f"ws://127.0.0.1:{app.port}/_stcore/stream"
    smol = urlencode({"src": "SmolLM2-135M (bundled)", "view": "Heads"})
    start = tree_rss_mb(app.proc.pid)
    for i in range(cycles):
        page = await run_page(ws, smol, before=(clear_cache(),))
        print(f"  clear_cache + SmolLM2 page {i + 1}: finished={page.finished}, errors={len(page.errors)}, "
              f"server {tree_rss_mb(app.proc.pid):.0f} MB (was {start:.0f})", flush=True)  # fmt: skip
    before = tree_rss_mb(app.proc.pid)
    heads = urlencode({"text": long, "view": "Heads"})
    socks = [open_silent(app.port, heads) for _ in range(silent)]
    opened = [s for s in socks if s is not None]
    await asyncio.sleep(hold_s)
    held = tree_rss_mb(app.proc.pid)
    for s in opened:
        with contextlib.suppress(OSError):
            s.close()
    await asyncio.sleep(5)
    after = tree_rss_mb(app.proc.pid)
    print(f"  {silent} clients that never read: {len(opened)} admitted, {silent - len(opened)} refused; server "
          f"{before:.0f} -> {held:.0f} MB while held, {after:.0f} MB after", flush=True)  # fmt: skip


# --- issue 35 §4: script attacks beside the Chromium sessions (bench_client_abuse.py, bench_rerun_spam.py) ----
SPAMMER, OTHER = "127.0.0.3", "127.0.0.2"  # the rerun spammer's address, another person's (Chromium: 127.0.0.1)
SPAM_QUERY = "view=Heads"


@dataclass
class Attacks:
    """What the attacks got (one line each) and the server's recovery after the rerun spam."""

    lines: list[str] = field(default_factory=list)
    alone_s: float = float("nan")  # another person's page alone, before the soak
    start: float = float("nan")
    end: float = float("nan")
    spam_end: float | None = None
    back_s: float | None = None  # spam end -> that person's page served within SLOWDOWN_GOAL x alone_s
    idle_s: float | None = None  # spam end -> the server's CPU idle (measured once the soak's sessions ended)
    idle_after_s: float | None = None  # the soak's end -> idle


async def _other_page(app: HostedApp, query: str, limit_s: float) -> float | None:
    """Seconds until another person's (OTHER's) page finished; None past limit_s or refused."""
    import websockets
    from bench_rerun_spam import timed_page

    try:
        return await timed_page(app.ws_url, query, limit_s, OTHER)
    except (OSError, websockets.exceptions.WebSocketException):
        return None


def _times(ts: list[float | None]) -> str:
    return ", ".join("timeout" if t is None else f"{t:.1f}" for t in ts) or "none"


async def attacks(app: HostedApp, args, got: Attacks) -> None:
    """The attacks, one after another, args.attacks_after s into the soak; what each got goes to ``got``."""
    import bench_client_abuse as abuse
    import bench_rerun_spam as spam

    def say(line: str) -> None:
        got.lines.append(line)
        print(f"  attack {line}", flush=True)

    await asyncio.sleep(args.attacks_after)
    got.start = time.monotonic()
    steps = (
        ("1-3. uploads", lambda: abuse.uploads(app, args.upload_files, args.upload_mb)),
        ("4. big frames", lambda: asyncio.to_thread(abuse.big_frames, app)),
        ("5. metrics", lambda: asyncio.to_thread(abuse.metrics, app)),
    )
    for name, step in steps:
        try:
            out = await step()
        except Exception as exc:  # the attack script's own failure is reported, never the soak's end
            out = f"{name}: the attack failed: {type(exc).__name__}: {str(exc)[:200]}"
        for line in [out] if isinstance(out, str) else out:
            say(line)
    many = argparse.Namespace(
        sessions=args.spam_sessions, seconds=args.spam_seconds, every=args.spam_every, page_limit=60.0
    )
    t0 = time.monotonic()
    try:
        pages, sent = await spam.attack(app.ws_url, SPAM_QUERY, many, SPAMMER)
    except Exception as exc:
        pages, sent = [], f"? (the attack failed: {type(exc).__name__}: {str(exc)[:200]})"
    got.spam_end = t0 + args.spam_seconds
    say(f"6. rerun spam: {args.spam_sessions} streams from {SPAMMER}, a rerun every {args.spam_every:g} s each for "
        f"{args.spam_seconds:g} s: {sent} reruns sent; another person's pages ({OTHER}, {got.alone_s:.2f} s "
        f"alone) meanwhile (s): {_times(pages)}")  # fmt: skip
    tries: list[float | None] = []
    while time.monotonic() - got.spam_end < args.recovery_limit and app.alive():
        t = await _other_page(app, f"{SPAM_QUERY}&user=after{len(tries)}", 60)
        tries.append(t)
        if t is not None and t <= SLOWDOWN_GOAL * got.alone_s:
            got.back_s = time.monotonic() - got.spam_end
            break
        await asyncio.sleep(1)
    back = f"not in {args.recovery_limit:g} s" if got.back_s is None else f"{got.back_s:.1f} s after the spam ended"
    say(f"7. after the spam, that person's pages (s): {_times(tries)}; within {SLOWDOWN_GOAL:g}x alone: {back}")
    got.end = time.monotonic()


def attack_rows(got: Attacks, sampler: Sampler, last: float) -> list[tuple[str, str, str, str]]:
    """The figures table's rows for the attacks: their peak RSS and the recovery after the rerun spam (``last``:
    when the soak's last page ended)."""
    during = [mb for t, mb in sampler.samples if got.start <= t <= got.end + SAMPLE_S]
    secs = lambda x: "not within --recovery-limit" if x is None else f"{x:.1f} s"
    idle = secs(got.idle_s) + ("" if got.idle_after_s is None else f" ({got.idle_after_s:.1f} s after the soak)")
    return [
        ("peak server RSS during the attacks", f"{max(during, default=float('nan')):.0f} MB", "", ""),
        ("recovery: page within 2x alone, after spam", secs(got.back_s), "", ""),
        ("recovery: server CPU idle, after spam", idle, "", ""),
        ("  the soak's last page ended, after spam", secs(last - got.spam_end if got.spam_end else None), "", ""),
    ]


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def report(args, results, alone, baseline, after, sampler, rss_before, final_rss, hwm, alive, soak_s, got) -> int:
    hostile = [r for r in results if r.item.kind != "normal"]
    normals = [r for r in results if r.item.kind == "normal"]
    rise = lambda r: max(0.0, sampler.rise(r.start, r.end))
    top_alone = max(alone, key=rise, default=None)
    top_loaded = max(hostile, key=rise, default=None)
    jump, jump_names = sampler.largest_jump([(r.start, r.end, r.item.name) for r in hostile])
    peak = sampler.peak()
    count = lambda rs, o: sum(r.outcome == o for r in rs)
    wrong = [r for r in (*normals, *baseline, *after) if r.outcome == "wrong"]
    failures = [r for r in (*alone, *hostile) if r.outcome in ("traceback", "blank", "unexpected")]

    print(f"\n== per hostile request: alone once, then {len(hostile)} requests by {args.sessions} sessions ==")
    cols = (
        "alone",
        "rise MB",
        "runs",
        "picture",
        "refused",
        "tracebk",
        "blank",
        "unexp",
        "timeout",
        "max s",
        "rise MB",
    )
    print(f"{'request':<40} {cols[0]:<10} {cols[1]:>7} | " + " ".join(f"{c:>7}" for c in cols[2:]))
    for name in dict.fromkeys(r.item.name for r in (*alone, *hostile)):
        a = next((r for r in alone if r.item.name == name), None)
        rs = [r for r in hostile if r.item.name == name]
        figures = [len(rs), *(count(rs, o) for o in ("picture", "refused", "traceback", "blank", "unexpected"))]
        figures += [count(rs, "timeout")]
        tail = " ".join(f"{x:>7}" for x in figures)
        if rs:
            tail += f" {max(r.end - r.start for r in rs):>7.1f} {max(map(rise, rs)):>7.0f}"
        first = f"{a.outcome:<10} {rise(a):>7.0f}" if a else f"{'-':<10} {'':>7}"
        print(f"{name[:40]:<40} {first} | {tail}")
    print("(rise MB: server RSS at its highest while the request ran, less RSS when it began; under load the other")
    print(" sessions' requests run at the same time, so that column is an upper bound for the request itself)")

    timing = []
    for step, label in (("default", "default page"), ("layer", "layer change")):
        by_itself = _median([r.seconds[step] for r in baseline if step in r.seconds])
        loaded = [r.seconds[step] for r in normals if step in r.seconds]
        within = sum(t <= SLOWDOWN_GOAL * by_itself for t in loaded)
        worst = max(loaded, default=float("nan"))
        ratio = _median(loaded) / by_itself if by_itself == by_itself and loaded else float("nan")
        timing.append(
            (
                f"normal {label}, median",
                f"alone {by_itself:.2f} s, loaded {_median(loaded):.2f} s (x{ratio:.2f}; slowest {worst:.2f} s)",
                f"<= {SLOWDOWN_GOAL:g}x alone",
                _yes(ratio <= SLOWDOWN_GOAL),
            )
        )
        timing.append((f"  {label}s within 2x alone", f"{within} of {len(loaded)}", "all", _yes(within == len(loaded))))
    goal_gb = f"<= {PEAK_GOAL_MB / GB:g} GB"
    rise_gb = f"<= {RISE_GOAL_MB / GB:g} GB"
    name_of = lambda r: f"{rise(r):.0f} MB ({r.item.name})" if r else "-"
    rows = [
        ("server RSS before the soak", f"{rss_before:.0f} MB", "", ""),
        ("peak server RSS (0.25 s samples)", f"{peak:.0f} MB", goal_gb, _yes(peak <= PEAK_GOAL_MB)),
        ("peak server RSS (kernel VmHWM)", f"{hwm:.0f} MB", goal_gb, _yes(hwm <= PEAK_GOAL_MB)),
        ("final server RSS (5 s after the soak)", f"{final_rss:.0f} MB", "", ""),
        ("largest rise by one request, alone", name_of(top_alone), rise_gb,
         _yes(top_alone is None or rise(top_alone) <= RISE_GOAL_MB)),
        ("largest rise while one ran, under load", name_of(top_loaded), "(upper bound)", ""),
        ("largest jump between samples, under load", f"{jump:.0f} MB ({_short(jump_names or '-')})", "", ""),
        ("server alive throughout", "yes" if alive else "NO (died)", "never dies", _yes(alive)),
        ("hostile requests under load", f"{len(hostile)} (+{len(alone)} alone)", "", ""),
        ("  refusals (an error message shown)", f"{count(hostile, 'refused')} (+{count(alone, 'refused')})", "", ""),
        ("  pictures (drawn, no error)", f"{count(hostile, 'picture')} (+{count(alone, 'picture')})", "", ""),
        ("  tracebacks / blank / crafted accepted", f"{len(failures)}", "0", _yes(not failures)),
        ("  timeouts", f"{count(hostile, 'timeout') + count(alone, 'timeout')} (> {args.item_timeout:.0f} s)", "", ""),
        ("normal visits under load", f"{len(normals)} ({count(normals, 'slow')} too slow to check)", "", ""),
        ("wrong results", f"{len(wrong)}", "0", _yes(not wrong)),
        *timing,
        ("normal visit after the soak", after[0].outcome if after else "not run (server down)", "ok",
         _yes(bool(after) and after[0].outcome == "ok")),
        *(attack_rows(got, sampler, max((r.end for r in results), default=float("nan"))) if got else []),
    ]  # fmt: skip
    print(f"\n== hosted-mode soak: {args.sessions} sessions, {soak_s:.0f} s, loopback ==")
    print(f"{'figure':<42} {'value':<60} {'goal':<14} met")
    for name, value, goal, met in rows:
        print(f"{name:<42} {value:<60} {goal:<14} {met}")
    if got:
        print(
            f"\n== issue 35 §4 attacks, {args.attacks_after:g} s into the soak, beside its sessions: what each got =="
        )
        print("\n".join(got.lines))
    for r in [*failures, *wrong][:10]:
        print(f"  problem: {r.item.name}: {r.outcome}: {r.detail[:600]}")
    for r in [r for r in (*alone, *hostile) if r.outcome == "timeout"][:5]:
        print(f"  timeout: {r.item.name}: {r.detail[:200]}")
    return 1 if (not alive or wrong or failures) else 0


def _short(text: str, n: int = 58) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=180, help="how long new requests are sent (at most 900)")
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--port", type=int, default=None, help="loopback port for the server (default: a free one)")
    ap.add_argument("--max-items", type=int, default=200, help="requests per session at most")
    ap.add_argument("--item-timeout", type=float, default=120, help="seconds one page may take")
    ap.add_argument("--baseline-rounds", type=int, default=3, help="measured normal visits alone")
    ap.add_argument("--skip-alone", action="store_true", help="skip running each hostile request once alone")
    ap.add_argument("--skip-attacks", action="store_true", help="skip the issue-35 script attacks during the soak")
    ap.add_argument("--attacks-after", type=float, default=10, help="seconds into the soak the attacks start")
    ap.add_argument("--upload-files", type=int, default=100, help="PUTs per upload attack")
    ap.add_argument("--upload-mb", type=int, default=15, help="MB per PUT")
    ap.add_argument("--spam-sessions", type=int, default=10, help="rerun spam: page streams from one address")
    ap.add_argument("--spam-seconds", type=float, default=30, help="rerun spam: how long")
    ap.add_argument("--spam-every", type=float, default=0.05, help="rerun spam: seconds between a stream's reruns")
    ap.add_argument("--recovery-limit", type=float, default=300, help="seconds to wait for the recovery at most")
    args = ap.parse_args()
    args.seconds = min(args.seconds, 900)
    args.sessions = max(1, min(args.sessions, 16))
    sys.exit(asyncio.run(soak(args)))


if __name__ == "__main__":
    main()
