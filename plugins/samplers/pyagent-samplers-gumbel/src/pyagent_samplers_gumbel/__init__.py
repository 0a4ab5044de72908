"""Gumbel-max token selection for pyagent with per-request, counter-based noise.

Importing this package is cheap: the implementation (and torch) load only when the sampler is selected.
"""
