"""Conformance kit: one pytest base class per component kind.

A plugin's tests subclass the kit for its kind and set ``impl`` (the implementation class) and
``spec`` (the record its plugin registers); pytest then runs every check of the kit against the
backend. Import a kit only from tests: ``from pyagent_core.testing.sampler import SamplerConformance``.

The kits need pytest and hypothesis, pyagent-core's ``testing`` extra. The attention, mixer,
sampler, model and grammar kits build tensors and also need torch (and the grammar kit lark, its reference
parser): the ``testing-torch`` extra. The other kits import no torch, so a parser, scheduler,
eviction or proposer plugin is tested without it. :data:`KIT_EXTRAS` says which extra each kind's kit needs.
"""

KIT_EXTRAS = {
    "attention": "testing-torch",
    "mixer": "testing-torch",
    "sampler": "testing-torch",
    "model": "testing-torch",
    "grammar": "testing-torch",
    "proposer": "testing",
    "eviction": "testing",
    "scheduler": "testing",
    "tool_parser": "testing",
    "reasoning_parser": "testing",
}
"""Kind name -> the extra of pyagent-core its conformance kit needs (``pip install 'pyagent-core[testing]'``)."""
