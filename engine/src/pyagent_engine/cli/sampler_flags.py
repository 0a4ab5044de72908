"""Sampler flags of ``pyagent generate`` and ``pyagent chat``, declared once as a table.

Every per-request sampler parameter becomes a flag (``typical_p`` -> ``--typical-p``), alongside
``--samplers ORDER`` (the processor chain, like llama.cpp's ``--samplers``) and the generic
``--sampler-opt NAME.KEY=VALUE`` (an engine-level option of one sampler, validated against its schema).
:func:`with_sampler_flags` adds them to a command and hands the command one :class:`SamplerSettings`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import attrs
import typer

from pyagent_core.errors import OptionError
from pyagent_core.options import parse_assignments

PANEL = "Samplers"


def _ids(text: str) -> list[int]:
    """``"1,2, 3"`` -> ``[1, 2, 3]``."""
    try:
        return [int(part) for part in text.replace(" ", ",").split(",") if part.strip()]
    except ValueError:
        raise OptionError(f"expected comma-separated token ids such as 1,2,3; got {text!r}") from None


def _sequences(texts: list[str]) -> list[list[int]]:
    """Each ``"12,7"`` -> one token id sequence."""
    return [_ids(text) for text in texts]


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", "'": "'", '"': '"'}


def _unescape(text: str) -> str:
    r"""``\n``, ``\r``, ``\t``, ``\\``, ``\'``, ``\"`` and ``\xHH`` as the characters they
    stand for (as llama.cpp reads its string flags); any other backslash stays as written."""
    out, i = [], 0
    while i < len(text):
        char, following = text[i], text[i + 1:i + 2]
        if char == "\\" and following in _ESCAPES:
            out.append(_ESCAPES[following])
            i += 2
        elif char == "\\" and following == "x" and _is_hex(text[i + 2:i + 4]):
            out.append(chr(int(text[i + 2:i + 4], 16)))
            i += 4
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _is_hex(digits: str) -> bool:
    return len(digits) == 2 and all(d in "0123456789abcdefABCDEF" for d in digits)


def _breakers(texts: list[str]) -> list[str]:
    """The breaker strings with their escapes read (``\\n`` typed is a newline); ``none`` alone is no
    breakers (``[]``)."""
    if texts == ["none"]:
        return []
    breakers = [_unescape(text) for text in texts]
    if "" in breakers or "none" in texts:
        raise OptionError(f"--dry-sequence-breakers takes non-empty strings, or 'none' alone for no breakers; "
                          f"got {texts!r}")
    return breakers


def _bias(texts: list[str]) -> dict[int, float]:
    """``["15=-5", "42=2.5"]`` -> ``{15: -5.0, 42: 2.5}``."""
    out = {}
    for token, value in parse_assignments(texts).items():
        try:
            out[int(token)] = float(value)
        except ValueError:
            raise OptionError(f"--logit-bias takes TOKEN_ID=BIAS such as 15=-5; got {token}={value}") from None
    return out


@attrs.frozen
class SamplerFlag:
    """One parameter flag: the request parameter it sets, its CLI type and help, and a converter."""

    param: str
    type: Any
    help: str
    convert: Callable[[Any], Any] | None = None
    repeatable: bool = False

    @property
    def flag(self) -> str:
        """``--typical-p`` for ``typical_p``."""
        return "--" + self.param.replace("_", "-")


SAMPLER_FLAGS: tuple[SamplerFlag, ...] = (
    SamplerFlag("min_p", float, "Drop tokens below min_p times the top probability, in [0, 1] (0: off)."),
    SamplerFlag("typical_p", float, "Locally typical sampling mass, in [0, 1] (1: off)."),
    SamplerFlag("epsilon_cutoff", float, "Epsilon sampling cutoff, in [0, 1] (0: off)."),
    SamplerFlag("eta_cutoff", float, "Eta sampling cutoff, in [0, 1] (0: off)."),
    SamplerFlag("top_n_sigma", float, "Keep logits within n standard deviations of the top, >= 0 (0: off)."),
    SamplerFlag("dynatemp_range", float, "Dynamic temperature in [T - range, T + range], >= 0 (0: off)."),
    SamplerFlag("dynatemp_exponent", float, "Exponent of the entropy in dynamic temperature, >= 0."),
    SamplerFlag("repetition_penalty", float, "Repetition penalty, > 0 (1: off)."),
    SamplerFlag("frequency_penalty", float, "Frequency penalty, in [-2, 2] (0: off)."),
    SamplerFlag("presence_penalty", float, "Presence penalty, in [-2, 2] (0: off)."),
    SamplerFlag("penalty_last_n", int, "Tokens of context the penalties look at (-1: all)."),
    SamplerFlag("dry_multiplier", float, "DRY penalty scale, >= 0 (0: off)."),
    SamplerFlag("dry_base", float, "DRY penalty growth per repeated token, >= 1."),
    SamplerFlag("dry_allowed_length", int, "Repeats up to this long are not penalised by DRY, >= 1."),
    SamplerFlag("dry_penalty_last_n", int, "Tokens of context DRY scans, >= -1 (-1: all, 0: off)."),
    SamplerFlag("dry_sequence_breakers", str,
                "DRY sequence breaker string, escapes such as \\n read (repeatable; replaces the default "
                "'\\n' ':' '\"' '*'; 'none': no breakers).", _breakers, repeatable=True),
    SamplerFlag("xtc_probability", float, "Chance per step that XTC removes the top choices, in [0, 1] (0: off)."),
    SamplerFlag("xtc_threshold", float, "Probability from which XTC counts a token as a top choice, in [0, 1]."),
    SamplerFlag("mirostat", int, "Mirostat version: 0 (off), 1 or 2."),
    SamplerFlag("mirostat_tau", float, "Mirostat target surprise in bits, >= 0."),
    SamplerFlag("mirostat_eta", float, "Mirostat learning rate, >= 0."),
    SamplerFlag("no_repeat_ngram_size", int, "Ban repeating any n-gram of this size, >= 0 (0: off)."),
    SamplerFlag("logit_bias", str, "TOKEN_ID=BIAS with BIAS in [-100, 100] (repeatable).", _bias, repeatable=True),
    SamplerFlag("bad_words_ids", str, "A banned token id sequence, e.g. 12,7 (repeatable).", _sequences,
                repeatable=True),
    SamplerFlag("allowed_token_ids", str, "Only these token ids, e.g. 1,2,3.", _ids),
    SamplerFlag("suppress_tokens", str, "Never these token ids, e.g. 1,2,3.", _ids),
    SamplerFlag("min_tokens", int, "Tokens to generate before end-of-sequence is allowed, >= 0."),
)


@attrs.frozen
class SamplerSettings:
    """What the sampler flags asked for.

    Attributes:
        order: the processor order string (``None``: the default order).
        options: engine-level options per sampler name, from ``--sampler-opt``.
        params: per-request parameters from the parameter flags that were given.
    """

    order: str | None = None
    options: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    params: Mapping[str, Any] = attrs.field(factory=dict)


def parse_sampler_opts(pairs: list[str]) -> dict[str, dict[str, str]]:
    """``["dry.dry_base=2"]`` -> ``{"dry": {"dry_base": "2"}}``; raises :class:`OptionError` when malformed."""
    options: dict[str, dict[str, str]] = {}
    for key, value in parse_assignments(pairs).items():
        name, dot, option = key.partition(".")
        if not dot or not name or not option:
            raise OptionError(f"--sampler-opt {key}={value} must be NAME.KEY=VALUE, e.g. xtc.seed=7")
        options.setdefault(name, {})[option] = value
    return options


def _option(flag: SamplerFlag) -> inspect.Parameter:
    kind: Any = flag.type
    kind = list[kind] | None if flag.repeatable else kind | None
    annotation = Annotated[kind, typer.Option(flag.flag, help=flag.help, rich_help_panel=PANEL)]
    return inspect.Parameter(flag.param, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)


EXTRA = (
    inspect.Parameter("samplers", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        str | None, typer.Option("--samplers", rich_help_panel=PANEL, help=(
            "Processor order, e.g. 'penalties,dry,top_k,typical,top_p,min_p,xtc,temperature' "
            "(default: every installed processor that declares a stage, in stage order)."))]),
    inspect.Parameter("sampler_opt", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        list[str] | None, typer.Option("--sampler-opt", rich_help_panel=PANEL,
                                       help="Sampler option NAME.KEY=VALUE, e.g. xtc.seed=7 (repeatable).")]),
)


def with_sampler_flags(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with every sampler flag; it receives them as ``sampler=SamplerSettings(...)``."""
    signature = inspect.signature(command, eval_str=True)
    kept = [p for name, p in signature.parameters.items() if name != "sampler"]
    added = [*(_option(flag) for flag in SAMPLER_FLAGS), *EXTRA]

    @functools.wraps(command)
    def wrapper(*args: Any, samplers: str | None = None, sampler_opt: list[str] | None = None,
                **kwargs: Any) -> None:
        params = {}
        for flag in SAMPLER_FLAGS:
            value = kwargs.pop(flag.param, None)
            if value is not None and value != []:
                params[flag.param] = flag.convert(value) if flag.convert else value
        settings = SamplerSettings(samplers, parse_sampler_opts(sampler_opt or []), params)
        command(*args, sampler=settings, **kwargs)

    # typer reads the signature and the annotations: the command's own, plus the sampler flags
    setattr(wrapper, "__signature__", signature.replace(parameters=[*kept, *added]))  # noqa: B010
    wrapper.__annotations__ = {p.name: p.annotation for p in (*kept, *added)}
    del wrapper.__wrapped__
    return wrapper
