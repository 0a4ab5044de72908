"""Draft-model speculative proposer for pyagent (see :mod:`pyagent_spec_draft_model.proposer`)."""
