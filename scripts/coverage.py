"""Which model types mha-viz reproduces exactly: every text model type of the installed transformers, each built
from a tiny random config, run through the reproduction check of tests/test_models.py::test_architecture_reproduced.

    python scripts/coverage.py                 # every type; writes mha_viz/models/coverage.json
    python scripts/coverage.py llama bart      # only these (printed, the file is not written)

A tiny config starts from the type's config class and sets small sizes only for the attributes its default config
has (hidden 64, 2 layers, 4 heads sharing 2 key/value heads where allowed, head size 16, windows of 3 tokens, 4
experts with 2 per token, small latent-attention ranks; nested configs likewise). The model is first built on the
meta device to count its parameters: a type that stays large is skipped, never built. Each type then runs once
with the recording attention and once with transformers' own eager attention (a copy with the same weights): on a
12-token text (longer than every window) and an 8-token decoder text, every layer and part's pattern and W^O
output must match the model's own ``output_attentions`` and its W^O output to 1e-5. A model that reports its weights
before its learned sink (granite_swa: the sink scales each row's output instead) is compared on the weights it
applies, output_attentions × each row's sink scale, which mha-viz draws; its entry then also keeps
``vs_output_attentions``, the largest difference between what is drawn and output_attentions itself.

The catalog (mha_viz/models/catalog.py) reads the file: a type is supported only when this run reproduced it;
tests/test_coverage.py re-runs every reproduced type.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import signal
import sys
import threading
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mha_viz.models.catalog import COVERAGE_FILE, OUTSIDE_INTERFACE, text_model_types  # noqa: E402

TOL = 1e-5
MAX_PARAMETERS = 20_000_000  # counted on the meta device before any weights exist
TIME_LIMIT_S = 60  # per type
MEMORY_LIMIT = 3 << 30  # resident bytes: the script stops rather than take the machine
TEXT_TOKENS = 12
DECODER_IDS = [2, *range(10, 17)]  # 8 decoder tokens, starting with the decoder start id

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB, POSITIONS, WINDOW = 64, 4, 2, 16, 96, 320, 128, 3
SIZES: dict[str, object] = {
    # width
    "hidden_size": HIDDEN, "d_model": HIDDEN, "n_embd": HIDDEN, "dim": HIDDEN, "embed_dim": HIDDEN,
    "embedding_size": HIDDEN, "word_embed_proj_dim": HIDDEN, "d_embed": HIDDEN, "embedding_dim": HIDDEN,
    # depth
    "num_hidden_layers": 2, "n_layer": 2, "num_layers": 2, "n_layers": 2, "encoder_layers": 2, "decoder_layers": 2,
    "num_decoder_layers": 2, "num_encoder_layers": 2,
    # heads
    "num_attention_heads": HEADS, "n_head": HEADS, "num_heads": HEADS, "n_heads": HEADS,
    "encoder_attention_heads": HEADS, "decoder_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
    "head_dim": HEAD_DIM, "d_kv": HEAD_DIM, "attention_head_size": HEAD_DIM, "kv_channels": HEAD_DIM,
    # feed-forward
    "intermediate_size": FFN, "d_ff": FFN, "ffn_dim": FFN, "encoder_ffn_dim": FFN, "decoder_ffn_dim": FFN,
    "n_inner": FFN, "hidden_dim": FFN, "ffn_hidden_size": FFN, "shared_expert_intermediate_size": FFN,
    "moe_intermediate_size": 32, "expert_intermediate_size": 32,
    # vocabulary and positions; special ids inside the vocabulary
    "vocab_size": VOCAB, "decoder_vocab_size": VOCAB, "max_position_embeddings": POSITIONS,
    "n_positions": POSITIONS, "n_ctx": POSITIONS, "max_seq_len": POSITIONS, "seq_length": POSITIONS,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2,
    "sep_token_id": 2, "cls_token_id": 1,
    # windows shorter than the text
    "sliding_window": WINDOW, "local_attention": WINDOW, "attention_window": 4, "rotary_dim": 8, "window_size": WINDOW,
    # mixture of experts
    "num_local_experts": 4, "num_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_topk": 2, "top_k": 2, "num_selected_experts": 2, "n_group": 1, "topk_group": 1,
    "n_shared_experts": 1, "first_k_dense_replace": 1,
    # latent attention (MLA): value heads of their own size, a decoupled rotary part
    "kv_lora_rank": 16, "q_lora_rank": 24, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 12,
    # hybrids: one attention layer after one that is not (state-space or linear attention)
    "attn_layer_indices": [1], "attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2,
    "expert_layer_offset": 1, "num_dense_layers": 1, "num_kv_shared_layers": 0,
    # per-layer inputs (Gemma 3n)
    "vocab_size_per_layer_input": VOCAB, "hidden_size_per_layer_input": 16,
}  # fmt: skip
HYBRID_PATTERNS = ("hybrid_override_pattern",)  # one letter per layer; "*" is attention
PER_LAYER_LISTS = ("layer_types", "layers_block_type", "block_types", "attn_type_list", "layer_type_list")


# --- tiny configs -----------------------------------------------------------------------------------------------
def _small(default: object, full_heads: bool) -> dict:
    """Keyword arguments that shrink ``default`` (a config instance): only attributes it has and may be set."""
    layers = _depth(default)
    kw: dict = {}
    for name, value in SIZES.items():
        try:
            if not hasattr(default, name) or _read_only(default, name):
                continue
            current = getattr(default, name)
        except Exception:  # a per-layer attribute read at the top level
            continue
        if name == "num_key_value_heads" and (full_heads or hasattr(default, "kv_lora_rank")):
            value = HEADS  # latent attention: one key/value head per query head
        if name == "head_dim" and current is not None and current == getattr(default, "qk_rope_head_dim", None):
            value = SIZES["qk_rope_head_dim"]  # MLA: the rotary embedding's head size is the decoupled rotary part
        if name == "q_lora_rank" and current is None:
            continue  # DeepSeek-V2-lite style: no query compression
        if isinstance(current, (bool, dict)):
            continue
        if isinstance(current, (list, tuple)):  # one value per layer: the same small value for each
            if not current or not all(isinstance(x, (int, float)) for x in current) or len(current) != layers:
                continue
            value = [value] * 2
        kw[name] = value
    for name in PER_LAYER_LISTS:  # a per-layer list of the default depth: keep its kinds, cut to 2 layers
        current = getattr(default, name, None)
        if isinstance(current, (list, tuple)) and len(current) > 2 and not _read_only(default, name):
            kw[name] = _two_layers(list(dict.fromkeys(current)))
    for name in HYBRID_PATTERNS:
        current = getattr(default, name, None)
        if isinstance(current, str) and len(current) > 2 and "*" in current:
            kw[name] = next((c for c in current if c not in "*-"), "-") + "*"
    for name, value in _nested_items(default):  # nested configs (text_config, encoder/decoder configs)
        small = _small(value, full_heads)
        if not small:
            continue
        kw[name] = {"model_type": value.model_type, **small} if getattr(value, "model_type", "") else small
    return kw


def _two_layers(kinds: list) -> list:
    """Two layer kinds from a per-layer list's kinds: one that is not attention, then one that is (a hybrid), or
    the first two attention kinds (sliding, then full)."""
    attention = [
        k for k in kinds if isinstance(k, str) and ("attention" in k or "hybrid" in k) and not k.startswith("linear")
    ]
    other = [k for k in kinds if k not in attention]
    if attention and other:
        return [other[0], attention[0]]
    if not attention and "linear_attention" in kinds:  # attention nowhere by default: one attention layer
        return ["linear_attention", "full_attention"]
    return (kinds * 2)[:2]


def _depth(config: object) -> int | None:
    for name in ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "decoder_layers"):
        try:
            value = getattr(config, name, None)
        except Exception:
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _read_only(config: object, name: str) -> bool:
    prop = getattr(type(config), name, None)
    return isinstance(prop, property) and prop.fset is None


def _nested_items(config: object) -> list:
    return [
        (k, v)
        for k, v in vars(config).items()
        if not k.startswith("_") and hasattr(v, "to_dict") and hasattr(v, "model_type") and not _read_only(config, k)
    ]


def _uses_kv_heads(config) -> bool:
    return any(hasattr(c, "num_key_value_heads") for c in (config, *(v for _, v in _nested_items(config))))


def tiny_config(model_type: str, full_heads: bool = False):
    """A tiny config of ``model_type`` (raises with the reason when the config class refuses the sizes).

    A size the config class refuses on its own (a validator, a derived attribute) is left at its default."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    kw = _small(cls(), full_heads)
    try:
        return cls(**kw)
    except Exception:
        pass
    kept = {}
    for name, value in kw.items():
        try:
            cls(**{name: value})
        except Exception:
            continue
        kept[name] = value
    return cls(**kept)


def parameter_count(model_type: str, config) -> int:
    """Parameters of the model mha-viz would load, counted on the meta device (no memory taken)."""
    with torch.device("meta"):
        model = _instantiate(model_type, config)
    return sum(p.numel() for p in model.parameters())


def _instantiate(model_type: str, config) -> torch.nn.Module:
    from mha_viz.models.load import model_classes

    last: Exception | None = None
    for cls in model_classes(model_type, bool(getattr(config, "is_encoder_decoder", False))):
        try:
            return cls.from_config(config, attn_implementation="eager")
        except ValueError as exc:  # no such head for this config: the next class
            last = exc
    raise last or ValueError("no auto class builds it")


def build(model_type: str, config, seed: int = 0) -> torch.nn.Module:
    """A tiny random model (float32, eval mode) of the class mha-viz would load."""
    torch.manual_seed(seed)
    return _instantiate(model_type, config).float().eval()


# --- the reproduction check -------------------------------------------------------------------------------------
class Failed(Exception):
    """A type that is not reproduced; the message is the one-line reason."""


def _labels(ids: list[int]):
    from mha_viz.models.tokens import Tokens

    names = tuple(f"t{i}" for i in range(len(ids)))
    return Tokens(tuple(ids), names, names, tuple(False for _ in ids))


def reference(model: torch.nn.Module, lm, kwargs: dict) -> tuple[dict, dict]:
    """The eager model's own attentions {(part, layer): [b, h, q, k]} and W^O outputs {(part, layer): [b, q, d]}."""
    outputs: dict[str, list] = {}  # W^O module -> its outputs in call order (ALBERT shares one across layers)
    handles = []
    for name in dict.fromkeys(site.wo for site in lm.sites):

        def hook(_m, _a, out, name=name):  # (a routed layer's W^O is its attention module: (output, weights, ...))
            outputs.setdefault(name, []).append((out[0] if isinstance(out, tuple) else out).detach())

        handles.append(model.get_submodule(name).register_forward_hook(hook))
    try:
        with torch.no_grad():
            out = model(**kwargs, output_attentions=True)
    finally:
        for h in handles:
            h.remove()
    wo_out = {}
    for name, found in outputs.items():
        keys = [(s.part, s.layer) for s in lm.sites if s.wo == name]
        wo_out.update(zip(keys, found, strict=False))
    if lm.encoder_decoder:
        by_part = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    else:
        by_part = {lm.parts[0]: out.attentions}
    attn = {(p, i): a.detach() for p, found in by_part.items() for i, a in enumerate(found or ()) if a is not None}
    return attn, wo_out


def kind_of(lm) -> str:
    """encoder-decoder (with cross-attention), decoder (causal) or encoder, from the model itself."""
    return "encoder-decoder" if lm.encoder_decoder else "decoder" if lm.causal else "encoder"


def reproduce(model_type: str, model: torch.nn.Module) -> tuple[float, str, list[str], float | None]:
    """Trace ``model`` and compare with its own eager attention: (largest difference, kind, the layers compared,
    the largest difference between the drawn pattern and output_attentions itself where the model reports its
    weights before its sink, else None). Raises Failed."""
    from mha_viz.config import Config
    from mha_viz.models.load import prepare
    from mha_viz.models.run import run_model
    from mha_viz.models.self_check import applied_weights
    from mha_viz.pipeline.road import Recording, layer_trace
    from mha_viz.trace import MhaVizError

    try:
        eager = copy.deepcopy(model)  # the same weights, transformers' own eager attention
    except Exception:
        eager = None
    try:
        lm = prepare(model, None, model_type)
    except MhaVizError as exc:
        raise Failed(_line(exc)) from None
    if eager is None:
        raise Failed("could not copy the model for the eager reference")
    ids = torch.randint(3, 120, (1, TEXT_TOKENS), generator=torch.Generator().manual_seed(1))
    kwargs: dict = {"input_ids": ids}
    dec = None
    if lm.encoder_decoder:
        dec = list(DECODER_IDS)
        kwargs["decoder_input_ids"] = torch.tensor([dec])
    try:
        run = run_model(lm, input_ids=ids, decoder_ids=kwargs.get("decoder_input_ids"))
    except MhaVizError as exc:
        raise Failed(_line(exc)) from None
    rec = Recording(_labels(ids[0].tolist()), None if dec is None else _labels(dec), run)
    try:
        attn, wo_out = reference(eager, lm, kwargs)
    except Exception as exc:
        raise Failed(f"its eager reference did not run with output_attentions ({_line(exc)})") from None
    sites = {(s.part, s.layer) for s in lm.sites}
    if set(rec.run.calls) != sites:
        raise Failed(f"the 12-token text called other attention layers than the probe ({_calls(rec.run.calls, sites)})")
    if set(attn) != sites:
        raise Failed(
            f"output_attentions gives {len(attn)} maps for {len(sites)} recorded attention layers "
            "(attention outside the interface)"
        )
    worst = 0.0
    reported: float | None = None  # max |drawn - output_attentions| where the sink rescales what is reported
    for part, layer in sorted(rec.run.calls):
        try:
            t = layer_trace(lm, rec, part, layer, Config())
        except MhaVizError as exc:
            raise Failed(_line(exc)) from None
        if t.pattern.shape != attn[(part, layer)][0].shape:
            raise Failed(f"{part} layer {layer}: pattern of shape {tuple(t.pattern.shape)}, the model's "
                         f"{tuple(attn[(part, layer)][0].shape)}")  # fmt: skip
        if t.output.shape != wo_out[(part, layer)][0].shape:
            raise Failed(f"{part} layer {layer}: W^O output of shape {tuple(t.output.shape)}, the model's "
                         f"{tuple(wo_out[(part, layer)][0].shape)}")  # fmt: skip
        given = attn[(part, layer)][0]  # [h, q, k]: output_attentions
        theirs = applied_weights(given, t.pattern, t.sink is not None)  # [h, q, k]
        if theirs is not given:  # reported before the sink: drawn = output_attentions × each row's sink scale
            reported = max(reported or 0.0, (t.pattern - given).abs().max().item())
        d_pattern = (t.pattern - theirs).abs().max().item()
        d_out = (t.output - wo_out[(part, layer)][0]).abs().max().item()
        for what, d in (("pattern", d_pattern), ("W^O output", d_out)):
            if not d <= TOL:
                raise Failed(f"could not reproduce: {part} layer {layer} {what} differs by {d:.2g}")
        if not (t.model_delta == 0.0 or t.model_delta <= TOL):
            raise Failed(f"could not reproduce: {part} layer {layer} differs from the model by {t.model_delta:.2g}")
        worst = max(worst, d_pattern, d_out)
    if lm.encoder_decoder:
        if lm.parts != ("encoder", "decoder", "cross"):
            raise Failed(f"an encoder-decoder traced as {', '.join(lm.parts)}")
        cross = rec.run.calls[("cross", 0)]
        if cross.q.shape[-2] != len(DECODER_IDS) or cross.k.shape[-2] != TEXT_TOKENS:
            raise Failed("cross-attention did not read the decoder's queries and the encoder's keys")
    return worst, kind_of(lm), sorted(f"{p}{i}" for p, i in rec.run.calls), reported


def _calls(calls: dict, sites: set) -> str:
    return f"{len(calls)} calls, {len(sites)} sites"


def _line(exc: BaseException) -> str:
    text = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    first = " ".join(text) if text else type(exc).__name__
    return first if len(first) <= 200 else first[:197] + "..."


def _reason(text: str) -> str:
    """mha-viz's refusal as a catalog reason: no "it is not supported" (the catalog says so)."""
    if text.startswith("the model ran without calling transformers' attention interface"):
        return OUTSIDE_INTERFACE
    return re.sub(r"[;,] (it|this model) is not supported$", "", text)


def _config_kind(model_type: str, config) -> str:
    """The kind from the config alone (for types that did not run): encoder-decoder, decoder or encoder."""
    from transformers.models.auto import modeling_auto as ma

    if config is not None and getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    if config is not None and getattr(config, "is_decoder", False):
        return "decoder"
    if model_type in ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return "encoder-decoder"
    causal = model_type in ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return "decoder" if causal and model_type not in ma.MODEL_FOR_MASKED_LM_MAPPING_NAMES else "encoder"


def check(model_type: str) -> dict:
    """One type, start to end: its coverage entry (status reproduced or failed, kind, and the difference or
    the reason)."""
    config = None
    entry: dict = {}
    try:
        for full_heads in (False, True):  # grouped-query first; all heads where the type allows no other
            try:
                config = tiny_config(model_type, full_heads)
            except Exception as exc:
                if full_heads:
                    raise Failed(f"could not build a tiny config: {_line(exc)}") from None
                continue
            try:
                n = parameter_count(model_type, config)
            except Exception as exc:
                if full_heads:
                    raise Failed(f"could not build a tiny model: {type(exc).__name__}: {_line(exc)}") from None
                continue
            if n > MAX_PARAMETERS:
                raise Failed(f"too large for a tiny config: {n} parameters")
            entry["parameters"] = n
            try:
                model = build(model_type, config)
            except Exception as exc:
                if full_heads:
                    raise Failed(f"could not build a tiny model: {type(exc).__name__}: {_line(exc)}") from None
                continue
            try:
                worst, kind, layers, reported = reproduce(model_type, model)
            except Failed as exc:
                if full_heads or str(exc).startswith("could not reproduce") or not _uses_kv_heads(config):
                    raise
                continue
            if reported is not None:
                entry["vs_output_attentions"] = reported
            return {"status": "reproduced", "kind": kind, "max_diff": worst, "layers": len(layers), **entry}
        raise Failed("could not build a tiny model")
    except Failed as exc:
        return {"status": "failed", "kind": _config_kind(model_type, config), "reason": _reason(str(exc)), **entry}
    except TimeoutError:
        return {"status": "failed", "kind": _config_kind(model_type, config),
                "reason": f"took longer than {TIME_LIMIT_S} s on a tiny config"}  # fmt: skip
    except Exception as exc:
        return {"status": "failed", "kind": _config_kind(model_type, config),
                "reason": f"internal error: {type(exc).__name__}: {_line(exc)}", **entry}  # fmt: skip


@contextlib.contextmanager
def time_limit(seconds: int):
    """Raise TimeoutError in the main thread after ``seconds`` (Python code only; tiny models stay in it)."""

    def ring(_sig, _frame):
        raise TimeoutError

    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def quiet() -> None:
    import transformers

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity(50)  # configs refusing a value log it as an error: the reason says enough
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(1)


def _watch_memory(limit: int, current: list[str]) -> None:
    import psutil

    me = psutil.Process()
    while True:
        rss = me.memory_info().rss
        if rss > limit:
            print(f"coverage: stopped at {current[0]!r}: {rss >> 20} MiB resident (limit {limit >> 20})", flush=True)
            os._exit(3)
        time.sleep(0.2)


def run_all(types: list[str], verbose: bool = True) -> dict[str, dict]:
    current = [""]
    threading.Thread(target=_watch_memory, args=(MEMORY_LIMIT, current), daemon=True).start()
    results: dict[str, dict] = {}
    for model_type in types:
        current[0] = model_type
        start = time.perf_counter()
        try:
            with time_limit(TIME_LIMIT_S):
                results[model_type] = check(model_type)
        except TimeoutError:  # rang between check's handlers
            results[model_type] = {"status": "failed", "kind": _config_kind(model_type, None),
                                   "reason": f"took longer than {TIME_LIMIT_S} s on a tiny config"}  # fmt: skip
        results[model_type]["seconds"] = round(time.perf_counter() - start, 2)
        if verbose:
            r = results[model_type]
            what = f"{r['max_diff']:.2g} over {r['layers']} layers" if r["status"] == "reproduced" else r["reason"]
            print(f"{model_type:<28}{r['status']:<12}{r['seconds']:>6.2f}s  {what}", flush=True)
    return results


def write(results: dict[str, dict], path: Path = COVERAGE_FILE) -> None:
    import transformers

    data = {
        "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
        "tolerance": TOL,
        "text_tokens": TEXT_TOKENS,
        "written_by": "scripts/coverage.py",
        "types": {t: {k: v for k, v in r.items() if k != "seconds"} for t, r in sorted(results.items())},
    }
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="utf-8")


def main(argv: list[str]) -> int:
    quiet()
    chosen = argv or text_model_types()
    results = run_all(chosen)
    ok = [t for t, r in results.items() if r["status"] == "reproduced"]
    worst = max((results[t]["max_diff"] for t in ok), default=0.0)
    print(f"{len(ok)} of {len(results)} types reproduced (largest difference {worst:.2g})")
    if not argv:
        write(results)
        print(f"wrote {COVERAGE_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
