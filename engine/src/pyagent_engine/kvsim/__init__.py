"""KV-cache modelling: block-hash traces replayed through the engine's prefix index
(:class:`~pyagent_engine.kvsim.replay.TraceCache`) under an eviction policy or Belady's MIN, and a
simulator that compares them."""
