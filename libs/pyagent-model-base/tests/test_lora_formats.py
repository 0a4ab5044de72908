"""LoRA adapter files on a tiny Llama-shaped decoder: PEFT folders as peft saves them, llama.cpp LoRA
GGUFs in its converter's layout (written and read back, the q/k rows permuted as its converter
permutes them), random adapters round-tripping through both formats, and one clear error for each
malformed, mismatched or unsupported adapter."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from pyagent_core.errors import LoRAAdapterError
from pyagent_core.interfaces.lora import LoRAAdapter, LoRASettings, LoRAWeight
from pyagent_core.interfaces.model import ModelConfig, ModelContext
from pyagent_core.testing.model import random_weights
from pyagent_model_base.decoder import DecoderLM
from pyagent_model_base.lora.gguf_adapter import write_gguf_adapter

TINY = {"architectures": ["TinyForCausalLM"], "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
        "tie_word_embeddings": False}
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class Tiny(DecoderLM):
    """Llama's layers and GGUF names, q/k rows permuted in GGUF files as llama.cpp's converter does."""

    hf_architecture = "TinyForCausalLM"
    model_type = "llama"
    gguf_arch = gguf.MODEL_ARCH.LLAMA
    gguf_permutes_qk = True


@pytest.fixture(scope="module")
def config() -> ModelConfig:
    return Tiny.config_from_hf(TINY, "tiny", "tiny/config.json")


def gguf_layout(config: ModelConfig) -> dict[str, Any]:
    return {"gguf_arch": "llama", "gguf_names": Tiny.gguf_tensor_names(config),
            "permuted_heads": Tiny.gguf_permuted_heads(config)}


def llama_cpp_permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute, as llama.cpp writes it."""
    return weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(
        weights.shape)


def write_peft(folder: Path, tensors: dict[str, torch.Tensor], **config: Any) -> Path:
    """A PEFT folder with ``tensors`` and an adapter_config.json of ``config`` over plain LoRA defaults."""
    folder.mkdir(parents=True, exist_ok=True)
    settings_ = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "bias": "none",
                 "use_rslora": False, "modules_to_save": None, "use_dora": False, **config}
    (folder / "adapter_config.json").write_text(json.dumps(settings_), encoding="utf-8")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "adapter_model.safetensors"))
    return folder


def pair(module: str, rank: int, out: int, inp: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {f"base_model.model.{module}.lora_A.weight": torch.randn(rank, inp, generator=gen),
            f"base_model.model.{module}.lora_B.weight": torch.randn(out, rank, generator=gen)}


def test_peft_saves_what_read_lora_reads(tmp_path: Path, config: ModelConfig) -> None:
    """A tiny transformers Llama with peft's own rank-4 and rsLoRA rank-6 adapters, saved by peft."""
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    data = {**Tiny.hf_config(config), "model_type": "llama"}
    hf = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(
        data.pop("model_type"), **{k: v for k, v in data.items() if k not in ("architectures", "_name_or_path")}))
    model = peft.get_peft_model(hf, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"]))
    model.add_adapter("rs", peft.LoraConfig(r=6, lora_alpha=3, target_modules=list(TARGETS), use_rslora=True))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.normal_()
    model.save_pretrained(tmp_path)
    plain, rs = Tiny.read_lora(tmp_path, config), Tiny.read_lora(tmp_path / "rs", config, name="rs")
    assert (plain.name, plain.format, rs.name) == (tmp_path.name, "peft", "rs")
    assert sorted(plain.weights) == sorted(f"model.layers.{i}.{m}.weight" for i in range(2)
                                           for m in ("self_attn.q_proj", "mlp.down_proj"))
    assert len(rs.weights) == 2 * len(TARGETS) and rs.rank == 6
    layer = model.base_model.model.model.layers[1].self_attn.q_proj
    weight = plain.weights["model.layers.1.self_attn.q_proj.weight"]
    assert torch.equal(weight.a, layer.lora_A["default"].weight)
    assert torch.equal(weight.b, layer.lora_B["default"].weight)
    assert weight.scale == layer.scaling["default"] == 2.0
    assert rs.weights["model.layers.0.mlp.up_proj.weight"].scale == pytest.approx(3 / math.sqrt(6))


def test_a_gguf_adapter_is_written_in_llama_cpps_layout_and_read_back(tmp_path: Path, config: ModelConfig) -> None:
    adapter = Tiny.read_lora(write_peft(tmp_path / "peft", pair("model.layers.1.self_attn.q_proj", 4, 32, 32)
                                        | pair("model.layers.0.self_attn.k_proj", 4, 16, 32, 1)
                                        | pair("model.layers.0.mlp.gate_proj", 4, 48, 32, 2),
                                        target_modules=["q_proj", "k_proj", "gate_proj"]), config)
    path = tmp_path / "adapter.gguf"
    assert write_gguf_adapter(adapter, path, **gguf_layout(config)) == 8.0
    reader = gguf.GGUFReader(path)
    fields = {name: field.contents() for name, field in reader.fields.items()}
    assert fields["general.type"] == "adapter" and fields["adapter.type"] == "lora"
    assert fields["general.architecture"] == "llama" and fields["adapter.lora.alpha"] == 8.0
    tensors = {t.name: t for t in reader.tensors}
    assert sorted(tensors) == ["blk.0.attn_k.weight.lora_a", "blk.0.attn_k.weight.lora_b",
                               "blk.0.ffn_gate.weight.lora_a", "blk.0.ffn_gate.weight.lora_b",
                               "blk.1.attn_q.weight.lora_a", "blk.1.attn_q.weight.lora_b"]
    assert list(tensors["blk.1.attn_q.weight.lora_a"].shape) == [32, 4]  # GGUF dims: in x rank
    q = adapter.weights["model.layers.1.self_attn.q_proj.weight"]
    assert np.array_equal(tensors["blk.1.attn_q.weight.lora_b"].data, llama_cpp_permute(q.b.numpy(), 4))
    k = adapter.weights["model.layers.0.self_attn.k_proj.weight"]
    assert np.array_equal(tensors["blk.0.attn_k.weight.lora_b"].data, llama_cpp_permute(k.b.numpy(), 2))
    back = Tiny.read_lora(path, config)
    assert back.format == "gguf" and back.name == "adapter.gguf" and sorted(back.weights) == sorted(adapter.weights)
    for name, weight in adapter.weights.items():
        assert torch.equal(back.weights[name].a, weight.a) and torch.equal(back.weights[name].b, weight.b)
        assert back.weights[name].scale == weight.scale


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chosen=st.lists(st.sampled_from(TARGETS), min_size=1, unique=True), rank=st.integers(1, 8),
       alpha=st.floats(0.5, 64), rslora=st.booleans(), layer=st.integers(0, 1), seed=st.integers(0, 999))
def test_random_adapters_round_trip_through_both_formats(tmp_path_factory: pytest.TempPathFactory,
                                                         config: ModelConfig, chosen: list[str], rank: int,
                                                         alpha: float, rslora: bool, layer: int, seed: int) -> None:
    folder = tmp_path_factory.mktemp("random")
    shapes = Tiny.lora_targets(config)
    tensors: dict[str, torch.Tensor] = {}
    for index, module in enumerate(chosen):
        prefix = "self_attn" if module.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
        out, inp = shapes[f"model.layers.{layer}.{prefix}.{module}.weight"]
        tensors |= pair(f"model.layers.{layer}.{prefix}.{module}", rank, out, inp, seed + index)
    adapter = Tiny.read_lora(write_peft(folder / "peft", tensors, r=rank, lora_alpha=alpha, use_rslora=rslora,
                                        target_modules=chosen), config)
    expected_scale = alpha / (math.sqrt(rank) if rslora else rank)
    assert len(adapter.weights) == len(chosen)
    assert all(math.isclose(w.scale, expected_scale, rel_tol=1e-12) for w in adapter.weights.values())
    write_gguf_adapter(adapter, folder / "a.gguf", **gguf_layout(config))
    back = Tiny.read_lora(folder / "a.gguf", config)
    for name, weight in adapter.weights.items():
        assert torch.equal(back.weights[name].a, weight.a) and torch.equal(back.weights[name].b, weight.b)
        assert math.isclose(back.weights[name].scale, weight.scale, rel_tol=1e-6)  # alpha is stored as float32


Q = "model.layers.0.self_attn.q_proj"


@pytest.mark.parametrize(("tensors", "settings_", "message"), [
    (pair(Q, 4, 32, 32), {"use_dora": True}, "use_dora = true: DoRA"),
    (pair(Q, 4, 32, 32), {"modules_to_save": ["lm_head"]}, 'modules_to_save = ["lm_head"]: modules_to_save holds'),
    (pair(Q, 4, 32, 32), {"peft_type": "IA3"}, "peft_type is 'IA3'"),
    (pair(Q, 4, 32, 32), {"bias": "all"}, 'bias = "all": trained biases'),
    (pair(Q, 4, 32, 32), {"alpha_pattern": {"q_proj": 2}}, "per-module alpha"),
    (pair(Q, 4, 32, 32), {"init_lora_weights": "mica"}, "MiCA"),
    (pair(Q, 4, 32, 32), {"lora_alpha": "8"}, 'lora_alpha must be a positive number, got "8"'),
    (pair(Q, 4, 32, 32), {"r": 8}, "has rank 4, but adapter_config.json says r = 8"),
    (pair("lm_head", 4, 64, 32), {}, "adapts 'lm_head', which the tiny model does not have or pyagent does not adapt"),
    (pair("model.layers.5.self_attn.q_proj", 4, 32, 32), {}, "adapts layer 5, but the model has 2 layers"),
    (pair(Q, 4, 32, 48), {}, "maps 48 inputs to 32 outputs, but model.layers.0.self_attn.q_proj.weight of this model "
                             "maps 32 to 32 (hidden size 32)"),
    ({f"base_model.model.{Q}.lora_A.weight": torch.ones(4, 32),
      f"base_model.model.{Q}.lora_B.weight": torch.ones(32, 3)}, {}, "the same rank; got A [4, 32] and B [32, 3]"),
    ({f"base_model.model.{Q}.lora_A.weight": torch.ones(4, 32)}, {}, "lacks its lora_B.weight tensor"),
    (pair(Q, 4, 32, 32) | {f"base_model.model.{Q}.lora_magnitude_vector": torch.ones(32)}, {},
     "is a DoRA magnitude vector"),
    (pair(Q, 4, 32, 32) | {"base_model.model.lm_head.weight": torch.ones(64, 32)}, {}, "is not a LoRA A/B matrix"),
    ({k: v * float("nan") for k, v in pair(Q, 4, 32, 32).items()}, {}, "holds NaN or infinite values"),
], ids=["dora", "modules-to-save", "ia3", "bias", "alpha-pattern", "mica", "alpha-type", "rank", "lm-head",
        "layer", "hidden-size", "ranks-differ", "half-pair", "magnitude", "stray-tensor", "nan"])
def test_each_bad_peft_adapter_is_one_clear_error(tmp_path: Path, config: ModelConfig, tensors: dict[str, torch.Tensor],
                                                  settings_: dict[str, Any], message: str) -> None:
    folder = write_peft(tmp_path / "adapter", tensors, **settings_)
    with pytest.raises(LoRAAdapterError, match=re.escape(message)) as caught:
        Tiny.read_lora(folder, config)
    assert str(folder) in str(caught.value)


def test_missing_files_and_paths_are_named(tmp_path: Path, config: ModelConfig) -> None:
    with pytest.raises(LoRAAdapterError, match="does not exist; pass a PEFT adapter folder"):
        Tiny.read_lora(tmp_path / "nowhere", config)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(LoRAAdapterError, match="is neither a folder nor a GGUF file"):
        Tiny.read_lora(tmp_path / "notes.txt", config)
    with pytest.raises(LoRAAdapterError, match=re.escape("has no adapter_config.json; a PEFT adapter folder holds")):
        Tiny.read_lora(tmp_path, config)
    write_peft(tmp_path / "outer" / "mine", pair(Q, 4, 32, 32))
    with pytest.raises(LoRAAdapterError, match="holds adapters in the subfolders mine: pass one of them"):
        Tiny.read_lora(tmp_path / "outer", config)
    folder = write_peft(tmp_path / "pickled", pair(Q, 4, 32, 32))
    (folder / "adapter_model.safetensors").rename(folder / "adapter_model.bin")
    with pytest.raises(LoRAAdapterError, match="pickled weights pyagent does not unpickle"):
        Tiny.read_lora(folder, config)
    (folder / "adapter_model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(LoRAAdapterError, match="is not a readable safetensors file"):
        Tiny.read_lora(folder, config)


def write_gguf(path: Path, tensors: dict[str, np.ndarray], *, kind: str = "adapter", arch: str = "llama",
               adapter_type: str = "lora", alpha: float | None = 8.0) -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_type(kind)
    writer.add_string("adapter.type", adapter_type)
    if alpha is not None:
        writer.add_float32("adapter.lora.alpha", alpha)
    for name, values in tensors.items():
        writer.add_tensor(name, values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def gguf_pair(base: str, rank: int, out: int, inp: int) -> dict[str, np.ndarray]:
    return {f"{base}.lora_a": np.ones((rank, inp), np.float32), f"{base}.lora_b": np.ones((out, rank), np.float32)}


@pytest.mark.parametrize(("tensors", "metadata", "message"), [
    (gguf_pair("blk.0.attn_q.weight", 4, 32, 32), {"kind": "model"}, "is a model, not an adapter"),
    (gguf_pair("blk.0.attn_q.weight", 4, 32, 32), {"arch": "qwen2"}, "is an adapter for 'qwen2' models, but the model "
                                                                       "is 'llama'"),
    (gguf_pair("blk.0.attn_q.weight", 4, 32, 32), {"adapter_type": "cvec"}, "adapter.type is 'cvec'"),
    (gguf_pair("blk.0.attn_q.weight", 4, 32, 32) | {"blk.0.attn_norm.weight": np.ones(32, np.float32)}, {},
     "is a norm weight"),
    ({"blk.0.attn_q.weight.lora_a": np.ones((4, 32), np.float32)}, {}, "blk.0.attn_q.weight.lora_b is missing"),
    (gguf_pair("blk.7.attn_q.weight", 4, 32, 32), {}, "adapts layer 7, but the model has 2 layers"),
    (gguf_pair("token_embd.weight", 4, 32, 64), {}, "adapts 'model.embed_tokens'"),
    (gguf_pair("blk.0.attn_q.weight", 4, 32, 16), {}, "maps 16 inputs to 32 outputs"),
], ids=["model", "arch", "cvec", "norm", "half-pair", "layer", "embedding", "hidden-size"])
def test_each_bad_gguf_adapter_is_one_clear_error(tmp_path: Path, config: ModelConfig,
                                                  tensors: dict[str, np.ndarray], metadata: dict[str, Any],
                                                  message: str) -> None:
    path = write_gguf(tmp_path / "bad.gguf", tensors, **metadata)
    with pytest.raises(LoRAAdapterError, match=re.escape(message)) as caught:
        Tiny.read_lora(path, config)
    assert str(path) in str(caught.value)


def test_a_truncated_gguf_adapter_is_named(tmp_path: Path, config: ModelConfig) -> None:
    path = write_gguf(tmp_path / "cut.gguf", gguf_pair("blk.0.attn_q.weight", 4, 32, 32))
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(LoRAAdapterError, match=re.escape(f"{path} is a truncated")):
        Tiny.read_lora(path, config)


def test_llama_cpps_scale_rule_without_alpha(tmp_path: Path, config: ModelConfig) -> None:
    """llama.cpp scales by alpha / rank, and by 1 when the file has no alpha."""
    for alpha, scale in ((None, 1.0), (6.0, 1.5)):
        path = write_gguf(tmp_path / f"{alpha}.gguf", gguf_pair("blk.0.attn_q.weight", 4, 32, 32), alpha=alpha)
        assert Tiny.read_lora(path, config).weights[f"{Q}.weight"].scale == scale


def test_writing_an_adapter_whose_weights_need_different_alphas_is_refused(tmp_path: Path,
                                                                           config: ModelConfig) -> None:
    weights = {f"{Q}.weight": LoRAWeight(torch.ones(4, 32), torch.ones(32, 4), 2.0),
               "model.layers.0.self_attn.v_proj.weight": LoRAWeight(torch.ones(2, 32), torch.ones(16, 2), 2.0)}
    adapter = LoRAAdapter(name="mixed", source="-", format="peft", weights=weights)
    with pytest.raises(LoRAAdapterError, match=r"scale \* rank differ \(\[4\.0, 8\.0\]\)"):
        write_gguf_adapter(adapter, tmp_path / "x.gguf", **gguf_layout(config))


def test_slots_refuse_a_rank_above_the_limit_and_adapters_of_another_shape(config: ModelConfig) -> None:
    model = Tiny({}, ModelContext(config=config, weights=random_weights(Tiny.weight_shapes(config))))
    with pytest.raises(LoRAAdapterError, match="LoRA is not enabled on this model"):
        model.load_lora(0, LoRAAdapter(name="x", source="-", format="peft", weights={}))
    model.enable_lora(LoRASettings(max_loras=2, max_lora_rank=4))
    big = LoRAAdapter(name="big", source="-", format="peft",
                      weights={f"{Q}.weight": LoRAWeight(torch.ones(8, 32), torch.ones(32, 8), 1.0)})
    with pytest.raises(LoRAAdapterError, match="rank 8, above max_lora_rank = 4; raise max_lora_rank"):
        model.load_lora(0, big)
    odd = LoRAAdapter(name="odd", source="-", format="peft",
                      weights={f"{Q}.weight": LoRAWeight(torch.ones(4, 16), torch.ones(32, 4), 1.0)})
    with pytest.raises(LoRAAdapterError, match=r"A \[4, 16\] and B \[32, 4\], which do not fit"):
        model.load_lora(0, odd)
    with pytest.raises(LoRAAdapterError, match="outside \\[0, 2\\)"):
        model.unload_lora(2)


@pytest.mark.parametrize("kind", [gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16,
                                  gguf.GGMLQuantizationType.Q8_0], ids=lambda kind: kind.name)
def test_gguf_adapters_in_the_converters_other_types_read_their_decoded_values(
        tmp_path: Path, config: ModelConfig, kind: gguf.GGMLQuantizationType) -> None:
    """The converter's --outtype f16, bf16 and q8_0: the values read are the gguf package's decoding."""
    rng = np.random.default_rng(0)
    stored = {name: gguf.quants.quantize(rng.standard_normal((32, 32)).astype(np.float32), kind)
              for name in ("blk.0.attn_output.weight.lora_a", "blk.0.attn_output.weight.lora_b")}
    writer = gguf.GGUFWriter(str(tmp_path / "typed.gguf"), "llama")
    writer.add_type("adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", 64.0)
    for name, values in stored.items():
        writer.add_tensor(name, values, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    weight = Tiny.read_lora(tmp_path / "typed.gguf", config).weights["model.layers.0.self_attn.o_proj.weight"]
    decoded = {name: torch.from_numpy(gguf.quants.dequantize(values, kind).reshape(32, 32))
               for name, values in stored.items()}
    assert weight.scale == 2.0
    assert torch.equal(weight.a, decoded["blk.0.attn_output.weight.lora_a"])
    assert torch.equal(weight.b, decoded["blk.0.attn_output.weight.lora_b"])
