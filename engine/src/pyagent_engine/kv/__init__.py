"""The paged KV cache: its tensors, its blocks and the prefix cache over them.

- :mod:`~pyagent_engine.kv.cache_tensors`: one paged cache tensor per layer, checked against
  free memory (:mod:`~pyagent_engine.kv.memory`).
- :mod:`~pyagent_engine.kv.block_pool`: free block ids, handed out and taken back.
- :mod:`~pyagent_engine.kv.prefix_cache`: a block pool whose full blocks are shared by chained hash
  (:mod:`~pyagent_engine.kv.block_hash`), indexed leaves first (:mod:`~pyagent_engine.kv.prefix_index`),
  with a host-memory tier below (:mod:`~pyagent_engine.kv.offload`).
"""
