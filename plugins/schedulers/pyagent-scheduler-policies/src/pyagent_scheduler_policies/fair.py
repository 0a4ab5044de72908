"""Fair share between tenants: the Virtual Token Counter (VTC) of "Fairness in Serving Large Language
Models" (Sheng et al., OSDI 2024).

Each tenant has a counter of the weighted service it has received: ``input_weight`` per prompt token
computed (recomputation after a preemption included) and ``output_weight`` per token generated. The
policy learns the service from the views it is shown (``served_tokens``, ``output_tokens``) and from
``finished``. The waiting requests are ordered by serving, again and again, the tenant with the
lowest counter (ties: the one whose oldest waiting request arrived first) its oldest waiting request,
counting that request's prompt against the tenant before the next pick.

As in VTC, time spent idle earns no credit: a tenant that starts waiting is lifted to the lowest
counter among the tenants that kept waiting, or, when none did, to the counter of the tenant whose
request left the queue last (VTC's "last client that left"). Whether a tenant starts waiting is read
from request ids, not from the tenants seen waiting at the previous call: a host asks for an order only
in steps with waiting requests, so a tenant whose queue emptied between two calls would otherwise look
as if it had waited all along, and come back with the credit of its idle time. A tenant kept waiting
when one of its requests that waited at the previous call still waits (arrivals come between steps,
and what a step admits it admits right after the order). Requests without a tenant share the
anonymous one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pyagent_core.interfaces.scheduler import RequestView, SchedulerContext, SchedulerState, SchedulingPolicy


def waiting_ids(state: SchedulerState) -> set[str]:
    """The ids of ``state``'s waiting requests."""
    return {view.request_id for view in state.waiting}


def tenant_of(view: RequestView) -> str:
    """The tenant a request is counted against (``""``: the anonymous tenant)."""
    return view.tenant or ""


class FairPolicy(SchedulingPolicy):
    """VTC: serve the tenant that has received the least weighted service (see the module docstring).

    Attributes:
        counters: weighted service per tenant so far.
        waiting_ids: the requests that waited at the previous ``order``.
        last_order: that order, as (request id, tenant).
    """

    def __init__(self, options: Mapping[str, Any], context: SchedulerContext) -> None:
        super().__init__(options, context)
        self.input_weight = float(self.options["input_weight"])
        self.output_weight = float(self.options["output_weight"])
        self.counters: dict[str, float] = {}
        self.charged: dict[str, float] = {}
        self.waiting_ids: set[str] = set()
        self.last_order: list[tuple[str, str]] = []

    def service(self, view: RequestView) -> float:
        """The weighted service ``view`` shows it has received."""
        computed_prompt = max(0, view.served_tokens - view.output_tokens)
        return self.input_weight * computed_prompt + self.output_weight * view.output_tokens

    def _charge(self, views: Iterable[RequestView]) -> None:
        for view in views:
            service = self.service(view)
            delta = service - self.charged.get(view.request_id, 0.0)
            if delta > 0:
                tenant = tenant_of(view)
                self.counters[tenant] = self.counters.get(tenant, 0.0) + delta
                self.charged[view.request_id] = service

    def _lift(self, state: SchedulerState) -> None:
        now_waiting = waiting_ids(state)
        kept = {tenant_of(view) for view in state.waiting if view.request_id in self.waiting_ids}
        left = [tenant for request_id, tenant in self.last_order if request_id not in now_waiting]
        floor_from = kept or set(left[-1:])
        if floor_from:
            floor = min(self.counters.get(t, 0.0) for t in floor_from)
            for tenant in sorted({tenant_of(view) for view in state.waiting} - kept):
                self.counters[tenant] = max(self.counters.get(tenant, 0.0), floor)
        self.waiting_ids = now_waiting

    def order(self, state: SchedulerState) -> list[str]:
        """The waiting ids as VTC would admit them, one pick at a time."""
        self._charge(state.running + state.waiting)
        self._lift(state)
        queues: dict[str, list[RequestView]] = {}
        by_id = {view.request_id: view for view in state.waiting}
        for view in sorted(state.waiting, key=lambda view: view.arrival_time):
            queues.setdefault(tenant_of(view), []).append(view)
        counters = {tenant: self.counters.get(tenant, 0.0) for tenant in queues}
        order = []
        while queues:
            tenant = min(queues, key=lambda t: (counters[t], queues[t][0].arrival_time, t))
            view = queues[tenant].pop(0)
            counters[tenant] += self.input_weight * max(1, view.prompt_tokens - view.cached_tokens)
            if not queues[tenant]:
                del queues[tenant]
            order.append(view.request_id)
        self.last_order = [(request_id, tenant_of(by_id[request_id])) for request_id in order]
        return order

    def victim(self, state: SchedulerState) -> str:
        """A request of the running tenant with the most service; ties: the last admitted."""
        self._charge(state.running + state.waiting)
        running = state.running
        return running[max(range(len(running)),
                           key=lambda i: (self.counters.get(tenant_of(running[i]), 0.0), i))].request_id

    def finished(self, view: RequestView) -> None:
        """Charge ``view``'s last service to its tenant and forget the request."""
        self._charge([view])
        self.charged.pop(view.request_id, None)
