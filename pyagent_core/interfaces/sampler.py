"""Sampler interface: batch-level logits processors and final token selectors.

A host (the reference engine, or the library ``pyagent-sampler-host`` inside any runtime)
constructs each sampler of a chain once, tells it about requests entering, leaving and moving
between rows of the batch with :meth:`Sampler.update_state`, then on every step calls
:meth:`LogitsProcessor.apply` on the whole ``[num_requests, vocab]`` logits tensor (processors, in
chain order) and finally :meth:`TokenSelector.select` (the chain's one selector, its ``select``
stage) to choose a token per row. Greedy requests (temperature 0) get their argmax from the host,
whichever selector the chain holds (see :class:`TokenSelector`).

Each request carries its own parameters (``params``, keyed by parameter name such as ``"top_k"`` or
``"seed"``); a processor falls back to its engine-level options for a parameter a request leaves
unset. Rows whose parameter disables a processor must come out unchanged.

Every sampler is built the same way, ``cls(options, context)``: ``options`` are its validated
engine-level options (defaults filled in) and ``context`` a :class:`SamplerContext` (the model's
vocabulary size and end-of-sequence ids, and, where the host has one, its tokenizer for samplers
whose parameters hold text).

What the host needs beyond this interface is declared, never assumed from a name: the position of a
sampler in the chain comes from its spec (``SamplerSpec.stage`` and ``position``; a selector's stage
is ``"select"``), the per-request parameters it reads from its options schema (options declared
with ``request=True``), and a processor that is one step of the fused temperature / top-k / top-p /
min-p mask says so by implementing :class:`FusableMaskStep`.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from pyagent_core.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from pyagent_core.interfaces.grammar import TokenizerInfo


GREEDY_PARAM = "temperature"
"""The per-request parameter whose value 0 makes a request greedy (see :func:`is_greedy`)."""


def is_greedy(params: Mapping[str, Any]) -> bool:
    """Whether a request with these parameters is greedy: its ``temperature`` is 0.

    A host gives a greedy request's row the argmax of its processed logits, whatever the chain's
    selector (see :class:`TokenSelector`); an unset temperature is not greedy.
    """
    value = params.get(GREEDY_PARAM)
    return value is not None and not isinstance(value, bool) and value == 0


def _row_label(request: AddedRequest) -> str:
    return f"request at row {request.index}"


@attrs.frozen
class AddedRequest:
    """A request placed at row ``index`` of the batch.

    ``output_token_ids`` is the engine's live list: it grows as tokens are generated, so processors
    that look at history (penalties, DRY) keep a reference instead of copying it.

    ``where`` is how a sampler's messages name the request, as their first words: ``"request at row
    3"`` by default. A host that checks a request's parameters before the request has a row (the
    sampler host does, when a request is submitted) passes its own, so a message reads ``"request:
    top_k=-1 is invalid; ..."``. A sampler that rejects a parameter raises ``ValueError(f"{where}:
    NAME=VALUE is invalid; ...")``.
    """

    index: int
    params: Mapping[str, Any]
    prompt_token_ids: Sequence[int] = ()
    output_token_ids: list[int] = attrs.field(factory=list)
    where: str = attrs.field(default=attrs.Factory(_row_label, takes_self=True), kw_only=True)


class MoveKind(enum.Enum):
    """How a request changed rows: swapped with another row, or moved into an empty row."""

    SWAP = "swap"
    MOVE = "move"


@attrs.frozen
class MovedRequest:
    """Row ``src`` went to ``dst`` (and, for a swap, ``dst`` went to ``src``)."""

    src: int
    dst: int
    kind: MoveKind = MoveKind.SWAP


@attrs.frozen
class BatchUpdate:
    """Changes to the batch since the previous step, applied in order: removed, added, moved.

    ``batch_size`` is the number of rows after the update.
    """

    batch_size: int
    removed: tuple[int, ...] = ()
    added: tuple[AddedRequest, ...] = ()
    moved: tuple[MovedRequest, ...] = ()


class RequestRows:
    """Per-row bookkeeping that applies a :class:`BatchUpdate` to a list of row states.

    A processor subclasses :class:`Sampler`, whose default ``update_state`` keeps ``self.rows``
    up to date; ``self.rows[i]`` holds whatever :meth:`Sampler.row_state` returned for the request
    now at row ``i`` (``None`` for an empty row).
    """

    def __init__(self) -> None:
        self.states: list[Any] = []

    def __len__(self) -> int:
        return len(self.states)

    def __getitem__(self, index: int) -> Any:
        return self.states[index]

    def apply(self, update: BatchUpdate, make_state: Callable[[AddedRequest], Any]) -> None:
        """Apply ``update``; ``make_state(added_request)`` builds the state of a new row.

        Every new state is built before any row changes, so when ``make_state`` raises (a request
        with an invalid parameter) the rows are left exactly as they were.
        """
        new_states = [(added.index, make_state(added)) for added in update.added]
        size = max(update.batch_size, len(self.states))
        self.states.extend([None] * (size - len(self.states)))
        for index in update.removed:
            self.states[index] = None
        for index, state in new_states:
            if index >= len(self.states):
                self.states.extend([None] * (index + 1 - len(self.states)))
            self.states[index] = state
        for move in update.moved:
            src, dst = move.src, move.dst
            if move.kind is MoveKind.SWAP:
                self.states[src], self.states[dst] = self.states[dst], self.states[src]
            else:
                self.states[dst], self.states[src] = self.states[src], None
        del self.states[update.batch_size:]


def _check_vocab_size(_inst: Any, _attr: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"SamplerContext: vocab_size={value!r} is invalid; pass the model's vocabulary size "
                          "(a positive int, the logits' last dimension)")


def _to_token_ids(value: Any) -> tuple[int, ...]:
    ids = tuple(value)
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise ConfigError(f"SamplerContext: eos_token_ids={ids!r} is invalid; pass the model's end-of-sequence "
                          "token ids (non-negative ints)")
    return ids


@attrs.frozen
class SamplerContext:
    """What a sampler is built for: the model's side of the contract, fixed for the sampler's life.

    Token ids are what samplers work on; a sampler whose parameters hold text (DRY's sequence
    breakers are strings in llama.cpp) turns the text into token ids itself, with
    :attr:`tokenizer_info` when the host gives one.

    Raises :class:`~pyagent_core.errors.ConfigError` for a vocabulary size that is not a positive
    int or end-of-sequence ids that are not non-negative ints.
    """

    vocab_size: int = attrs.field(validator=_check_vocab_size)
    """Size of the logits' last dimension: the model's vocabulary (padding rows included)."""

    eos_token_ids: tuple[int, ...] = attrs.field(default=(), converter=_to_token_ids)
    """The model's end-of-sequence token ids (empty when unknown). Requests also carry the ids that
    end them in their ``eos_token_ids`` parameter (with their stop tokens, and none when they ignore
    end of sequence); a processor that needs the model's own ids reads them here."""

    tokenizer_info: Callable[[], TokenizerInfo] | None = attrs.field(default=None, eq=False, kw_only=True)
    """Where the host has the model's tokenizer: a function returning it as a
    :class:`~pyagent_core.interfaces.grammar.TokenizerInfo` (the bytes of every token id, and
    ``encode`` for text). The host builds the record on the first call (it decodes the whole
    vocabulary) and returns the same one afterwards, so call it only when a request needs it; it
    raises with the reason when the tokenizer cannot be described. ``None``: the host has no
    tokenizer (the conformance kit, a bare ``SamplerContext(vocab_size)``); a sampler then refuses
    text parameters with a message that says to pass token ids."""


class Sampler:
    """Shared base of processors and selectors: construction, options and batch bookkeeping.

    Args:
        options: the validated engine-level options of this sampler (defaults filled in).
        context: the model's vocabulary size and end-of-sequence ids.

    Attributes:
        options: a copy of ``options``.
        context: ``context``.
        vocab_size: ``context.vocab_size``, the logits' last dimension.
        rows: the per-row states of the batch (see :class:`RequestRows`).
    """

    def __init__(self, options: Mapping[str, Any], context: SamplerContext) -> None:
        if not isinstance(context, SamplerContext):
            raise TypeError(f"{type(self).__name__}(options, context): context must be a SamplerContext, got "
                            f"{type(context).__name__} ({context!r})")
        self.options = dict(options)
        self.context = context
        self.vocab_size = context.vocab_size
        self.rows = RequestRows()

    def row_state(self, request: AddedRequest) -> Any:
        """Build the per-row state of a new request (default: the request itself)."""
        return request

    def param(self, row: int, name: str, default: Any = None) -> Any:
        """The request's parameter ``name`` at ``row``, else this sampler's option, else ``default``
        (a parameter or option set to ``None`` counts as unset)."""
        state = self.rows[row]
        params = getattr(state, "params", None) or {}
        if name in params and params[name] is not None:
            return params[name]
        option = self.options.get(name)
        return default if option is None else option

    def update_state(self, update: BatchUpdate | None) -> None:
        """Apply the batch changes since the last step (``None``: nothing changed)."""
        if update is not None:
            self.rows.apply(update, self.row_state)

    @classmethod
    def check_available(cls) -> None:
        """Raise with a reason if this sampler cannot run here (deep check, ``--check``)."""


class LogitsProcessor(Sampler, ABC):
    """Transforms the batch's logits; rows that the processor leaves alone come out unchanged."""

    @abstractmethod
    def is_argmax_invariant(self) -> bool:
        """True when :meth:`apply` never changes a row's argmax (the engine skips it for greedy rows)."""

    def leaves_batch_unchanged(self) -> bool:
        """True when :meth:`apply` would return every row of the current batch unchanged, so the
        engine may skip the call (default: False, the call always runs).

        The answer may depend on the rows' parameters, never on the tokens they generate: it must
        hold for every step until the next :meth:`update_state` with a change. A processor that
        keeps history (token counts, a running estimate) must stay correct when calls are skipped.
        """
        return False

    @abstractmethod
    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        """Return processed logits of the same shape ``[num_requests, vocab]``; may work in place."""


class TokenSelector(Sampler, ABC):
    """Chooses the next token of every row from processed logits: the ``select`` stage of a chain.

    A chain holds exactly one selector (its spec declares ``stage="select"``), chosen like the
    backend of any kind: an explicit name (``--samplers top_k,temperature,gumbel``), then
    ``PYAGENT_SAMPLER``, ``pyagent.toml``, the user config, and else the available selector with
    the highest priority.

    Greedy requests. A request is greedy when its ``temperature`` parameter is 0 (:func:`is_greedy`).
    The host, not the selector, chooses a greedy row's token: the argmax of its processed logits, the
    lowest token id among equal maxima. So:

    - a batch of greedy rows only may be decided without calling :meth:`select` at all;
    - in a batch that mixes greedy and sampled rows :meth:`select` sees every row (greedy rows
      included, their logits unscaled: temperature processors leave a temperature of 0 alone), and
      the host keeps the selector's tokens of the sampled rows only.

    A selector must therefore accept any row with a finite logit, and must not assume one call per
    request and step for rows it does not decide: per-request state that advances with each draw
    (a seeded generator, a step counter) advances on calls only, so a sampled request's draws stay
    the same whatever the greedy requests beside it. A selector that is greedy itself (``greedy``)
    makes every request greedy.
    """

    @abstractmethod
    def select(self, logits: torch.Tensor) -> torch.Tensor:
        """Return an ``int64`` tensor ``[num_requests]`` of chosen token ids."""


MASK_STEPS = ("temperature", "top_k", "top_p", "min_p")
"""The steps of the fused mask, in the kernel's order (temperature may also come last)."""


@runtime_checkable
class FusableMaskStep(Protocol):
    """A logits processor that is one step of the fused temperature / top-k / top-p / min-p mask.

    A host may replace the :meth:`LogitsProcessor.apply` calls of such processors by one call of a
    fused kernel (the reference engine does, through ``pyagent_kernels.sampling``): two or more of
    them next to each other in the chain, in the kernel's order (``top_k`` before ``top_p`` before
    ``min_p``, each at most once, and ``temperature`` at most once, first or last), on float32 CPU
    logits. Any other processor, a processor alone, and other dtypes or devices run through
    ``apply``. A processor takes part by implementing this protocol (subclassing it is optional;
    ``isinstance`` checks the two members):

    - :attr:`mask_step` names the step: one of :data:`MASK_STEPS`, fixed for the processor's life.
    - :meth:`row_values` gives the step's parameter for every row of the current batch.

    Per row, with its value ``v`` (the kernel's semantics; each step sees what the ones before it
    kept, and a row of only ``-inf`` logits is left as it is):

    - ``temperature`` (a finite number): when ``v > 0`` and ``v != 1`` every logit ``x`` becomes
      ``x / v`` (float32 division); ``v <= 0`` (greedy by convention) and ``v == 1`` leave the row.
    - ``top_k`` (an integer): when ``0 < v < vocab`` the tokens whose logit is below the row's
      ``v``-th largest become ``-inf`` (tokens tied with it are all kept); ``v <= 0`` or
      ``v >= vocab`` leave the row.
    - ``top_p`` (a number in [0, 1]): over the softmax of the row's finite logits, walking them in
      descending order, every token down to the first one at which the cumulative probability
      reaches ``v`` is kept, with all tokens tied with that one; the others become ``-inf``.
      ``v == 0`` keeps the top token(s); ``v == 1`` leaves the row.
    - ``min_p`` (a number in [0, 1]): a token is kept when ``x - max >= log(v)`` in double
      precision, ``v`` rounded to float32 first (``prob >= v * max_prob``); ``v == 0`` leaves the
      row, ``v == 1`` keeps the tokens tied with the maximum.

    The contract: the processor's own :meth:`LogitsProcessor.apply` gives this step's result for
    its :meth:`row_values` (the conformance kit checks it on logits without ties), so fused and
    separate runs agree. They may differ only where the kernel's rounding decides: top-p's kernel
    sums float32 probabilities in double in descending order, so a cumulative probability within
    float rounding of ``v`` may round the other way, and tokens tied at a cut-off are all kept.

    When the host fuses a processor it calls :meth:`row_values` and
    :meth:`LogitsProcessor.leaves_batch_unchanged` on every step, but not ``apply``: keep no state
    that only ``apply`` would update. Out-of-range values make the kernel raise, so validate them
    when a request is added, as for ``apply``.
    """

    @property
    def mask_step(self) -> str:
        """Which step this processor is: ``"temperature"``, ``"top_k"``, ``"top_p"`` or ``"min_p"``
        (a class attribute such as ``mask_step = "top_k"`` implements it)."""

    def row_values(self) -> Sequence[float]:
        """The step's parameter for each row of the batch, in row order (``len(self.rows)`` values).

        Never change a sequence once returned; return a new one when the values change. A host may
        reuse the kernel parameters it built from a sequence for as long as it gets the same object
        back, so returning the same object while the batch is unchanged saves that work.
        """


def fusable_step(processor: object) -> str | None:
    """The fused-mask step ``processor`` declares (see :class:`FusableMaskStep`), or None when it
    does not implement the protocol.

    Raises :class:`~pyagent_core.errors.ConfigError` when it declares a step that is not one of
    :data:`MASK_STEPS`.
    """
    if not isinstance(processor, FusableMaskStep):
        return None
    step = processor.mask_step
    if step not in MASK_STEPS:
        raise ConfigError(f"{type(processor).__name__} declares mask_step={step!r}, which is not a step of the "
                          f"fused mask; use one of {', '.join(MASK_STEPS)}")
    return step
