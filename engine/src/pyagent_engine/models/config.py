"""Model settings of the engine (a model's hyper-parameters are
:class:`pyagent_core.interfaces.model.ModelConfig`, read by its architecture's plugin)."""

from __future__ import annotations

from pyagent_core.config import Settings
from pyagent_core.errors import ConfigError
from pyagent_core.interfaces.model import PRECISIONS

#: The working dtype when none is given: with quantized weights the faster on CPU (the linear kernel
#: decodes blocks into float32 for free, while bfloat16 must also round every decoded weight).
DEFAULT_DTYPE = "float32"

#: How products with a GGUF's block-quantized matrices run when nothing says otherwise: llama.cpp's
#: way, int8-quantized activations times the blocks in integers (the faster; within quantization noise
#: of "exact", which gives the dequantized model's bits).
DEFAULT_PRECISION = "int8"
#: The environment variable that chooses the precision (below ``--precision`` and ``LLM(precision=)``).
PRECISION_ENV = "PYAGENT_PRECISION"


def resolve_precision(precision: str | None = None, settings: Settings | None = None) -> str:
    """The precision products with quantized matrices run at: ``precision`` when given, else
    ``$PYAGENT_PRECISION``, else ``precision`` in the ``[engine]`` table of ``pyagent.toml`` or the user
    config, else :data:`DEFAULT_PRECISION`.

    Raises:
        ConfigError: a value that is not one of :data:`~pyagent_core.interfaces.model.PRECISIONS`,
            naming where it came from.
    """
    if precision is not None:
        value, source = precision, "the precision argument (--precision)"
    else:
        found = (settings or Settings.load()).engine_setting("precision", PRECISION_ENV)
        if found is None:
            return DEFAULT_PRECISION
        value, source = found
    if value not in PRECISIONS:
        raise ConfigError(f"precision {value!r} from {source} is not one of {', '.join(PRECISIONS)}: int8 multiplies "
                          "int8-quantized activations with a GGUF's blocks (the faster), exact gives the dequantized "
                          "model's bits")
    return str(value)
