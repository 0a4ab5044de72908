"""Reference samplers for pyagent: batched torch temperature, top-k and top-p processors, and the
greedy and seeded multinomial token selectors.

Importing this package is cheap: the implementations (and torch) load only when a sampler is selected.
"""
