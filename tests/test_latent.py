"""Latent attention (MLA: DeepSeek-V2/V3, MiniCPM3) as a picture (issue 23): the latent c_KV and the shared rotary key
part are recorded from the model's own modules, K (no-rope part) and V rebuilt from c_KV through W_UKV are the k and v
the model used, Step by step shows X → c_KV → K, V with their shapes, and the per-token cache is counted from the
config."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import _zoo_dir
from mha_viz.analysis.steps import head_steps, latent_cache
from mha_viz.config import Config
from mha_viz.models.latent import latent_of
from mha_viz.pipeline import road
from zoo import eager_pass

TEXT = "The animal was tired because it walked"
TYPES = ("deepseek_v2", "deepseek_v3", "minicpm3")


@pytest.fixture(scope="module", params=TYPES)
def loaded(request, tmp_path_factory) -> tuple:
    folder = _zoo_dir(tmp_path_factory, request.param)
    lm = road.load(Config(model=folder))
    return lm, road.record(lm, TEXT)


def _own_modules(lm, layer: int, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """What the model's own modules computed in a plain eager pass: the normed latent, the down-projection,
    W^O's output, and output_attentions. Shapes: c_kv [n, d_c]; down [n, d_c + d_rope]; wo [n, d]; attn [h, n, n]."""
    attn = lm.model.get_submodule(lm.site("decoder", layer).name)
    got: dict[str, torch.Tensor] = {}

    def keep(name: str):
        def hook(_m, _a, out) -> None:
            got[name] = out.detach().reshape(-1, out.shape[-1])

        return hook

    handles = [attn.kv_a_layernorm.register_forward_hook(keep("c_kv")),
               attn.kv_a_proj_with_mqa.register_forward_hook(keep("down")),
               attn.o_proj.register_forward_hook(keep("wo"))]  # fmt: skip
    out = eager_pass(lm, ids, handles)
    got["attn"] = out.attentions[layer][0]
    return got


@pytest.mark.parametrize("layer", [0, 1])
def test_latent_rebuilds_k_and_v_and_is_the_models_own(loaded, layer: int) -> None:
    lm, rec = loaded
    up, down, d_rope = lm.site("decoder", layer).latent
    cfg = lm.model.config
    assert up.endswith("kv_b_proj") and down.endswith("kv_a_proj_with_mqa") and d_rope == cfg.qk_rope_head_dim
    call = road.layer_call(lm, rec, "decoder", layer)
    lat = latent_of(lm.model, up, call)
    assert lat is not None
    own = _own_modules(lm, layer, torch.tensor([rec.tokens.ids]))
    assert (lat.c_kv - own["c_kv"]).abs().max() <= 1e-6  # c_KV: the model's kv_a_layernorm output
    assert (lat.k_rope_pre - own["down"][:, cfg.kv_lora_rank :]).abs().max() <= 1e-6
    # K (no-rope part) and V rebuilt from c_KV through the model's own kv_b_proj weight
    n, h, dn, dv = lat.c_kv.shape[0], cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.v_head_dim
    kv = (lat.c_kv @ lm.model.get_submodule(up).weight.T).view(n, h, dn + dv).transpose(0, 1)  # [h, n, dn + dv]
    assert (kv[..., :dn] - call.k[0, :, :, :dn]).abs().max() <= 1e-6
    assert (kv[..., dn:] - call.v[0]).abs().max() <= 1e-6
    assert (lat.k_rope - call.k[0, :, :, dn:]).abs().max() == 0.0  # one rotary key part, shared by every head
    assert not torch.allclose(lat.k_rope, lat.k_rope_pre)  # rotated: the recorded part before rotation differs
    # the trace of this layer is the model's: output_attentions and W^O's output
    t = dataclasses.replace(road.layer_trace(lm, rec, "decoder", layer, Config()), latent=lat)
    assert (t.pattern - own["attn"]).abs().max() <= 1e-5
    assert (t.output - own["wo"]).abs().max() <= 1e-5


def test_step_by_step_shows_the_latent_with_its_shapes_and_cache(loaded) -> None:
    lm, rec = loaded
    cfg = lm.model.config
    call = road.layer_call(lm, rec, "decoder", 1)
    t = dataclasses.replace(road.layer_trace(lm, rec, "decoder", 1, Config()),
                            latent=latent_of(lm.model, lm.site("decoder", 1).latent[0], call))  # fmt: skip
    n = len(rec.tokens.ids)
    steps = {s.title.split(":")[0].split(" = ")[0] if s.number == 2 else s.title: s for s in head_steps(t, 3)}
    d_c, d_rope, dn, dv = cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.qk_nope_head_dim, cfg.v_head_dim
    want = {"c_KV": (n, d_c), "k_rope": (n, d_rope), "K_3's no-rope part": (n, dn), "K_3": (n, dn + d_rope),
            "V_3": (n, dv)}  # fmt: skip
    for name, shape in want.items():
        assert name in steps, list(steps)
        assert steps[name].z.shape == shape and steps[name].shape == f"[{shape[0]} × {shape[1]}]"
    torch.testing.assert_close(torch.from_numpy(steps["c_KV"].z), t.latent.c_kv)
    cache = latent_cache(t)
    h = cfg.num_attention_heads
    mha = h * (dn + d_rope + dv)
    assert f"= {d_c + d_rope} numbers" in cache and f"= {mha} for" in cache
    assert f"{mha / (d_c + d_rope):.3g}× fewer" in cache


def test_road_trace_carries_the_latent(loaded) -> None:
    """The road's own trace (what Step by step opens) carries the latent: needs layer_trace to set it."""
    lm, rec = loaded
    t = road.layer_trace(lm, rec, "decoder", 0, Config())
    assert t.latent is not None and t.latent.c_kv.shape == (len(rec.tokens.ids), lm.model.config.kv_lora_rank)


def test_other_layers_have_no_latent(tmp_path_factory) -> None:
    lm = road.load(Config(model=_zoo_dir(tmp_path_factory, "llama")))
    rec = road.record(lm, TEXT)
    assert all(s.latent == ("", "", 0) for s in lm.sites)
    t = road.layer_trace(lm, rec, "decoder", 0, Config())
    assert t.latent is None and latent_cache(t) == ""
    assert not any("c_KV" in s.title for s in head_steps(t, 0))
