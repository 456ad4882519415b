"""The one settings object: which model (or own weights), where to run, and the what-if edits; and every limit
and tolerance, once (tests/test_house_rules.py checks that no other module defines one).

Plain values only, so a Config is an obvious cache key in the dashboard and a plain record in the CLI.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OWN = "own"
DEFAULT_MODEL = "all-MiniLM-L6-v2"  # the bundled offline model
PART_NAMES = {"encoder": "encoder self-attention", "decoder": "decoder self-attention", "cross": "cross-attention"}
EMBEDDINGS = ("random", "model")
PLACEMENT_SEP = "|"  # Config.model_device: "<device>|<placement>" (models/placement.py splits it)
INITS = ("xavier", "identity")  # own weights' init
WO_MODES = ("learned", "identity", "random")  # the W^O what-if
DTYPE_NAMES = ("float32", "float64")  # what the engine computes in
TOKENS = ("pieces", "words")  # own weights: the bundled tokenizer's word pieces, or words split on whitespace

# --- limits, each in one place (the dashboard, its links, the CLI and the engine import them) ---------------
MAX_SEED = 2**32 - 1  # numpy's and torch's seeds: own weights, random embeddings, random W^O, induction tokens
MAX_HEADS = 256  # own weights' head count, and a re-split's
MAX_D_MODEL = 2048  # own weights' d_model
MAX_TEXT_CHARS = 12_000  # a text (and a link's text): a 2048-token English text fits; a link stays well under
# servers' header limits; checked before tokenising, so a megabyte of text is refused at once
MAX_SECOND_TEXT_CHARS = 5_000  # Two sentences' second sentence (its box cuts there; a link's text_b is checked)
MAX_LINK_NUMBER_CHARS = 32  # a number in a link longer than this is refused before it is converted
MAX_CORPUS_TEXTS = 2_000  # texts the dashboard's Corpus view scores in one run (it keeps 10 scores per head and text)
MAX_CORPUS_TEXTS_HOSTED = 64  # the same in hosted mode (a run must fit the request's time limit)
MAX_BATCH_CELLS = 2**25  # texts × heads × n² of one padded forward (the model's weights [b, h, n, n]: 128 MB)
MAX_PADDING = 0.25  # padded positions per real one in a pass, at most
CORPUS_BATCH = 16  # texts per padded batch of a corpus run (the CLI's default; the Corpus view's estimate)
MAX_WORDS = 512  # own weights' word tokens: the same cap as word pieces (the bundled tokenizer's model takes 512)
MAX_UPLOAD_MB = 16  # a file uploaded to the dashboard (own weights, a corpus, a stats file), in MB: each file
# uploader is given this number, and the browser refuses bigger files counting 10**6 bytes a MB (1024**2 on Windows)
MAX_UPLOAD_BYTES = MAX_UPLOAD_MB * 10**6  # ... so the server accepts the same: 16,000,000 bytes
MAX_SESSION_UPLOAD_BYTES = 3 * MAX_UPLOAD_BYTES  # what one session's uploads hold together (serve/uploads.py)
MAX_UPLOADS_TOTAL_BYTES = 256 * 2**20  # ... and all sessions' uploads in the process
MAX_UPLOAD_FRAMING_BYTES = 4 * 2**10  # an upload request's multipart framing around its file (names < 1 KB)
MAX_ISSUED_UPLOADS = 8  # file ids one session may upload to at once (the latest its file uploaders were given)
MAX_CLIENT_MESSAGE_BYTES = 2**20  # a websocket message from a browser (widget values; texts are <= 12,000 chars)
MAX_FILE_BYTES = 64 * 2**20  # an own-weights .safetensors file (the CLI's too)
MAX_HEADER_BYTES = 64 * 2**10  # ... and its JSON header
MAX_ABS_WEIGHT = 1e4  # |weight| above this can overflow float32 scores (q·k sums d_head products)
MAX_SCALE = 1e4  # the largest score scale a weights file may set (1/sqrt(d_head) is below 1)
MAX_STATS_ROWS = 65_536  # heads in a corpus stats file (256 layers × 256 heads)
MAX_FOLDER_CHARS = 500  # an offload folder typed in the dashboard
MIN_INDUCTION_LENGTH, MAX_INDUCTION_LENGTH = 2, 512  # tokens per copy of the induction test's random sequence
INDUCTION_LENGTH = 50  # ... the Induction view's default (and what a request is estimated at without a link's N)
MAX_SWEEP_HEADS = 64  # the head-count explorer offers the divisors of d_model up to this many heads
MAX_PATCH_BATCH = 32  # patched runs per forward pass at most ...
PATCH_OUTPUT_BYTES = 2**28  # ... and at most this much of their logits (or hidden states) per pass
LENS_POSITIONS = 64  # the Next token view runs the logit lens on at most this many positions (the last ones)
MAX_OV_SOURCES = 64  # distinct tokens of the text read through a head's OV circuit
MAX_NOTEBOOK_RECORDINGS = 4  # recordings the notebook API keeps (a text per model and settings)
GC_GROWTH_MB = 64  # the server collects garbage before a page run once its memory grew this much since the last
# collection or its lowest since (ui/memo.collect_garbage: a full collection walks every cached figure, ~0.1 s)
WINDOW_FROM = 256  # a pattern over more tokens than this is drawn a window of query rows at a time (Heads, Compare)
WINDOW_ROWS = 128  # query rows per window (Heads, Compare, Step by step, the Lesson, Two sentences)
TILE_BLOCK_CELLS = 2**24  # a long attention call runs a block of query rows with at most this many scores at a time
TILE_CHECK_ROWS = 8  # ... and each block's self-check compares this many of its rows (spread evenly) with the model's
TILE_FUSED_TOL = 1e-5  # a fused long call (models/fused.py) whose check rows miss eager's output by more runs eagerly
MAX_LONG_TEXT_CHARS = 60_000  # a long text recorded in tiles (SmolLM2's 8,192 tokens; the CLI's `long`); hosted
# mode keeps MAX_TEXT_CHARS and the request budgets
LONG_SINK_TOKENS = 4  # the heads at length (studies/long_heads.py): a head's sink share is its weight on the first keys
LONG_LOCAL_TOKENS = 256  # ... its local share the weight on the last this many keys (the query's own included)
LONG_LAST_ROWS = 64  # ... the vertical-slash recall is estimated on the last this many query rows (MInference)
LONG_STREAMING_RECALL = 0.9  # ... a head whose sinks + recent window hold this share of its weight can stream
MIN_RETRIEVAL_SCORE = 0.1  # ... unless it copies at least this share of a needle from far away (a retrieval head)
LONG_PATTERN_BUDGET = 16  # ... each sparse pattern kind keeps 1/16 of the keys (columns, diagonals or tiles)
LONG_VIEW_FROM = 1024  # views at length (analysis/plans/long_views.py): beyond this many tokens Overview and Heads
# draw pooled exact maps and a zoom, never a whole [n, n]
LONG_MAP_CELLS = 256  # ... the zoom's pooled map of the opened head: at most this many cells a side (8,192: 32×32)
LONG_GRID_CELLS = 64  # ... the Heads grid's pooled maps: at most this many cells a side per head
POOLED_KEEP_BYTES = 2**20  # ... a call keeps every head's pooled map up to this size (models/call.py)
POOLED_KEEP_SIDES = 3  # ... and the maps of at most this many tile sides (the Overview's, the Heads grid's, one more)
ZOOM_SIDE = 64  # ... the default zoom window: this many queries × keys around the focus token
MAX_ZOOM_SIDE = 256  # ... a zoom window's most queries (and keys) a side: exact weights with a label each
AUTO_SCAN_TOKENS = 96  # a per-head scan (Head importance, Patching) starts by itself on texts up to this many tokens
KV_SINKS = 4  # KV cache policies (kv_policies.py): the attention sinks StreamingLLM and Duo's streaming heads keep
KV_OBS_WINDOW = 32  # ... SnapKV's (and Ada-KV's) observation window: the last prefix tokens that vote (the paper's 32)
KV_POOL_KERNEL = 5  # ... SnapKV's average-pooling kernel over the votes (SnapKV's code)
KV_SAFEGUARD = 0.2  # ... Ada-KV: the share of the budget every head keeps of its own best tokens (kvpress's alpha)
KV_STREAM_HEAD = 64  # ... DuoAttention: the tokens (sinks + recent) a streaming head keeps at most
KV_BUDGETS = (0.1, 0.25, 0.5, 0.75)  # the budgets of the KV cache curve (shares of the prefix kept per head)
KV_PREFIX_SHARE = 0.75  # the share of a text's tokens that form the cached prefix (the rest: the continuation)

# --- tolerances ----------------------------------------------------------------------------------------------------
MATCH_TOL = 1e-4  # a recomputed value further than this from the model's own (a pattern, the logits) is never shown
SHARE_TOL = 1e-6  # a share (0…1) read from a stats file may pass 1 by this much (float rounding when written)


def max_corpus_texts() -> int:
    """How many texts the Corpus view scores at most (hosted mode: MAX_CORPUS_TEXTS_HOSTED)."""
    return MAX_CORPUS_TEXTS_HOSTED if hosted() else MAX_CORPUS_TEXTS


def hosted() -> bool:
    """Hosted mode: MHA_VIZ_HOSTED=1 or an allow-list in MHA_VIZ_ALLOWED_MODELS (tighter limits, no local folders)."""
    return bool(os.environ.get("MHA_VIZ_ALLOWED_MODELS", "").strip()) or os.environ.get(
        "MHA_VIZ_HOSTED", ""
    ).strip().lower() in ("1", "true", "yes")


def cache_dir() -> Path:
    """Where mha-viz keeps extracted models and the server's stored first page ($MHA_VIZ_CACHE, else
    ~/.cache/mha-viz). Here, not in models/sources.py, so the server reads it without importing torch."""
    base = os.environ.get("MHA_VIZ_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mha-viz"
    )
    return Path(base)


# --- Config's three parts: the cache keys and the road take the one they depend on; each default is written here once,
# and Config's flat fields read theirs from these (_part_field) ----------------------------------------------------
@dataclass(frozen=True)
class Source:
    """Where the model comes from (Config.model …) and where it runs (device, dtype, placement)."""

    model: str = ""  # "" = the bundled MiniLM; "smollm2"; a Hugging Face id or folder; "own" = own weights
    device: str = "cpu"
    dtype: str = "float32"
    # a pretrained model spread over devices by a device map (models/placement.py's Placement.encode()); "" whole
    placement: str = ""


@dataclass(frozen=True)
class OwnWeights:
    """Own weights' settings (Config.model == "own"): made from these, or loaded from weights_file (.safetensors)."""

    d_model: int = 512
    n_heads: int = 8
    seed: int = 0  # own weights and their random embeddings
    init: str = "xavier"
    bias: bool = False
    embeddings: str = "random"  # "random" (seeded per token id) | "model" (the tokenizer model's)
    tokens: str = "pieces"  # "pieces" (bundled tokenizer, [CLS]/[SEP]) | "words" (split on whitespace)
    positions: bool = False  # add position embeddings to X (sinusoidal for random, the model's otherwise)
    weights_file: bytes | None = field(default=None, repr=False)
    # own weights as another layer (mha_viz.own_variants): "mha" | "gqa" | "mqa" | "mohsa" | "moh" | "dcmha"
    variant: str = "mha"
    variant_groups: int = 2  # gqa: K/V groups
    variant_width: int = 4  # mohsa: overlap on each side
    variant_top_k: int = 2  # moh: heads per token
    variant_gates: str = "router"  # moh: "router" | "equal"
    variant_rank: int = 2  # dcmha: rank of the cross-head mixing


@dataclass(frozen=True)
class WhatIfs:
    """The what-if edits of a traced layer (Config.heads …): what the traces of one recorded run differ by."""

    heads: int | None = None  # re-split into this many heads (None: as the layer has them)
    wo: str = "learned"  # "learned" | "identity" | "random"
    wo_seed: int = 0  # for wo = "random"
    ablate: tuple[int, ...] = ()  # heads whose W^O block is zeroed
    head_scale: tuple[tuple[int, float], ...] = ()  # (head, factor) pairs multiplying W^O blocks
    causal: bool = False  # add a causal mask (decoders always have one)
    scaled: bool = True  # multiply scores by the model's scale (1/sqrt(d_head) by default)

    @property
    def none(self) -> bool:
        """No what-if is set: the layer as the model has it."""
        return self == WhatIfs()


def _part_field(part: type, name: str) -> Any:
    """Config's field ``name`` as its part declares it (its default and whether repr shows it)."""
    declared = part.__dataclass_fields__[name]
    return field(default=declared.default, repr=declared.repr)


@dataclass(frozen=True)
class Config:
    """Everything that decides a trace besides the text, the attention kind and the layer: the three parts above,
    flat (``Config(heads=4)``, ``config.heads``); each field's default and meaning are its part's."""

    # where the model comes from and runs (Source)
    model: str = _part_field(Source, "model")
    device: str = _part_field(Source, "device")
    dtype: str = _part_field(Source, "dtype")
    # own weights (OwnWeights; model == "own")
    d_model: int = _part_field(OwnWeights, "d_model")
    n_heads: int = _part_field(OwnWeights, "n_heads")
    seed: int = _part_field(OwnWeights, "seed")
    init: str = _part_field(OwnWeights, "init")
    bias: bool = _part_field(OwnWeights, "bias")
    embeddings: str = _part_field(OwnWeights, "embeddings")
    tokens: str = _part_field(OwnWeights, "tokens")
    positions: bool = _part_field(OwnWeights, "positions")
    weights_file: bytes | None = _part_field(OwnWeights, "weights_file")
    variant: str = _part_field(OwnWeights, "variant")
    variant_groups: int = _part_field(OwnWeights, "variant_groups")
    variant_width: int = _part_field(OwnWeights, "variant_width")
    variant_top_k: int = _part_field(OwnWeights, "variant_top_k")
    variant_gates: str = _part_field(OwnWeights, "variant_gates")
    variant_rank: int = _part_field(OwnWeights, "variant_rank")
    # the what-ifs (WhatIfs)
    heads: int | None = _part_field(WhatIfs, "heads")
    wo: str = _part_field(WhatIfs, "wo")
    wo_seed: int = _part_field(WhatIfs, "wo_seed")
    ablate: tuple[int, ...] = _part_field(WhatIfs, "ablate")
    head_scale: tuple[tuple[int, float], ...] = _part_field(WhatIfs, "head_scale")
    causal: bool = _part_field(WhatIfs, "causal")
    scaled: bool = _part_field(WhatIfs, "scaled")
    placement: str = _part_field(Source, "placement")  # last, where it has always been (positional order kept)

    @property
    def own(self) -> bool:
        return self.model.strip().lower() == OWN

    @property
    def model_device(self) -> str:
        """Where the pretrained model runs (own weights use the bundled tokenizer's model on the CPU): the device,
        with the placement joined as "<device>|<placement>" when the model is spread by a device map."""
        if self.own:
            return "cpu"
        return f"{self.device}{PLACEMENT_SEP}{self.placement}" if self.placement else self.device

    @property
    def model_name(self) -> str:
        """The pretrained model to load ("" = bundled; own weights use the bundled one's tokenizer)."""
        return "" if self.own else self.model.strip()

    @property
    def source(self) -> Source:
        """Where the model comes from and where it runs."""
        return Source(**{f: getattr(self, f) for f in _SOURCE})

    @property
    def own_weights(self) -> OwnWeights:
        """Own weights' settings (used only when ``own``)."""
        return OwnWeights(**{f: getattr(self, f) for f in _OWN_WEIGHTS})

    @property
    def what_ifs(self) -> WhatIfs:
        """Only the what-if part (what the traces of one recorded run differ by)."""
        return WhatIfs(**{f: getattr(self, f) for f in _WHAT_IFS})

    @classmethod
    def of(cls, source: Source | None = None, own_weights: OwnWeights | None = None,
           what_ifs: WhatIfs | None = None) -> Config:  # fmt: skip
        """A Config from its three parts (each left out: its defaults)."""
        parts = (source or Source(), own_weights or OwnWeights(), what_ifs or WhatIfs())
        return cls(**{k: v for part in parts for k, v in dataclasses.asdict(part).items()})

    def replace(self, **changes: object) -> Config:
        return dataclasses.replace(self, **changes)


_SOURCE = tuple(f.name for f in dataclasses.fields(Source))
_OWN_WEIGHTS = tuple(f.name for f in dataclasses.fields(OwnWeights))
_WHAT_IFS = tuple(f.name for f in dataclasses.fields(WhatIfs))
