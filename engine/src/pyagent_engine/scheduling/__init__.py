"""Scheduling: which requests run each step, within the token budget and the KV blocks.

- :mod:`~pyagent_engine.scheduling.scheduler`: the scheduler (admission, chunked prefill, block
  allocation, preemption by recompute).
- :mod:`~pyagent_engine.scheduling.policy`: the selected scheduling policy plugin (waiting-queue
  order, preemption victim), guarded so that a failing policy never stops the engine.
"""
