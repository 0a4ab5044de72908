"""pyagent-transformers: pyagent's logits processors inside Hugging Face transformers' ``generate()``.

See :class:`pyagent_transformers.logits_processor.PyagentLogitsProcessor`.
"""
