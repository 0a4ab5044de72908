"""The shape of a Llama-family model, and its round trip through a Hugging Face ``config.json``."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import attrs

from pyagent_core.errors import ModelFormatError, UnsupportedModelError

#: The working dtype when none is given: with quantized weights the faster on CPU (the linear kernel
#: decodes blocks into float32 for free, while bfloat16 must also round every decoded weight).
DEFAULT_DTYPE = "float32"


#: Architectures the forward in :mod:`pyagent_engine.models.llama` runs (GGUF ``general.architecture``
#: and Hugging Face ``model_type`` use the same name).
SUPPORTED_ARCHITECTURES = ("llama",)


def check_architecture(architecture: str, where: str) -> None:
    """Raise :class:`UnsupportedModelError` naming ``architecture`` unless pyagent runs it."""
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedModelError(
            f"{where} is a {architecture!r} model; pyagent runs these architectures: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}"
        )


T = TypeVar("T", int, float, bool)

_EXPECTED = {int: "an integer", float: "a finite number", bool: "true or false"}


def checked(value: Any, kind: type[T], key: str, where: str, *, positive: bool = False) -> T:
    """``value`` (the model file's ``key``) when it is a ``kind``; else :class:`ModelFormatError` naming
    ``where`` (the file), the key, what was expected and the value found. Integers stand for floats."""
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and positive:
        ok = value > 0
    if not ok:
        expected = ("a positive " + _EXPECTED[kind].removeprefix("an ").removeprefix("a ")) if positive \
            else _EXPECTED[kind]
        shown = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
        raise ModelFormatError(f"{where}: {key} must be {expected}, got {shown}")
    return kind(value)


def token_ids(value: Any, key: str, where: str) -> tuple[int, ...]:
    """The ids of ``value``: one token id, a list of them, or null (none); else :class:`ModelFormatError`."""
    values = value if isinstance(value, list) else [] if value is None else [value]
    return tuple(checked(v, int, key, where) for v in values)


def _windows(windows: Iterable[int | None]) -> tuple[int | None, ...]:
    return tuple(windows)


@attrs.frozen
class ModelConfig:
    """Hyper-parameters of a Llama-family decoder.

    Attributes:
        architecture: ``"llama"``.
        vocab_size: rows of the embedding and of the output head.
        hidden_size: width of the residual stream.
        intermediate_size: width of the SwiGLU MLP.
        num_layers: number of decoder layers.
        num_heads: query heads per layer.
        num_kv_heads: key/value heads per layer (grouped-query attention when fewer than ``num_heads``).
        head_dim: size of each attention head.
        rope_theta: base of the rotary position embedding frequencies.
        rms_norm_eps: epsilon of every RMSNorm.
        max_position_embeddings: the context length the model was trained for.
        tie_word_embeddings: whether the output head reuses the embedding matrix.
        bos_token_id: beginning-of-sequence token, if the model has one.
        eos_token_ids: tokens that end generation (one or several).
        name: human-readable model name.
        sliding_windows: each layer's sliding attention window (``None``: that layer sees every
            earlier position); empty: no layer has one. The attention backend applies them.
        attn_logit_softcapping: the cap ``c`` of the attention scores (``c * tanh(score / c)``),
            or ``None``.
    """

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    name: str
    sliding_windows: tuple[int | None, ...] = attrs.field(default=(), converter=_windows)
    attn_logit_softcapping: float | None = None

    def __attrs_post_init__(self) -> None:
        for field in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                      "num_kv_heads", "head_dim", "max_position_embeddings"):
            value = getattr(self, field)
            if not isinstance(value, int) or value <= 0:
                raise ModelFormatError(f"model config {self.name!r}: {field} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ModelFormatError(
                f"model config {self.name!r}: num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.sliding_windows and len(self.sliding_windows) != self.num_layers:
            raise ModelFormatError(f"model config {self.name!r}: sliding_windows has {len(self.sliding_windows)} "
                                   f"entries for {self.num_layers} layers; give one per layer (None: no window)")
        for token in (self.bos_token_id, *self.eos_token_ids):
            if token is not None and not 0 <= token < self.vocab_size:
                raise ModelFormatError(
                    f"model config {self.name!r}: special token id {token} is outside the vocabulary "
                    f"(size {self.vocab_size})"
                )

    @property
    def attention_scale(self) -> float:
        """The factor on ``q @ k.T`` that attention backends are constructed with."""
        return float(self.head_dim**-0.5)

    @classmethod
    def from_hf_dict(cls, data: Mapping[str, Any], name: str, where: str | None = None) -> ModelConfig:
        """Read a Hugging Face ``config.json`` of a Llama-family model (``where``: its path, for messages).

        Raises :class:`UnsupportedModelError` for another architecture or a rope scaling pyagent
        does not implement, :class:`ModelFormatError` naming the file and the key when a required key
        is missing or a value has the wrong type.
        """
        where = where or f"config.json of {name!r}"
        check_architecture(str(data.get("model_type")), where)
        rope = data.get("rope_parameters") or data.get("rope_scaling") or {}
        if not isinstance(rope, dict):
            raise ModelFormatError(f"{where}: rope_scaling must be an object or null, got {json.dumps(rope)}")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise UnsupportedModelError(
                f"{where} asks for rope scaling {rope_type!r}; pyagent implements plain RoPE only")

        def value(key: str, kind: type[T], default: Any = None, positive: bool = False) -> T:
            found = data.get(key)
            if found is None and default is None:
                if key not in data:
                    raise ModelFormatError(f"{where} lacks the required key {key!r}")
            return checked(default if found is None else found, kind, key, where or "", positive=positive)

        hidden, heads = value("hidden_size", int, positive=True), value("num_attention_heads", int, positive=True)
        bos = data.get("bos_token_id")
        return cls(
            architecture=str(data["model_type"]),
            vocab_size=value("vocab_size", int, positive=True),
            hidden_size=hidden,
            intermediate_size=value("intermediate_size", int, positive=True),
            num_layers=value("num_hidden_layers", int, positive=True),
            num_heads=heads,
            num_kv_heads=value("num_key_value_heads", int, heads, positive=True),
            head_dim=value("head_dim", int, hidden // heads, positive=True),
            rope_theta=checked(rope.get("rope_theta", data.get("rope_theta", 10000.0)), float, "rope_theta", where),
            rms_norm_eps=value("rms_norm_eps", float, 1e-6),
            max_position_embeddings=value("max_position_embeddings", int, positive=True),
            tie_word_embeddings=value("tie_word_embeddings", bool, False),
            bos_token_id=None if bos is None else checked(bos, int, "bos_token_id", where),
            eos_token_ids=token_ids(data.get("eos_token_id"), "eos_token_id", where),
            name=str(data.get("_name_or_path") or name),
        )

    def to_hf_dict(self) -> dict[str, Any]:
        """This config as a Hugging Face ``config.json`` (``LlamaForCausalLM``), float32 weights."""
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": self.architecture,
            "_name_or_path": self.name,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_ids),
            "attention_bias": False,
            "mlp_bias": False,
            "torch_dtype": "float32",
        }
