"""Model loading for the reference engine, and the Llama-family forward.

Import the submodules (they need torch; this package itself imports nothing): ``loader``
(``load_model``, the one entry point), ``llama`` (the forward and ``allocate_kv_caches``),
``tokenizer``, ``detokenizer`` and ``chat_template``; ``gguf_file``, ``checkpoint`` and
``conversion_cache`` read and write the formats.
"""
