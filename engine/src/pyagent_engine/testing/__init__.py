"""Test helpers that need the engine: the grammar kit over JSONSchemaBench with the embedded model's tokenizer."""
