"""The ``paged`` attention backend for pyagent: C kernels over the paged KV cache.

Importing this package is cheap: the backend (and torch) load only when it is selected.
"""
