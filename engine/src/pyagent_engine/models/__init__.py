"""Model loading for the reference engine; the forwards themselves are model plugins.

Import the submodules (they need torch; this package itself imports nothing): ``loader``
(``load_model``, the one entry point), ``architectures`` (the model plugin serving a file, through
the registry), ``tokenizer``, ``detokenizer`` and ``chat_template``;
``gguf_file``, ``checkpoint`` and ``conversion_cache`` read and write the formats.
"""
