"""Repetition, frequency and presence penalties for pyagent, batched, from token counts kept per request.

Importing this package is cheap: the implementation (and torch) load only when the sampler is selected.
"""
