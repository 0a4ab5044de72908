"""llama.cpp's samplers for pyagent, batched over rows with per-request parameters and state: DRY
(repetition of sequences), XTC (exclude top choices) and mirostat v1 and v2 (target surprise).

Importing this package is cheap: the implementations (and torch) load only when a sampler is selected.
"""
