"""Listed architectures at their edges (issue 23): MobileBERT's `--full` (Q and K read a bottleneck, V the hidden
state), and encoders whose attention bypasses the interface, refused in one line instead of "has no encoder
self-attention" with the decoder traced by default."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import _zoo_dir
from mha_viz.cli.main import main
from mha_viz.models.load import load_model, prepare
from mha_viz.trace import MhaVizError


def test_mobilebert_full_trace_is_not_rebuilt_from_one_x(tmp_path_factory, tmp_path, capsys) -> None:
    folder = _zoo_dir(tmp_path_factory, "mobilebert")
    lm = load_model(folder, "cpu")
    assert all(not s.qkv for s in lm.sites)  # not "plain": its Q, K and V do not read one X
    out = tmp_path / "mb.npz"
    code = main(["trace", "--model", folder, "--text", "the animal was tired", "--layer", "0", "--full",
                 "--out", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    data = np.load(out)
    assert "W_Q" not in data and data["pattern"].shape[-1] == data["k"].shape[-2]
    np.testing.assert_allclose(data["pattern"].sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("model_type", ["longt5", "pegasus_x"])
def test_encoder_outside_the_interface_is_refused_in_one_line(model_type: str) -> None:
    import transformers

    config = transformers.AutoConfig.for_model(
        model_type, vocab_size=320, d_model=64, num_layers=2, num_heads=4, d_kv=16, d_ff=96, encoder_layers=2,
        decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=96,
        decoder_ffn_dim=96, pad_token_id=0, eos_token_id=2, decoder_start_token_id=0,
    )  # fmt: skip
    model = transformers.AutoModelForSeq2SeqLM.from_config(config, attn_implementation="eager").eval()
    with pytest.raises(MhaVizError, match="encoder attention does not go through") as err:
        prepare(model, None, model_type)
    assert "\n" not in str(err.value)
