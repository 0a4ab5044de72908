"""The engine's cache memory: its manager, the layers' caches, the blocks and the prefix cache over them.

- :mod:`~pyagent_engine.kv.manager`: the KV manager, the only code that allocates, moves or frees
  cache memory (checked against free memory by :mod:`~pyagent_engine.kv.memory`).
- :mod:`~pyagent_engine.kv.layer_caches`: every layer's cache as the model's cache layout declares it
  (paged keys and values, latent rows, recurrent states), and the blocks and state slots one memory
  budget buys for them.
- :mod:`~pyagent_engine.kv.block_pool`: free block ids, handed out and taken back.
- :mod:`~pyagent_engine.kv.prefix_cache`: a block pool whose full blocks are shared by chained hash
  (:mod:`~pyagent_engine.kv.block_hash`), indexed leaves first (:mod:`~pyagent_engine.kv.prefix_index`),
  with a host-memory tier below (:mod:`~pyagent_engine.kv.offload`).
"""
