"""Kit: outputs a matcher lets through are checked by an independent reference, and reference strings pass.

Two directions per :class:`ReferenceCase`:

- soundness: seeded random walks sample uniformly among the tokens the bitmask allows (ending with
  end-of-sequence when it is allowed, with probability ``stop_probability``); every finished text
  must satisfy the reference (``re.fullmatch``, membership, a Lark parser...).
- completeness: strings the reference accepts (``accepted``, plus hypothesis strings for regexes)
  tokenised over the kit's vocabulary must walk to the end.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import ClassVar

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyagent_core.interfaces.grammar import (
    CompiledGrammar,
    ConstraintSpec,
    GrammarBackend,
    GrammarContext,
    TokenizerInfo,
    allocate_bitmask,
    allowed_tokens,
)
from pyagent_core.options import validate_options
from pyagent_core.testing.grammar import greedy_tokenize, kit_tokenizer_info
from pyagent_core.types import GrammarSpec

Reference = Callable[[str], bool]


@attrs.frozen
class ReferenceCase:
    """A constraint, the reference deciding its language, and strings the reference accepts."""

    label: str
    constraint: ConstraintSpec
    reference: Reference
    accepted: tuple[str, ...] = ()


def regex_case(pattern: str, *accepted: str) -> ReferenceCase:
    """A regex constraint checked with ``re.fullmatch``."""
    compiled = re.compile(pattern)
    return ReferenceCase(f"regex {pattern!r}", ConstraintSpec(regex=pattern),
                         lambda text: compiled.fullmatch(text) is not None, accepted)


def choice_case(*choices: str) -> ReferenceCase:
    """A choice constraint checked by membership."""
    return ReferenceCase(f"choice {choices!r}", ConstraintSpec(choice=choices), lambda text: text in choices, choices)


def lark_reference(grammar: str) -> Reference:
    """A reference that parses with ``lark`` (Earley) over ``grammar``, whose start rule is ``start``."""
    import lark

    parser = lark.Lark(grammar, start="start", parser="earley")

    def parses(text: str) -> bool:
        try:
            parser.parse(text)
        except lark.exceptions.LarkError:
            return False
        return True

    return parses


ARITHMETIC_LARK = """
start: expr
expr: term (("+" | "-") term)*
term: NUMBER | "(" expr ")"
NUMBER: /[0-9]+/
"""
"""Integer sums and differences with parentheses, no spaces: the reference grammar (Lark)."""

ARITHMETIC_GBNF = """
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= number | "(" expr ")"
number ::= [0-9]+
"""
"""The same language in GBNF / the ``::=`` EBNF form."""

ARITHMETIC_ACCEPTED = ("1", "12+3", "(1-2)+30", "((7))")


def arithmetic_case(dialect: str) -> ReferenceCase:
    """The arithmetic language in ``dialect`` (``lark``, ``gbnf`` or ``ebnf``), checked by lark."""
    text = ARITHMETIC_LARK if dialect == "lark" else ARITHMETIC_GBNF
    return ReferenceCase(f"grammar ({dialect})", ConstraintSpec(grammar=text, grammar_dialect=dialect),
                         lark_reference(ARITHMETIC_LARK), ARITHMETIC_ACCEPTED)


REGEX_AND_CHOICE_CASES = (
    regex_case(r"(ab|c)*d{1,3}", "d", "abcddd", "cabd"),
    regex_case(r"[a-z]{2,4}-[0-9]+(\.[0-9]{1,2})?", "ab-1", "abcd-12.5"),
    choice_case("yes", "no", "maybe so", 'say "no"'),
)
"""Cases every regex and choice backend runs."""


def random_walk(compiled: CompiledGrammar, info: TokenizerInfo, rng: random.Random,
                max_tokens: int, stop_probability: float) -> str | None:
    """Sample tokens uniformly among the allowed ones; the text when end-of-sequence was accepted, else ``None``."""
    matcher = compiled.matcher()
    bitmask = allocate_bitmask(1, info.vocab_size)
    eos = set(info.eos_token_ids)
    tokens: list[int] = []
    for _ in range(max_tokens):
        matcher.fill_bitmask(bitmask, 0)
        allowed = allowed_tokens(bitmask, 0, info.vocab_size)
        assert allowed, f"no token allowed after {info.decode(tokens)!r}: a dead end"
        ends = [t for t in allowed if t in eos]
        others = [t for t in allowed if t not in eos]
        token = ends[0] if ends and (not others or rng.random() < stop_probability) else rng.choice(others)
        assert matcher.accept_token(token), f"allowed token {info.vocab[token]!r} refused"
        if token in eos:
            assert matcher.is_terminated()
            return info.decode(tokens).decode("utf-8")
        tokens.append(token)
    return None


class GrammarReferenceConformance:
    """Set ``impl`` (a :class:`GrammarBackend` class), its ``spec`` and ``cases``; ``options``
    override the spec's defaults."""

    impl: ClassVar[type[GrammarBackend]]
    spec: ClassVar[GrammarSpec]
    cases: ClassVar[tuple[ReferenceCase, ...]]
    options: ClassVar[dict[str, object]] = {}
    walks: ClassVar[int] = 40
    max_tokens: ClassVar[int] = 24
    stop_probability: ClassVar[float] = 0.3

    def compiled(self) -> list[tuple[ReferenceCase, CompiledGrammar]]:
        """Every case compiled by the backend under test (once per test)."""
        if "_compiled" not in self.__dict__:
            options = validate_options(self.spec.options, self.options, f"grammar backend {self.spec.name!r}")
            backend = self.impl(options, GrammarContext(tokenizer_info=kit_tokenizer_info()))
            self.__dict__["_compiled"] = [(case, backend.compile(case.constraint)) for case in self.cases]
        compiled: list[tuple[ReferenceCase, CompiledGrammar]] = self.__dict__["_compiled"]
        return compiled

    def walks_to_end(self, compiled: CompiledGrammar, text: str) -> bool:
        """Whether ``text`` (tokenised over the kit vocabulary) and then end-of-sequence are accepted."""
        info = kit_tokenizer_info()
        matcher = compiled.matcher()
        return all(matcher.accept_token(t) for t in [*greedy_tokenize(info, text), info.eos_token_ids[0]])

    def test_sampled_outputs_satisfy_the_reference(self) -> None:
        info = kit_tokenizer_info()
        for case, compiled in self.compiled():
            rng = random.Random(1234)
            finished = []
            for _ in range(self.walks):
                text = random_walk(compiled, info, rng, self.max_tokens, self.stop_probability)
                if text is not None:
                    assert case.reference(text), f"{case.label}: the matcher let {text!r} through"
                    finished.append(text)
            assert finished, f"{case.label}: no random walk finished within {self.max_tokens} tokens"

    def test_reference_strings_are_accepted(self) -> None:
        for case, compiled in self.compiled():
            for text in case.accepted:
                assert case.reference(text), f"{case.label}: bad test data {text!r}"
                assert self.walks_to_end(compiled, text), f"{case.label}: refused {text!r}"

    # Each subclass runs this inherited test on its own backend: several executors are expected.
    @settings(max_examples=30, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])
    @given(data=st.data())
    def test_regex_strings_from_hypothesis_are_accepted(self, data: st.DataObject) -> None:
        for case, compiled in self.compiled():
            pattern = case.constraint.regex
            if pattern is None:
                continue
            text = data.draw(st.from_regex(pattern, fullmatch=True, alphabet=st.characters(min_codepoint=32,
                                                                                          max_codepoint=126)))
            assert self.walks_to_end(compiled, text), f"{case.label}: refused {text!r}"
