"""Model settings of the engine (a model's hyper-parameters are
:class:`pyagent_core.interfaces.model.ModelConfig`, read by its architecture's plugin)."""

from __future__ import annotations

#: The working dtype when none is given: with quantized weights the faster on CPU (the linear kernel
#: decodes blocks into float32 for free, while bfloat16 must also round every decoded weight).
DEFAULT_DTYPE = "float32"
