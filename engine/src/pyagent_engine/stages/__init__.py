"""The stages of an engine step, each a small object with one job, run in this order by ``Engine.step``.

1. :mod:`~pyagent_engine.stages.schedule`: admit requests whose grammar is ready, draft, plan the
   step (``ScheduledBatch``).
2. :mod:`~pyagent_engine.stages.inputs`: the chunks as one forward's tensors (``ModelInputs``), the one
   place per-row model inputs are built.
3. :mod:`~pyagent_engine.stages.forward`: the model forward (``StepLogits``).
4. :mod:`~pyagent_engine.stages.masks`: logits processing and masks, the grammar bitmask
   (``MaskedLogits``).
5. :mod:`~pyagent_engine.stages.select`: the sampler host chooses the tokens, one row per request
   or a draft walked depth by depth (``Selection``).
6. :mod:`~pyagent_engine.stages.logprobs`: the logprob records of the prompt positions and the
   chosen tokens.
7. :mod:`~pyagent_engine.stages.commit`: the computed positions and accepted draft nodes become
   cache state, through the KV manager.
8. :mod:`~pyagent_engine.stages.append`: append, detokenize (:mod:`~pyagent_engine.stages.text_tracker`)
   and stop; the outputs.

:mod:`~pyagent_engine.stages.records` holds the records they hand on, and
:mod:`~pyagent_engine.stages.timing` the time spent in each.
"""
