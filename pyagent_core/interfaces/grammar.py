"""Grammar (structured-output) interface: constraints compiled to token-level matchers.

A request's :class:`ConstraintSpec` is compiled once by the selected :class:`GrammarBackend`; every
request gets its own :class:`GrammarMatcher`. Each step the engine asks the matcher to fill its row
of the token bitmask, masks the logits with it, samples, and feeds the chosen token back with
:meth:`GrammarMatcher.accept_token`.

The token bitmask is ``int32 [num_rows, ceil(vocab_size / 32)]``: token ``t`` of row ``r`` is allowed
when bit ``t % 32`` of word ``bitmask[r, t // 32]`` is set (bit 31 is the sign bit). End-of-sequence
tokens are allowed exactly where the constraint may end; accepting one terminates the matcher.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from pyagent_core.errors import SpecError
from pyagent_core.types import CONSTRAINT_KINDS

if TYPE_CHECKING:
    import torch

_WORD = 32

WHITESPACE_MODES = ("bounded", "any", "compact")
"""The values of :attr:`ConstraintSpec.whitespace`."""

MAX_INDENT = 20
"""Spaces or tabs allowed after the newline of bounded JSON whitespace (llama.cpp's ``space`` rule)."""

MAX_NUMBER_DIGITS = 16
"""Digits of the integer and fraction parts of a bounded JSON number (llama.cpp's ``integral-part``
and ``decimal-part`` rules)."""


def _canonical_json(value: str | Mapping[str, Any] | None) -> str | None:
    """Store JSON documents as compact text so constraints stay hashable (usable as cache keys).

    Key order is kept: backends that emit properties in schema order (xgrammar, llguidance) read it.
    """
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _to_choices(value: Iterable[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise SpecError(f"choice must be a list of strings, got the string {value!r}; write [{value!r}]")
    return tuple(value)


@attrs.frozen(kw_only=True)
class ConstraintSpec:
    """What a request's output must match: exactly one of the constraint fields, plus options.

    Attributes:
        json_schema: a JSON Schema, as text or a mapping (stored as compact JSON text, key order kept).
        json_object: any JSON object.
        regex: a regular expression the whole output must match.
        choice: the output is exactly one of these strings.
        grammar: a context-free grammar in ``grammar_dialect`` (e.g. ``"ebnf"``, ``"gbnf"``, ``"lark"``).
        structural_tag: a structural-tag description (tags whose bodies follow schemas), text or mapping:
            ``{"structures": [{"begin", "schema", "end"}, ...], "triggers": [...]}``: free text in which
            a trigger opens a structure whose body follows its schema; or ``{"structures": [...],
            "separator": "..."}``: structures only, this text between two, nothing after the last.
            ``"at_least_one": true`` makes the output open with a structure, ``"stop_after_first":
            true`` ends it after one.
        whitespace: what JSON constraints allow between tokens, one of :data:`WHITESPACE_MODES`:
            ``"bounded"`` (default), as llama.cpp's JSON grammars: nothing, one space, or one newline
            followed by at most :data:`MAX_INDENT` spaces or tabs; ``"any"``: any run of whitespace;
            ``"compact"``: none (``,`` and ``:`` alone). Each backend's README says what it enforces.
        whitespace_pattern: a regex for the whitespace allowed between JSON tokens (overrides ``whitespace``).
        bounded_numbers: JSON numbers keep integer and fraction parts to about
            :data:`MAX_NUMBER_DIGITS` digits, as llama.cpp's JSON grammars do (so a small model cannot
            write digits until the token cap); ``False`` leaves them unbounded.
        additional_properties: JSON schemas that leave ``additionalProperties`` unset allow extra
            properties; ``False`` closes them.

    Raises:
        SpecError: when zero or several constraint fields are set, or one is empty.
    """

    json_schema: str | None = attrs.field(default=None, converter=_canonical_json)
    json_object: bool = False
    regex: str | None = None
    choice: tuple[str, ...] | None = attrs.field(default=None, converter=_to_choices)
    grammar: str | None = None
    grammar_dialect: str = "ebnf"
    structural_tag: str | None = attrs.field(default=None, converter=_canonical_json)
    whitespace: str = "bounded"
    whitespace_pattern: str | None = None
    bounded_numbers: bool = True
    additional_properties: bool = True

    def __attrs_post_init__(self) -> None:
        given = [kind for kind in CONSTRAINT_KINDS if getattr(self, kind) not in (None, False)]
        if len(given) != 1:
            advice = f"got {', '.join(given)}: keep one" if given else "got none: set one"
            raise SpecError(f"a constraint sets exactly one of {', '.join(CONSTRAINT_KINDS)}; {advice}")
        if getattr(self, given[0]) in ("", ()):
            raise SpecError(f"constraint {given[0]} is empty; give a non-empty {given[0]}")
        if self.choice is not None and not all(isinstance(c, str) for c in self.choice):
            raise SpecError(f"choice must hold strings only, got {list(self.choice)!r}")
        if self.whitespace not in WHITESPACE_MODES:
            raise SpecError(f"whitespace must be one of {', '.join(WHITESPACE_MODES)}, got {self.whitespace!r}")

    @property
    def kind(self) -> str:
        """Which constraint is set: one of :data:`pyagent_core.types.CONSTRAINT_KINDS`."""
        return next(k for k in CONSTRAINT_KINDS if getattr(self, k) not in (None, False))

    @property
    def value(self) -> Any:
        """The set constraint's value (``True`` for ``json_object``)."""
        return getattr(self, self.kind)


def _ints(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _to_token_bytes(vocab: Iterable[bytes | str]) -> tuple[bytes, ...]:
    return tuple(t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in vocab)


@attrs.frozen(kw_only=True)
class TokenizerInfo:
    """What a grammar backend needs to know about the tokenizer.

    Attributes:
        vocab: decoded bytes of each token id (strings are encoded as UTF-8); special tokens hold
            their literal text.
        eos_token_ids: tokens that end generation; allowed where the constraint may end.
        special_token_ids: other special tokens (BOS, padding...), never allowed by a grammar.
        vocab_size: the model's logits width, at least ``len(vocab)`` (models pad their vocab);
            ids past ``len(vocab)`` are never allowed. Defaults to ``len(vocab)``.
        encode: the model tokenizer's ids for a text (no special tokens added), or ``None``.
            Backends that restrict forced text to its tokenisation (llguidance) use it to allow the
            model's own tokens; without it they tokenise by longest match. Not part of equality.
    """

    vocab: tuple[bytes, ...] = attrs.field(converter=_to_token_bytes)
    eos_token_ids: tuple[int, ...] = attrs.field(converter=_ints)
    special_token_ids: tuple[int, ...] = attrs.field(default=(), converter=_ints)
    vocab_size: int = attrs.field()
    encode: Callable[[str], list[int]] | None = attrs.field(default=None, eq=False)

    @vocab_size.default
    def _vocab_size(self) -> int:
        return len(self.vocab)

    def __attrs_post_init__(self) -> None:
        if self.vocab_size < len(self.vocab):
            raise SpecError(f"vocab_size {self.vocab_size} is below the vocab's length {len(self.vocab)}")
        bad = [i for i in (*self.eos_token_ids, *self.special_token_ids) if not 0 <= i < len(self.vocab)]
        if bad:
            raise SpecError(f"special token ids {bad} are outside the vocab [0, {len(self.vocab)})")
        if not self.eos_token_ids:
            raise SpecError("eos_token_ids is empty; give the id(s) of the end-of-sequence token")

    def decode(self, token_ids: Iterable[int]) -> bytes:
        """The bytes of ``token_ids`` joined (special tokens give their literal text)."""
        return b"".join(self.vocab[i] for i in token_ids)


UNKNOWN_GRAMMAR_BYTES = 4 * 2**20
"""What a host charges a compiled grammar whose :meth:`CompiledGrammar.memory_bytes` is ``None``: a
JSON-schema grammar of xgrammar over a 49k vocabulary holds about 3 MiB."""


def bitmask_shape(num_rows: int, vocab_size: int) -> tuple[int, int]:
    """Shape of the token bitmask: ``(num_rows, ceil(vocab_size / 32))``."""
    return num_rows, (vocab_size + _WORD - 1) // _WORD


def allocate_bitmask(num_rows: int, vocab_size: int) -> torch.Tensor:
    """A CPU ``int32`` bitmask of :func:`bitmask_shape` with every token allowed."""
    import torch

    return torch.full(bitmask_shape(num_rows, vocab_size), -1, dtype=torch.int32)


def _signed(word: int) -> int:
    return word - (1 << _WORD) if word >= 1 << (_WORD - 1) else word


def set_row(bitmask: torch.Tensor, row: int, allowed: Iterable[int]) -> None:
    """Overwrite ``bitmask[row]`` so that exactly the ``allowed`` token ids have their bit set."""
    words = [0] * int(bitmask.shape[1])
    for token in allowed:
        words[token // _WORD] |= 1 << (token % _WORD)
    bitmask[row] = bitmask.new_tensor([_signed(w) for w in words])


def allowed_tokens(bitmask: torch.Tensor, row: int, vocab_size: int) -> list[int]:
    """The token ids below ``vocab_size`` whose bit is set in ``bitmask[row]``, ascending."""
    words = [w & 0xFFFFFFFF for w in bitmask[row].tolist()]
    return [t for t in range(vocab_size) if words[t // _WORD] >> (t % _WORD) & 1]


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Set ``logits[r, t]`` to ``-inf`` in place wherever the bit of token ``t`` in row ``r`` is clear.

    ``logits`` is ``[num_rows, vocab_size]``; the bitmask must cover at least ``vocab_size`` bits.
    """
    import torch

    vocab = logits.shape[-1]
    bits = torch.arange(_WORD, dtype=torch.int32, device=bitmask.device)
    unpacked = (bitmask.unsqueeze(-1) >> bits) & 1
    allowed = unpacked.reshape(bitmask.shape[0], -1)[:, :vocab].to(device=logits.device, dtype=torch.bool)
    logits.masked_fill_(~allowed, float("-inf"))


class GrammarMatcher(ABC):
    """The state of one request walking a compiled constraint, token by token."""

    @abstractmethod
    def accept_token(self, token_id: int) -> bool:
        """Advance by ``token_id`` and return ``True``; return ``False`` and keep the state if the
        token is not allowed here: a token the constraint forbids, a special token, an id outside the
        vocabulary, or any token once terminated. Never raises for a bad token id."""

    @abstractmethod
    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed next tokens into ``bitmask[row]`` (an ``int32`` bitmask, see module doc).

        The result must agree with :meth:`accept_token`: a token's bit is set exactly when
        accepting it would succeed.
        """

    @abstractmethod
    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (used after rejected speculative drafts).

        Raises ``ValueError`` if fewer tokens were accepted; backends without rollback raise
        ``NotImplementedError`` (their spec says ``rollback=False``).
        """

    @abstractmethod
    def is_terminated(self) -> bool:
        """True once an end-of-sequence token was accepted."""

    @abstractmethod
    def reset(self) -> None:
        """Return to the initial state, as if freshly created."""

    def jump_forward(self) -> str:
        """Text that is forced from here on; ``""`` when nothing is forced or the backend does not
        report it. Does not advance the matcher.

        A host must not append this text as its own tokenization: where the mask allows several
        tokenizations, the model may choose another and its output changes. pyagent's engine does not
        use it; it forces only a token alone in the mask (docs/grammars.md, "Jump-forward")."""
        return ""


class CompiledGrammar(ABC):
    """A constraint compiled for one tokenizer; cheap to instantiate matchers from, reusable."""

    @abstractmethod
    def matcher(self) -> GrammarMatcher:
        """A fresh matcher at the start of the constraint."""

    def memory_bytes(self) -> int | None:
        """Bytes this grammar holds of its own (automata, token-mask caches; not what it shares with the
        backend's other grammars), as the backend counts them. A host's cache of compiled grammars is
        bounded by their sum. ``None`` (the default): the backend cannot tell, and a host charges an
        estimate (pyagent's engine: :data:`UNKNOWN_GRAMMAR_BYTES`)."""
        return None


@attrs.frozen(kw_only=True)
class GrammarContext:
    """What a grammar backend is built for.

    Attributes:
        tokenizer_info: the model's tokenizer, as the bitmasks and token ids refer to it.
    """

    tokenizer_info: TokenizerInfo


class GrammarBackend(ABC):
    """Compiles :class:`ConstraintSpec` s into :class:`CompiledGrammar` s for one tokenizer.

    Args:
        options: the backend's validated options (defaults filled in).
        context: the tokenizer, see :class:`GrammarContext`; ``context.tokenizer_info`` is also
            the backend's ``tokenizer_info``.
    """

    def __init__(self, options: Mapping[str, Any], context: GrammarContext) -> None:
        self.options = dict(options)
        self.context = context
        self.tokenizer_info = context.tokenizer_info

    @classmethod  # noqa: B027 - optional hook
    def check_available(cls) -> None:
        """Raise with a reason if this backend cannot run here (deep check, ``--check``)."""

    @abstractmethod
    def supports(self, constraint: ConstraintSpec) -> str | None:
        """``None`` when :meth:`compile` can handle ``constraint``, else the reason it cannot.

        Never raises; the engine uses the reason to fall back to the next backend in its chain.
        """

    @abstractmethod
    def compile(self, constraint: ConstraintSpec) -> CompiledGrammar:
        """Compile a supported constraint; raise ``ValueError`` if it is malformed (bad regex...)."""

    def check_supported(self, constraint: ConstraintSpec) -> None:
        """Raise ``ValueError`` with :meth:`supports`' reason when ``constraint`` is not supported.

        Call it first in :meth:`compile`, so a direct call never compiles what :meth:`supports` refuses.
        """
        reason = self.supports(constraint)
        if reason is not None:
            raise ValueError(reason)

