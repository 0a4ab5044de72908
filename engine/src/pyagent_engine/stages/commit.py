"""Stage 7, commit: what the step computed becomes the requests' cache state.

Every chunk's positions count as computed, through the KV manager; for a verified draft only the
accepted nodes count, the manager moves their keys and values to the positions of their depths
and frees the blocks that held nothing but rejected nodes (:meth:`KVCacheManager.commit`), and the
speculative decoder tells the proposer and the draft-length controller how the draft did.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyagent_engine.kv.manager import KVCacheManager
from pyagent_engine.requests.isolation import describe
from pyagent_engine.requests.request import Request
from pyagent_engine.scheduling.scheduler import ScheduledChunk
from pyagent_engine.spec.decoder import SpeculativeDecoder
from pyagent_engine.stages.records import Selection


class Commit:
    """Commits a step's chunks.

    Args:
        kv: the KV manager.
        speculative: the speculative decoder, or ``None`` without speculation.
    """

    def __init__(self, kv: KVCacheManager, speculative: SpeculativeDecoder | None) -> None:
        self.kv = kv
        self.speculative = speculative

    def run(self, chunks: Sequence[ScheduledChunk], selection: Selection) -> list[tuple[Request, str]]:
        """Commit every chunk whose request is still running (``selection``: the accepted draft nodes);
        return the requests whose commit failed, with the reason (the others are committed)."""
        accepted = {id(request): nodes for request, nodes in zip(selection.requests, selection.accepted, strict=True)}
        failed = []
        for chunk in chunks:
            request = chunk.request
            if request.finished:  # its forward or sampling failed: its blocks are back in the pool
                continue
            try:
                nodes = accepted.get(id(request), ())
                self.kv.commit(request, chunk.num_tokens, nodes)
                if self.speculative is not None and request.draft is not None:
                    self.speculative.verified(request, nodes)
            except Exception as error:
                failed.append((request, describe(error)))
        return failed
