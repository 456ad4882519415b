"""A query row whose keys are all masked (issue 35 §1.1): drawn as the model computes it, and checked.

transformers' eager attention adds the dtype's minimum to every masked score; a row with every key masked then has
equal scores and spreads evenly over every key (T5Gemma's decoder row 0 when the decoder starts with the pad id it
masks). mha-viz drew such a row as zeros and its self-check skipped it, so the W^O output was silently wrong.
"""

from __future__ import annotations

import numpy as np
import torch

from conftest import _tiny_tokenizer
from mha_viz.attention import attend, attention_pattern
from mha_viz.cli.main import main
from mha_viz.models.call import Call
from mha_viz.models.load import load_model
from mha_viz.models.self_check import self_check
from mha_viz.pipeline.road import encode


def _eager_llama(h: int = 4, kv: int = 2, dh: int = 8):
    """A real LlamaAttention module and its modeling file's eager attention function."""
    import transformers
    from transformers.models.llama import modeling_llama

    cfg = transformers.LlamaConfig(hidden_size=h * dh, num_attention_heads=h, num_key_value_heads=kv, head_dim=dh)
    return modeling_llama.LlamaAttention(cfg, 0).eval(), modeling_llama.eager_attention_forward


def _masked_inputs(n: int = 5, h: int = 4, kv: int = 2, dh: int = 8):
    """q [1, h, n, dh], k, v [1, kv, n, dh] and a causal additive mask [1, 1, n, n] (the dtype's minimum where
    masked, as transformers builds it) whose key 0 is padding: query row 0 has every key masked."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, m, n, dh, generator=g) * 2 for m in (h, kv, kv))
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    allowed[:, 0] = False  # key 0 is padding
    mask = torch.zeros(n, n).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]
    return q, k, v, allowed, mask


def test_a_fully_masked_row_is_what_eager_attention_computes() -> None:
    module, eager = _eager_llama()
    q, k, v, allowed, mask = _masked_inputs()
    with torch.no_grad():
        out, weights = eager(module, q, k, v, mask, scaling=8**-0.5)  # [1, n, h, dh], [1, h, n, n]
    torch.testing.assert_close(weights[0, :, 0], torch.full((4, 5), 0.2))  # the model: even over every key
    _, pattern, dead = attention_pattern(q, k, scale=8**-0.5, allowed=allowed)
    assert dead.tolist() == [True, False, False, False, False]  # [q] (a mask of [q, k])
    torch.testing.assert_close(pattern, weights, atol=1e-6, rtol=0)  # every row, the fully masked one included
    parts = attend(q[0], k[0], v[0], None, scale=8**-0.5, allowed=allowed)
    torch.testing.assert_close(parts["z"].transpose(0, 1), out[0], atol=1e-6, rtol=0)  # what enters W^O
    assert parts["dead_rows"].tolist() == [True, False, False, False, False]


def test_the_self_check_compares_fully_masked_rows() -> None:
    module, eager = _eager_llama()
    q, k, v, allowed, mask = _masked_inputs()
    with torch.no_grad():
        _, weights = eager(module, q, k, v, mask, scaling=8**-0.5)
    call = Call(module_id=0, q=q, k=k, v=v, scaling=8**-0.5, softcap=None, bias=None, allowed=allowed[None, None],
                delta=0.0)  # fmt: skip
    assert self_check(call, weights) <= 1e-6
    zeroed = weights.clone()
    zeroed[..., 0, :] = 0.0  # what mha-viz drew before: a zero row where the model spreads evenly
    assert abs(self_check(call, zeroed) - 0.2) <= 1e-6  # the self-check sees the row: it is not skipped


def _t5gemma_dir(tmp_path_factory) -> str:
    """A tiny random T5Gemma saved with the tiny tokenizer, with no decoder_start_token_id: the decoder starts with
    the pad id, which T5Gemma masks from ``decoder_input_ids != pad``."""
    import transformers

    small = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 320, "max_position_embeddings": 128,
             "sliding_window": 4, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}  # fmt: skip
    cfg = transformers.T5GemmaConfig(encoder=small, decoder=small, vocab_size=320, pad_token_id=0, bos_token_id=1,
                                     eos_token_id=2)  # fmt: skip
    assert getattr(cfg, "decoder_start_token_id", None) is None
    torch.manual_seed(0)
    model = transformers.AutoModelForSeq2SeqLM.from_config(cfg, attn_implementation="eager").float().eval()
    folder = tmp_path_factory.mktemp("tiny-t5gemma")
    model.save_pretrained(folder)
    _tiny_tokenizer().save_pretrained(folder)
    return str(folder)


def test_t5gemma_decoder_row_zero_is_traced_as_the_model_computes_it(tmp_path_factory, tmp_path, capsys) -> None:
    import transformers

    folder = _t5gemma_dir(tmp_path_factory)
    text, target = "the animal was tired", "das Tier war"
    out = tmp_path / "dec.npz"
    for layer in (0, 1):
        code = main(["trace", "--model", folder, "--text", text, "--target", target, "--part", "decoder",
                     "--layer", str(layer), "--full", "--out", str(out)])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        data = np.load(out)
        lm = load_model(folder, "cpu")
        tokens, dec = encode(lm, text, target)
        assert dec.ids[0] == lm.model.config.decoder.pad_token_id  # the decoder starts with the pad id
        eager = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
        wo_out = []
        hook = eager.get_submodule(lm.site("decoder", layer).wo).register_forward_hook(
            lambda _m, _a, o, found=wo_out: found.append(o.detach())
        )
        with torch.no_grad():
            ref = eager(input_ids=torch.tensor([tokens.ids]), decoder_input_ids=torch.tensor([dec.ids]),
                        use_cache=False, output_attentions=True)  # fmt: skip
        hook.remove()
        theirs = ref.decoder_attentions[layer][0].numpy()  # [h, n, n]
        np.testing.assert_allclose(theirs[:, 0], 1.0 / len(dec.ids), atol=1e-7)  # row 0: masked, even in the model
        np.testing.assert_allclose(data["pattern"][0], theirs, atol=1e-5, rtol=0)
        np.testing.assert_allclose(data["output"], wo_out[0][0].numpy(), atol=1e-5, rtol=0)
