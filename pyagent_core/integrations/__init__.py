"""Adapters that take pyagent components into other libraries (e.g. Hugging Face transformers)."""
