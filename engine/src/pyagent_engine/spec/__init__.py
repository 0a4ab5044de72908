"""Speculative decoding in the engine: drafts from the selected proposer, verified by the sampling stage.

- :mod:`~pyagent_engine.spec.config`: the settings (proposer, options, draft length, adaptive or not).
- :mod:`~pyagent_engine.spec.decoder`: drafting, verification shared by every proposer, committing
  accepted nodes.
- :mod:`~pyagent_engine.spec.controller`: adaptive draft length per request.
- :mod:`~pyagent_engine.spec.plan`: the step-cost curve and the choice of nodes that maximises throughput.
- :mod:`~pyagent_engine.spec.tree`: draft-tree helpers (validity, sub-trees, tree mask, positions, the walk).
"""
