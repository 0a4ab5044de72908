"""Stable sampler rows: the BatchUpdate the engine reports reproduces its row order in any sampler."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pyagent_core.interfaces.sampler import RequestRows
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request
from pyagent_engine.sampling.chain import SamplerRows

POOL = [Request(f"r{i}", [i], SamplingParams(seed=i)) for i in range(12)]


@given(st.lists(st.lists(st.sampled_from(range(12)), unique=True), max_size=15))
def test_updates_replayed_on_request_rows_match_the_engine_rows(batches):
    rows = SamplerRows()
    replica = RequestRows()
    for batch in batches:
        sampled = [POOL[i] for i in batch]
        before = {id(r): i for i, r in enumerate(rows.rows)}
        update = rows.update(sampled)
        assert sorted(id(r) for r in rows.rows) == sorted(id(r) for r in sampled)
        if update is not None:
            replica.apply(update, lambda added: added.params["seed"])
            moved = {m.src for m in update.moved}
            for i, request in enumerate(rows.rows):  # a request changes rows only by an explicit move
                if id(request) in before and before[id(request)] not in moved:
                    assert before[id(request)] == i
        assert [replica[i] for i in range(len(replica))] == [r.params.seed for r in rows.rows]


def test_unchanged_batch_reports_no_update():
    rows = SamplerRows()
    assert rows.update(POOL[:3]) is not None
    assert rows.update(list(reversed(POOL[:3]))) is None
