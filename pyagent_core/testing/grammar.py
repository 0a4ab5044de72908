"""Conformance kit for grammar backends: walk accepted and rejected strings token by token.

Strings are tokenised greedily (longest match) over the kit's small vocabulary, then fed to a
matcher one token at a time. Before each token the matcher fills a bitmask row: an accepted string's
next token must be allowed and accepted, and an end-of-sequence token must be allowed at its end; a
rejected string must meet a masked token (which ``accept_token`` then refuses) or find the end
masked. Backends with rollback are also checked bit by bit: every allowed token is accepted and
every masked one refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import ClassVar

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyagent_core.interfaces.grammar import (
    CompiledGrammar,
    ConstraintSpec,
    GrammarBackend,
    GrammarContext,
    GrammarMatcher,
    TokenizerInfo,
    allocate_bitmask,
    allowed_tokens,
)
from pyagent_core.testing.base import BackendConformance
from pyagent_core.testing.support import expect_raises
from pyagent_core.types import GrammarSpec

EXTRA_TOKENS = (
    '{"', '":', '": ', '", "', '"}', ', "', "true", "false", "null", "yes", "no", "maybe", " so",
    "ab", "abc", "12", "345", "-1", "  ", "\n  ",
)
"""Multi-character tokens of the kit vocabulary, so that tokens straddle grammar boundaries."""


def kit_tokenizer_info() -> TokenizerInfo:
    """The kit's vocabulary: ``</s>`` (eos, id 0), ``<s>`` (special, id 1), printable ASCII, newline,
    :data:`EXTRA_TOKENS`; ``vocab_size`` is padded by 5 ids that are never allowed."""
    tokens = ["</s>", "<s>", *map(chr, range(32, 127)), "\n", *EXTRA_TOKENS]
    return TokenizerInfo(vocab=tokens, eos_token_ids=(0,), special_token_ids=(1,), vocab_size=len(tokens) + 5)


def greedy_tokenize(info: TokenizerInfo, text: str) -> list[int]:
    """Longest-match tokenisation of ``text``'s UTF-8 bytes over the non-special tokens of ``info``."""
    special = {*info.eos_token_ids, *info.special_token_ids}
    ids = {token: i for i, token in enumerate(info.vocab) if i not in special and token}
    longest = max(map(len, ids))
    data, pos, out = text.encode("utf-8"), 0, []
    while pos < len(data):
        for size in range(min(longest, len(data) - pos), 0, -1):
            if data[pos:pos + size] in ids:
                out.append(ids[data[pos:pos + size]])
                pos += size
                break
        else:
            raise AssertionError(f"cannot tokenise {text!r} at byte {pos} with the kit's vocabulary")
    return out


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@attrs.frozen
class GrammarCase:
    """A constraint with strings it must accept as complete outputs and strings it must reject."""

    constraint: ConstraintSpec
    accepted: tuple[str, ...] = attrs.field(converter=_strings)
    rejected: tuple[str, ...] = attrs.field(default=(), converter=_strings)


PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}

DEFAULT_CASES = (
    GrammarCase(ConstraintSpec(choice=["yes", "no", "maybe so"]),
                accepted=["yes", "no", "maybe so"], rejected=["", "ye", "yess", "No", "maybe"]),
    GrammarCase(ConstraintSpec(regex="[a-c]+x?"),
                accepted=["a", "abcx", "cab"], rejected=["", "x", "abd", "axx"]),
    GrammarCase(ConstraintSpec(regex=r"-?[0-9]{2,3}"),
                accepted=["12", "-345", "100"], rejected=["1", "1234", "--12", "12-"]),
    GrammarCase(ConstraintSpec(json_object=True),
                accepted=["{}", '{"a": 1}', '{"ab": [true, null, "x"], "c": {"d": -1.5}}'],
                rejected=["[]", '"x"', '{"a":}', '{"a" 1}', "{", '{"a": 1}}']),
    GrammarCase(ConstraintSpec(json_schema=PERSON_SCHEMA),
                accepted=['{"name": "ab", "age": 3}', '{"name":"","age":-12}'],
                rejected=['{"name": "ab"}', '{"name": 3, "age": 3}', '{"name": "ab", "age": 3.5}',
                          '{"name": "ab", "age": 3, "x": 1}']),
)
"""Cases for the constraint kinds every JSON/regex/choice backend understands the same way."""

_NUMBERS_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "array", "items": {"type": "integer"}}, "b": {"type": "number"},
                   "c": {"type": "integer", "minimum": 0}},
}
_LONG = "1" * 40

BOUNDED_JSON_CASES = (
    GrammarCase(ConstraintSpec(json_schema=_NUMBERS_SCHEMA),
                accepted=['{"a": [1, 2], "b": 1.5}', '{"a":[1,2],"b":-0.25,"c":0}', '{"a": [' + "9" * 16 + "]}",
                          '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 3\n}',  # llama.cpp's pretty output
                          '{"a": [\n' + " " * 20 + "1\n]}", '{"c": 1234567890123456}'],
                rejected=['{"a": [1\n\n,\n2]}', '{"a":  [1]}', '{"a": [1,\n' + " " * 21 + "2]}",
                          '{"a": [' + _LONG + "]}", '{"b": 0.' + "0" * 40 + "}", '{"b": ' + "1" * 17 + "}",
                          '{"c": ' + _LONG + "}"]),
    GrammarCase(ConstraintSpec(json_schema=_NUMBERS_SCHEMA, whitespace="any", bounded_numbers=False),
                accepted=['{"a": [1\n\n,\n2]}', '{"a": [' + _LONG + "]}", '{"b": 0.' + "0" * 40 + "}",
                          '{"c": ' + _LONG + "}"]),
    GrammarCase(ConstraintSpec(json_object=True),
                accepted=['{"a": {"b": [1, 2.5]}}', '{\n  "a": 1\n}'],
                rejected=['{"a": 1\n\n}', '{"a": ' + _LONG + "}", '{"a": 0.' + "0" * 40 + "}"]),
)
"""Bounded JSON whitespace and numbers (the defaults), for backends that can express them: llama.cpp's
whitespace (one space, or a newline and at most 20 spaces or tabs) and its 16-digit number parts; with
``whitespace="any"`` and ``bounded_numbers=False`` both are free again."""

_PAIR = {"a": {"type": "integer"}, "b": {"type": "integer"}}

KEYWORD_PROBES: dict[str, tuple[dict[str, object], str, str]] = {
    # keyword: (schema, an instance it accepts, an instance that breaks only this keyword)
    "type": ({"type": "integer"}, "1", '"a"'),
    "enum": ({"enum": ["a", "b"]}, '"a"', '"c"'),
    "const": ({"const": "a"}, '"a"', '"b"'),
    "properties": ({"type": "object", "properties": {"a": {"type": "integer"}}}, '{"a": 1}', '{"a": "x"}'),
    "required": ({"type": "object", "properties": _PAIR, "required": ["a"]}, '{"a": 1}', '{"b": 1}'),
    "additionalProperties": ({"type": "object", "properties": _PAIR, "additionalProperties": False},
                             '{"a": 1}', '{"a": 1, "c": 2}'),
    "patternProperties": ({"type": "object", "patternProperties": {"^x": {"type": "integer"}}},
                          '{"x": 1}', '{"x": "s"}'),
    "propertyNames": ({"type": "object", "propertyNames": {"maxLength": 2}}, '{"ab": 1}', '{"abc": 1}'),
    "minProperties": ({"type": "object", "minProperties": 1}, '{"a": 1}', "{}"),
    "maxProperties": ({"type": "object", "maxProperties": 1}, '{"a": 1}', '{"a": 1, "b": 2}'),
    "dependencies": ({"type": "object", "properties": _PAIR, "dependencies": {"a": ["b"]}},
                     '{"a": 1, "b": 2}', '{"a": 1}'),
    "dependentRequired": ({"type": "object", "properties": _PAIR, "dependentRequired": {"a": ["b"]}},
                          '{"a": 1, "b": 2}', '{"a": 1}'),
    "dependentSchemas": ({"type": "object", "properties": _PAIR, "dependentSchemas": {"a": {"required": ["b"]}}},
                         '{"a": 1, "b": 2}', '{"a": 1}'),
    "unevaluatedProperties": ({"type": "object", "properties": _PAIR, "unevaluatedProperties": False},
                              '{"a": 1}', '{"a": 1, "c": 2}'),
    "items": ({"type": "array", "items": {"type": "integer"}}, "[1]", '["a"]'),
    "prefixItems": ({"type": "array", "prefixItems": [{"type": "integer"}]}, "[1]", '["a"]'),
    "minItems": ({"type": "array", "minItems": 1}, "[1]", "[]"),
    "maxItems": ({"type": "array", "maxItems": 1}, "[1]", "[1, 2]"),
    "uniqueItems": ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "[1, 2]", "[1, 1]"),
    "contains": ({"type": "array", "items": {"type": "integer"}, "contains": {"const": 3}}, "[3]", "[1]"),
    "minLength": ({"type": "string", "minLength": 2}, '"ab"', '"a"'),
    "maxLength": ({"type": "string", "maxLength": 2}, '"ab"', '"abc"'),
    "pattern": ({"type": "string", "pattern": "^a+$"}, '"aa"', '"ab"'),
    "minimum": ({"type": "integer", "minimum": 3}, "3", "2"),
    "maximum": ({"type": "integer", "maximum": 3}, "3", "4"),
    "exclusiveMinimum": ({"type": "integer", "exclusiveMinimum": 3}, "4", "3"),
    "exclusiveMaximum": ({"type": "integer", "exclusiveMaximum": 3}, "2", "3"),
    "multipleOf": ({"type": "integer", "multipleOf": 3}, "6", "5"),
    "anyOf": ({"anyOf": [{"type": "integer"}, {"type": "boolean"}]}, "1", '"a"'),
    "oneOf": ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "1.5", "1"),
    "allOf": ({"allOf": [{"type": "string"}, {"type": "string", "maxLength": 2}]}, '"ab"', '"abc"'),
    "not": ({"type": "integer", "not": {"const": 3}}, "2", "3"),
    "if": ({"if": {"type": "integer"}, "then": {"const": 1}, "else": {"type": "string"}}, "1", "2"),
    "$ref": ({"$defs": {"a": {"type": "integer"}}, "$ref": "#/$defs/a"}, "1", '"a"'),
}
"""One probe per JSON Schema validation keyword, for checking a grammar spec's ``ignored_keywords`` and
``refused_keywords`` against the backend (``if`` stands for ``if``/``then``/``else``; ``format`` has
:data:`FORMAT_PROBES`)."""

_FORMAT_EXAMPLES = {
    "email": "a@b.co", "idn-email": "a@b.co", "date": "2024-01-02", "time": "10:00:00Z",
    "date-time": "2024-01-02T10:00:00Z", "duration": "P1D", "uri": "http://a.b/c", "uri-reference": "/c",
    "iri": "http://a.b/c", "iri-reference": "/c", "ipv4": "1.2.3.4", "ipv6": "::1",
    "uuid": "123e4567-e89b-12d3-a456-426614174000", "hostname": "a.com", "idn-hostname": "a.com",
    "json-pointer": "/a", "relative-json-pointer": "0/a", "regex": "a+", "uri-template": "/a/{b}",
}

FORMAT_PROBES: dict[str, tuple[dict[str, object], str, str]] = {
    name: ({"type": "string", "format": name}, f'"{example}"', '"("' if name == "regex" else '" "')
    for name, example in _FORMAT_EXAMPLES.items()
}
"""A probe per JSON Schema 2020-12 ``format``, for checking a grammar spec's ``enforced_formats``."""

SAMPLE_CONSTRAINTS = {
    "json_schema": ConstraintSpec(json_schema={"type": "string"}),
    "json_object": ConstraintSpec(json_object=True),
    "regex": ConstraintSpec(regex="[ab]+"),
    "choice": ConstraintSpec(choice=["a", "b"]),
    "grammar": ConstraintSpec(grammar='root ::= "a" | "b"'),
    "structural_tag": ConstraintSpec(structural_tag={
        "structures": [{"begin": "<f>", "schema": {"type": "object"}, "end": "</f>"}], "triggers": ["<f>"],
    }),
}
"""One constraint of each kind, for the :meth:`GrammarBackend.supports` check."""

MALFORMED_CONSTRAINTS = (
    ConstraintSpec(regex="(ab"),
    ConstraintSpec(json_schema='{"type": '),
    ConstraintSpec(json_schema={"type": "no-such-type"}),
)
"""Constraints a backend must refuse, through ``supports`` or a ``ValueError`` from ``compile``."""


class GrammarConformance(BackendConformance):
    """Kit for :class:`GrammarBackend` s. Set ``impl`` and ``spec``.

    ``cases`` (default :data:`DEFAULT_CASES`; extend it for grammar or structural-tag backends) are
    run for the constraint kinds the spec declares. Override :meth:`tokenizer_info` to test
    another vocabulary; it must contain every single byte the cases use.
    """

    kind = "grammar"
    spec: ClassVar[GrammarSpec]
    cases: ClassVar[tuple[GrammarCase, ...]] = DEFAULT_CASES
    malformed: ClassVar[tuple[ConstraintSpec, ...]] = MALFORMED_CONSTRAINTS
    bounded_json: ClassVar[bool] = False
    """Set when the backend enforces bounded JSON whitespace and integers (add :data:`BOUNDED_JSON_CASES`
    to ``cases`` too): property tests then hold it to llama.cpp's rules."""

    def tokenizer_info(self) -> TokenizerInfo:
        """The tokenizer the backend is built for (default: :func:`kit_tokenizer_info`)."""
        return kit_tokenizer_info()

    def make_backend(self, **options: object) -> GrammarBackend:
        """Construct the backend under test for :meth:`tokenizer_info`; ``options`` override the class's."""
        context = GrammarContext(tokenizer_info=self.tokenizer_info())
        backend: GrammarBackend = self.impl(self.make_options(**options), context)
        return backend

    def compiled_cases(self) -> Iterator[tuple[GrammarCase, CompiledGrammar, str]]:
        """``(case, compiled grammar, label)`` for every case of a kind the spec declares."""
        backend = self.make_backend()
        for case in self.cases:
            constraint = case.constraint
            if constraint.kind not in self.spec.constraint_kinds:
                continue
            label = f"{constraint.kind} {constraint.value!r}"
            reason = backend.supports(constraint)
            assert reason is None, f"spec declares {constraint.kind} but supports() refuses {label}: {reason}"
            yield case, backend.compile(constraint), label

    def allowed(self, matcher: GrammarMatcher) -> set[int]:
        """The tokens ``matcher`` allows now, checking that it writes its own bitmask row only."""
        info = self.tokenizer_info()
        bitmask = allocate_bitmask(3, info.vocab_size)
        bitmask[0] = 0
        before = bitmask.clone()
        matcher.fill_bitmask(bitmask, 1)
        assert bitmask.dtype == before.dtype and bitmask[[0, 2]].equal(before[[0, 2]]), (
            "fill_bitmask(bitmask, 1) changed other rows"
        )
        allowed = set(allowed_tokens(bitmask, 1, info.vocab_size))
        never = {t for t in allowed if t >= len(info.vocab) or t in info.special_token_ids}
        assert not never, f"bitmask allows special or padding token ids {sorted(never)}"
        return allowed

    def walk(self, matcher: GrammarMatcher, tokens: list[int], label: str) -> None:
        """Feed ``tokens``, each of which must be allowed by the bitmask and accepted."""
        vocab = self.tokenizer_info().vocab
        for i, token in enumerate(tokens):
            assert token in self.allowed(matcher), f"{label}: token {i} ({vocab[token]!r}) is masked"
            assert matcher.accept_token(token), f"{label}: token {i} ({vocab[token]!r}) allowed but refused"
            assert not matcher.is_terminated(), f"{label}: terminated before end-of-sequence"

    def finish(self, matcher: GrammarMatcher, label: str) -> None:
        """Accept an end-of-sequence token, which must be allowed, and check termination."""
        eos = self.allowed(matcher) & set(self.tokenizer_info().eos_token_ids)
        assert eos, f"{label}: no end-of-sequence token is allowed at the end"
        assert matcher.accept_token(min(eos)), f"{label}: end-of-sequence is allowed but refused"
        assert matcher.is_terminated(), f"{label}: not terminated after end-of-sequence"

    def accepted_walks(self) -> Iterator[tuple[GrammarMatcher, str, list[int], str]]:
        """``(fresh matcher, text, tokens, label)`` for every accepted string of every case."""
        info = self.tokenizer_info()
        for case, compiled, label in self.compiled_cases():
            for text in case.accepted:
                yield compiled.matcher(), text, greedy_tokenize(info, text), f"{label} {text!r}"

    def _require(self, flag: str) -> None:
        if not getattr(self.spec, flag):
            pytest.skip(f"spec says {flag}=False")

    def test_has_cases(self) -> None:
        assert any(True for _ in self.compiled_cases()), (
            f"no case covers the declared kinds {self.spec.constraint_kinds}; add GrammarCase s to `cases`"
        )

    def test_supports_answers_for_every_kind(self) -> None:
        backend = self.make_backend()
        for kind, constraint in SAMPLE_CONSTRAINTS.items():
            reason = backend.supports(constraint)
            assert reason is None or (isinstance(reason, str) and reason), (
                f"supports({kind} constraint) returned {reason!r}; return None or a non-empty reason"
            )
            if kind not in self.spec.constraint_kinds:
                assert reason is not None, f"supports() accepts {kind} but the spec does not declare it"
            elif kind in ("json_schema", "json_object", "regex", "choice"):
                assert reason is None, f"spec declares {kind} but supports() refuses {constraint.value!r}"

    def test_malformed_constraints_are_refused(self) -> None:
        backend = self.make_backend()
        for constraint in self.malformed:
            if constraint.kind in self.spec.constraint_kinds and backend.supports(constraint) is None:
                expect_raises(ValueError, backend.compile, constraint, what=f"compile({constraint})")

    def test_accepted_strings(self) -> None:
        for matcher, _text, tokens, label in self.accepted_walks():
            self.walk(matcher, tokens, label)
            self.finish(matcher, label)

    def test_rejected_strings(self) -> None:
        info = self.tokenizer_info()
        for case, compiled, label in self.compiled_cases():
            for text in case.rejected:
                self.check_rejected(compiled.matcher(), greedy_tokenize(info, text), f"{label} {text!r}")

    def keyword_behaviour(self, probe: tuple[dict[str, object], str, str]) -> str:
        """What the backend does with a :data:`KEYWORD_PROBES` or :data:`FORMAT_PROBES` entry:
        ``enforced`` (accepts the instance, rejects the one breaking the keyword), ``ignored``
        (accepts both) or ``refused``."""
        schema, valid, invalid = probe
        constraint = ConstraintSpec(json_schema=schema)
        backend = self.make_backend()
        if backend.supports(constraint) is not None:
            return "refused"
        try:
            compiled = backend.compile(constraint)
        except ValueError:
            return "refused"
        info = self.tokenizer_info()
        matcher = compiled.matcher()
        self.walk(matcher, greedy_tokenize(info, valid), f"{schema} {valid}")
        self.finish(matcher, f"{schema} {valid}")
        matcher = compiled.matcher()
        tokens = greedy_tokenize(info, invalid)
        for token in tokens:
            if not matcher.accept_token(token):
                return "enforced"
        return "ignored" if set(info.eos_token_ids) & self.allowed(matcher) else "enforced"

    @pytest.mark.parametrize("keyword", sorted(KEYWORD_PROBES))
    def test_keyword_table_matches_behaviour(self, keyword: str) -> None:
        """The spec's ``ignored_keywords`` and ``refused_keywords`` say what the backend does."""
        if "json_schema" not in self.spec.constraint_kinds:
            pytest.skip("the backend compiles no JSON schemas")
        declared = self._declared(keyword)
        assert self.keyword_behaviour(KEYWORD_PROBES[keyword]) == declared, f"{keyword} is not {declared}"

    @pytest.mark.parametrize("name", sorted(FORMAT_PROBES))
    def test_format_table_matches_behaviour(self, name: str) -> None:
        """The formats of the spec's ``enforced_formats`` are enforced; the others are treated as its
        keyword lists say of ``format``."""
        if "json_schema" not in self.spec.constraint_kinds:
            pytest.skip("the backend compiles no JSON schemas")
        declared = "enforced" if name in self.spec.enforced_formats else self._declared("format")
        assert self.keyword_behaviour(FORMAT_PROBES[name]) == declared, f"format {name} is not {declared}"

    def _declared(self, keyword: str) -> str:
        return ("ignored" if keyword in self.spec.ignored_keywords else
                "refused" if keyword in self.spec.refused_keywords else "enforced")

    def accepts(self, compiled: CompiledGrammar, text: str) -> bool:
        """Whether a fresh matcher of ``compiled`` takes ``text`` token by token and may end after it."""
        info = self.tokenizer_info()
        matcher = compiled.matcher()
        for token in greedy_tokenize(info, text):
            if token not in self.allowed(matcher):
                return False
            assert matcher.accept_token(token), f"{text!r}: token {token} is allowed but refused"
        return bool(set(info.eos_token_ids) & self.allowed(matcher))

    def _bounded_array(self) -> CompiledGrammar:
        if not self.bounded_json:
            pytest.skip("the backend does not bound JSON whitespace and numbers")
        return self.make_backend().compile(ConstraintSpec(json_schema={"type": "array", "items": {"type": "integer"}}))

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.differing_executors])
    @given(space=st.text(alphabet=" \n", max_size=24))
    def test_bounded_whitespace_is_llama_cpps(self, space: str) -> None:
        """Between two items, exactly llama.cpp's ``space``: nothing, " ", or a newline and at most
        20 spaces or tabs."""
        expected = re.fullmatch(r"(?: |\n[ \t]{0,20})?", space) is not None
        assert self.accepts(self._bounded_array(), f"[1,{space}2]") == expected

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.differing_executors])
    @given(digits=st.integers(1, 40))
    def test_bounded_integers_have_at_most_16_digits(self, digits: int) -> None:
        """An integer of ``digits`` digits is accepted when it has at most 16 (llama.cpp's ``integral-part``)."""
        assert self.accepts(self._bounded_array(), "[" + "7" * digits + "]") == (digits <= 16)

    def check_rejected(self, matcher: GrammarMatcher, tokens: list[int], label: str) -> None:
        """``tokens`` must meet a masked token or a masked end; masked tokens must be refused."""
        for token in tokens:
            if token not in self.allowed(matcher):
                assert not matcher.accept_token(token), f"{label}: token {token} is masked but accepted"
                return
            assert matcher.accept_token(token), f"{label}: token {token} is allowed but refused"
        eos = self.tokenizer_info().eos_token_ids
        assert not self.allowed(matcher) & set(eos), f"{label}: should be rejected but may end here"
        assert not any(matcher.accept_token(e) for e in eos), f"{label}: masked end-of-sequence accepted"
        assert not matcher.is_terminated(), f"{label}: terminated although it should be rejected"

    def test_invalid_tokens_are_refused(self) -> None:
        info = self.tokenizer_info()
        for matcher, _text, tokens, label in self.accepted_walks():
            for token in (*info.special_token_ids, len(info.vocab), info.vocab_size, info.vocab_size + 7):
                assert not matcher.accept_token(token), f"{label}: invalid token id {token} accepted"
            self.walk(matcher, tokens, label)
            self.finish(matcher, label)
            again = tokens[0] if tokens else info.eos_token_ids[0]
            assert not matcher.accept_token(again), f"{label}: accepted a token after termination"

    def test_memory_bytes_is_a_count_or_unknown(self) -> None:
        for _case, compiled, label in self.compiled_cases():
            size = compiled.memory_bytes()
            assert size is None or (isinstance(size, int) and not isinstance(size, bool) and size >= 0), (
                f"{label}: memory_bytes() must be a byte count >= 0 or None (unknown), got {size!r}")

    def test_matchers_are_independent(self) -> None:
        for case, compiled, label in self.compiled_cases():
            tokens = greedy_tokenize(self.tokenizer_info(), case.accepted[0])
            first, second = compiled.matcher(), compiled.matcher()
            start = self.allowed(second)
            self.walk(first, tokens, label)
            self.finish(first, label)
            assert not second.is_terminated() and self.allowed(second) == start, (
                f"{label}: walking one matcher changed another matcher of the same compiled grammar"
            )

    def test_reset_restores_the_start(self) -> None:
        for matcher, _text, tokens, label in self.accepted_walks():
            start = self.allowed(matcher)
            self.walk(matcher, tokens, label)
            self.finish(matcher, label)
            matcher.reset()
            assert not matcher.is_terminated(), f"{label}: still terminated after reset()"
            assert self.allowed(matcher) == start, f"{label}: reset() did not restore the initial bitmask"
            self.walk(matcher, tokens, label)

    def test_jump_forward_is_forced_text(self) -> None:
        vocab = self.tokenizer_info().vocab
        for matcher, text, tokens, label in self.accepted_walks():
            rest = text.encode("utf-8")
            for token in tokens:
                before = self.allowed(matcher)
                forced = matcher.jump_forward()
                assert isinstance(forced, str), f"{label}: jump_forward() returned {forced!r}"
                assert rest.startswith(forced.encode("utf-8")), (
                    f"{label}: jump_forward() forces {forced!r} but the string continues with {rest!r}"
                )
                assert self.allowed(matcher) == before, f"{label}: jump_forward() changed the state"
                assert matcher.accept_token(token), f"{label}: refused {vocab[token]!r} after jump_forward()"
                rest = rest[len(vocab[token]):]

    def test_bitmask_agrees_with_accept_token(self) -> None:
        self._require("rollback")
        info = self.tokenizer_info()
        for matcher, _text, tokens, label in self.accepted_walks():
            for step in range(len(tokens) + 1):
                allowed = self.allowed(matcher)
                for token in range(info.vocab_size):
                    accepted = matcher.accept_token(token)
                    assert accepted == (token in allowed), (
                        f"{label} after {step} tokens: token {token} is "
                        f"{'allowed' if token in allowed else 'masked'} but accept_token returned {accepted}"
                    )
                    if accepted:
                        matcher.rollback(1)
                if step < len(tokens):
                    matcher.accept_token(tokens[step])

    def test_rollback_restores_state(self) -> None:
        self._require("rollback")
        for matcher, _text, tokens, label in self.accepted_walks():
            seen = [self.allowed(matcher)]
            for token in tokens:
                matcher.accept_token(token)
                seen.append(self.allowed(matcher))
            self.finish(matcher, label)
            matcher.rollback(1)
            assert not matcher.is_terminated(), f"{label}: terminated after rolling back end-of-sequence"
            for step in range(len(tokens), -1, -1):
                assert self.allowed(matcher) == seen[step], f"{label}: rollback to {step} tokens: other mask"
                if step:
                    matcher.rollback(1)
            expect_raises(ValueError, matcher.rollback, 1, what=f"{label}: rollback past the start")
            self.walk(matcher, tokens, label)
            matcher.rollback(len(tokens))
            assert self.allowed(matcher) == seen[0], f"{label}: rollback({len(tokens)}) missed the start"
