"""Registers the scheduling policies. Imported while listing plugins: no implementation is imported here."""

from __future__ import annotations

from collections.abc import Callable

from pyagent_core import OptionSpec, SchedulerSpec, hookimpl
from pyagent_core.install import checkout_install_hint

PACKAGE = "pyagent_scheduler_policies"
INSTALL_HINT = checkout_install_hint("pyagent-scheduler-policies", "plugins/schedulers/pyagent-scheduler-policies")


def _spec(name: str, impl: str, summary: str, description: str, priority: int = 0,
          options: dict[str, OptionSpec] | None = None, uses_cached_prefix: bool = False) -> SchedulerSpec:
    return SchedulerSpec(name=name, impl=f"{PACKAGE}.{impl}", summary=summary, description=description,
                         priority=priority, options=options or {}, install_hint=INSTALL_HINT,
                         uses_cached_prefix=uses_cached_prefix)


SPECS = (
    _spec("fcfs", "fcfs:FcfsPolicy", "First come, first served.",
          "Admits waiting requests by arrival time (preempted requests keep their place). The default, "
          "as in vLLM and SGLang.", priority=10),
    _spec("priority", "priority:PriorityPolicy",
          "Smallest priority first (vLLM's).",
          "vLLM's priority policy: waiting requests by (priority, arrival time); the victim is the running "
          "request with the largest (priority, arrival time). Low-priority requests can starve under load."),
    _spec("lpm", "lpm:LongestPrefixPolicy",
          "Longest cached prefix first; needs prefix caching.",
          "Admits the waiting request whose prompt has the most tokens in the prefix cache first, so shared "
          "prefixes are used before they are evicted. Requests without a cached prefix can starve.",
          uses_cached_prefix=True),
    _spec("edf", "edf:EarliestDeadlinePolicy",
          "Earliest deadline first, missed ones demoted.",
          "Orders by the first-token deadline (arrival + deadline_s). A request without one counts as due "
          "default_deadline_s after arrival; one whose deadline has passed counts as due demotion_s later, "
          "behind the requests that can still make theirs. Preempts the running request due last.",
          options={
              "default_deadline_s": OptionSpec(type=float, default=30.0, min=0.0,
                                               help="deadline of a request that has none, after its arrival"),
              "demotion_s": OptionSpec(type=float, default=10.0, min=0.0,
                                       help="how much later a request that missed its deadline is ordered"),
          }),
    _spec("fair", "fair:FairPolicy",
          "Tenant fair share (VTC).",
          "Serves the tenant with the least weighted service (input_weight per prompt token computed, "
          "output_weight per token generated); a tenant that starts waiting is lifted to the lowest counter "
          "of those already waiting, so idle time earns no credit. First come, first served within a "
          "tenant; preempts a request of the tenant with the most service.",
          options={
              "input_weight": OptionSpec(type=float, default=1.0, min=0.0, help="service per prompt token"),
              "output_weight": OptionSpec(type=float, default=2.0, min=0.0, help="service per generated token"),
          }),
    _spec("hrrn", "hrrn:ResponseRatioPolicy",
          "Highest response ratio next.",
          "Short requests go first once they have waited a little; a long request's ratio grows while it "
          "waits, so none starves. Expected service: the prompt not cached at prefill_tokens_per_s plus the "
          "tokens left to generate at decode_tokens_per_s.",
          options={
              "prefill_tokens_per_s": OptionSpec(type=float, default=1000.0, min=1e-3,
                                                 help="prompt tokens the engine computes per second"),
              "decode_tokens_per_s": OptionSpec(type=float, default=20.0, min=1e-3,
                                                help="tokens one request generates per second"),
          }),
)


@hookimpl
def pyagent_register_schedulers(register: Callable[[SchedulerSpec], None]) -> None:
    """Register every policy of this distribution."""
    for spec in SPECS:
        register(spec)
