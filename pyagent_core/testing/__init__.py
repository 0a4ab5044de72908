"""Conformance kit: one pytest base class per component kind.

A plugin's tests subclass the kit for its kind and set ``impl`` (the implementation class) and
``spec`` (the record its plugin registers); pytest then runs every check of the kit against the
backend. Kits import torch, so import them only from tests: ``from pyagent_core.testing.sampler
import SamplerConformance``.
"""
