"""Hosted mode never reads a local path (issue 21 §2.7), even a folder named like an allowed model in the
working directory: what reaches transformers' from_pretrained is the hub model's folder in the Hugging Face
cache. No network: the hub is stubbed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mha_viz.models import load as load_module
from mha_viz.models import sources
from mha_viz.trace import MhaVizError


@pytest.fixture
def decoy(tmp_path: Path, monkeypatch) -> Path:
    """A working directory holding a folder named like an allowed model, with a config.json."""
    folder = tmp_path / "cwd" / "gpt2"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("MHA_VIZ_HOSTED", "1")
    monkeypatch.delenv("MHA_VIZ_ALLOWED_MODELS", raising=False)
    monkeypatch.setattr(load_module, "hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(sources, "hub_reachable", lambda timeout=3.0: False)
    return folder


@pytest.fixture
def fake_hub(tmp_path: Path, monkeypatch) -> list[tuple]:
    """snapshot_download stubbed: records its calls and answers with a folder in a fake cache."""
    import huggingface_hub

    calls: list[tuple] = []
    cache = tmp_path / "hf-cache" / "models--gpt2" / "snapshots" / "abc"
    cache.mkdir(parents=True)

    def snapshot_download(repo_id: str, **kw: object) -> str:
        calls.append((repo_id, kw))
        return str(cache)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return calls


def test_hosted_resolve_gives_the_hub_model_not_the_local_folder(decoy: Path, fake_hub: list[tuple]) -> None:
    assert Path("gpt2").is_dir()  # the decoy is there, relative to the working directory
    src, bundled = sources.resolve("gpt2")
    assert not bundled
    assert fake_hub and fake_hub[0][0] == "gpt2" and fake_hub[0][1]["local_files_only"] is True
    assert Path(src).is_absolute() and Path(src).name == "abc" and "hf-cache" in src
    assert Path(src).resolve() != decoy.resolve() and decoy.resolve() not in Path(src).resolve().parents


def test_hosted_load_passes_only_the_cache_folder_to_from_pretrained(decoy, fake_hub, monkeypatch) -> None:
    import transformers

    seen: list[object] = []

    def from_pretrained(src: object, **kw: object) -> None:
        seen.append(src)
        raise OSError("stop here")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", from_pretrained)
    with pytest.raises(MhaVizError, match="could not load model 'gpt2'"):
        load_module.load_model("gpt2")
    assert len(seen) == 1 and Path(str(seen[0])).is_absolute() and "hf-cache" in str(seen[0])
    assert Path(str(seen[0])).resolve() != decoy.resolve()


def test_hosted_offline_without_a_cached_copy_is_a_message_never_the_folder(decoy, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(decoy.parent.parent / "empty-cache"))
    import huggingface_hub

    def snapshot_download(repo_id: str, **kw: object) -> str:
        raise huggingface_hub.errors.LocalEntryNotFoundError("not cached")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(MhaVizError, match="no network, and it is not in the local cache"):
        sources.resolve("gpt2")


def test_hosted_refuses_a_path_even_when_it_is_allowed(decoy, fake_hub, monkeypatch) -> None:
    monkeypatch.setenv("MHA_VIZ_ALLOWED_MODELS", "gpt2,./gpt2")
    with pytest.raises(MhaVizError, match="not a Hugging Face model id"):
        sources.resolve("./gpt2")
    assert not fake_hub


def test_local_mode_still_reads_a_folder(decoy, monkeypatch) -> None:
    monkeypatch.delenv("MHA_VIZ_HOSTED")
    assert sources.resolve("gpt2") == ("gpt2", False)
