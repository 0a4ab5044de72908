"""The eviction conformance kit, run against every policy this distribution registers."""

from __future__ import annotations

from typing import ClassVar

from pyagent_core.testing.eviction import EvictionConformance
from pyagent_kvcache_policies.adaptive import AdaptivePolicy
from pyagent_kvcache_policies.arc import ArcPolicy
from pyagent_kvcache_policies.cost_aware import CostAwarePolicy
from pyagent_kvcache_policies.fifo import FifoPolicy
from pyagent_kvcache_policies.lfu import LfuPolicy
from pyagent_kvcache_policies.lru import LruPolicy
from pyagent_kvcache_policies.plugin import SPECS
from pyagent_kvcache_policies.s3fifo import S3FifoPolicy
from pyagent_kvcache_policies.slru import SlruPolicy
from pyagent_kvcache_policies.turn_aware import TurnAwarePolicy

SPEC = {spec.name: spec for spec in SPECS}


class PolicyKit(EvictionConformance):
    """The kit with fewer state-machine runs per policy: eight policies share the time budget."""

    max_examples = 60


class TestLru(PolicyKit):
    impl = LruPolicy
    spec = SPEC["lru"]


class TestFifo(PolicyKit):
    impl = FifoPolicy
    spec = SPEC["fifo"]


class TestLfu(PolicyKit):
    impl = LfuPolicy
    spec = SPEC["lfu"]
    options: ClassVar[dict[str, int]] = {"max_frequency": 3}


class TestArc(PolicyKit):
    impl = ArcPolicy
    spec = SPEC["arc"]


class TestSlru(PolicyKit):
    impl = SlruPolicy
    spec = SPEC["slru"]


class TestS3Fifo(PolicyKit):
    impl = S3FifoPolicy
    spec = SPEC["s3-fifo"]


class TestCostAware(PolicyKit):
    impl = CostAwarePolicy
    spec = SPEC["cost-aware"]


class TestTurnAware(PolicyKit):
    impl = TurnAwarePolicy
    spec = SPEC["turn-aware"]


class TestAdaptive(PolicyKit):
    impl = AdaptivePolicy
    spec = SPEC["adaptive"]
