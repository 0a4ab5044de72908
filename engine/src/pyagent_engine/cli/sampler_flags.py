"""Sampler flags of ``pyagent generate``, ``chat`` and ``serve``, built from the installed samplers' specs.

Every per-request parameter an installed sampler declares (an option of its spec with
``request=True``, see :func:`pyagent_sampler_host.parameters.request_parameters`) becomes a flag
(``typical_p`` -> ``--typical-p``) with the spec's help, so a third-party sampler's parameters get
flags the moment it is installed; the engine names none of them. Alongside: ``--samplers ORDER``
(the chain, like llama.cpp's ``--samplers``, optionally ending with a token selector), the generic
``--sampler-opt NAME.KEY=VALUE`` (an engine-level option of one sampler, validated against its
schema) and ``--sampler-param NAME=VALUE`` (any declared parameter by name).
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
from pyagent_core.kinds import SAMPLER
from pyagent_core.options import parse_assignments
from pyagent_core.registry import Registry, get_registry
from pyagent_sampler_host.parameters import RequestParameter, request_parameters

PANEL = "Samplers"


@attrs.frozen
class SamplerSettings:
    """What the sampler flags asked for.

    Attributes:
        order: the sampler order string (``None``: the default order).
        options: engine-level options per sampler name, from ``--sampler-opt``.
        params: per-request parameters from the parameter flags and ``--sampler-param`` that were given.
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


def parse_sampler_params(pairs: list[str], declared: Mapping[str, RequestParameter]) -> dict[str, Any]:
    """``--sampler-param NAME=VALUE`` pairs as parameter values, each converted by its declaration
    (a repeatable parameter collects one item per pair: ``logit_bias=15=-5 logit_bias=42=2``).

    Raises :class:`OptionError` for a malformed pair, or a name no installed sampler declares.
    """
    texts: dict[str, list[str]] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise OptionError(f"--sampler-param {pair!r} must be NAME=VALUE, e.g. min_p=0.05")
        texts.setdefault(name.strip(), []).append(value.strip())
    unknown = sorted(set(texts) - set(declared))
    if unknown:
        raise OptionError(f"--sampler-param {unknown[0]}: no installed sampler declares a parameter {unknown[0]!r}; "
                          f"declared: {', '.join(declared)}")
    return {name: declared[name].option.from_cli(f"--sampler-param {name}", values) for name, values in texts.items()}


def _annotation(param: RequestParameter) -> Any:
    """The flag's type for typer: the option's own for a scalar, one string (``list[int]``: ``1,2,3``)
    or a list of strings (one item per occurrence) for the others."""
    option = param.option
    kind: Any = option.type if option.scalar else (list[str] if option.repeatable else str)
    return Annotated[kind | None, typer.Option(param.flag, help=option.parameter_help, rich_help_panel=PANEL)]


EXTRA = (
    inspect.Parameter("samplers", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        str | None, typer.Option("--samplers", rich_help_panel=PANEL, help=(
            "Sampler order, e.g. 'penalties,dry,top_k,typical,top_p,min_p,xtc,temperature', optionally ending "
            "with a token selector ('...,temperature,gumbel'); default: every installed processor that declares a "
            "stage, in stage order, then the selected selector (pyagent use sampler NAME)."))]),
    inspect.Parameter("sampler_opt", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        list[str] | None, typer.Option("--sampler-opt", rich_help_panel=PANEL,
                                       help="Sampler option NAME.KEY=VALUE, e.g. xtc.seed=7 (repeatable).")]),
    inspect.Parameter("sampler_param", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[
        list[str] | None, typer.Option("--sampler-param", rich_help_panel=PANEL, help=(
            "A declared per-request sampler parameter NAME=VALUE, e.g. min_p=0.05 (repeatable)."))]),
)


def with_sampler_flags(command: Callable[..., None], registry: Registry | None = None) -> Callable[..., None]:
    """``command`` with a flag per declared sampler parameter (those of the installed samplers in
    ``registry``, default: the process-wide one) and the generic sampler flags; it receives them as
    ``sampler=SamplerSettings(...)``. A parameter the command declares itself (``temperature``,
    ``top_k``, ``top_p``, ``seed``) keeps the command's flag."""
    signature = inspect.signature(command, eval_str=True)
    kept = [p for name, p in signature.parameters.items() if name != "sampler"]
    declared = request_parameters(b.spec for b in (registry or get_registry()).backends(SAMPLER))
    flags = [param for name, param in declared.items() if name not in signature.parameters]
    added = [*(inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=_annotation(p))
               for p in flags), *EXTRA]

    @functools.wraps(command)
    def wrapper(*args: Any, samplers: str | None = None, sampler_opt: list[str] | None = None,
                sampler_param: list[str] | None = None, **kwargs: Any) -> None:
        params = parse_sampler_params(sampler_param or [], declared)
        for param in flags:
            value = kwargs.pop(param.name, None)
            if value is None or value == []:
                continue
            if param.name in params:
                raise OptionError(f"{param.flag} and --sampler-param {param.name} both set {param.name}; give one")
            option = param.option
            params[param.name] = value if option.scalar else option.from_cli(
                param.flag, value if option.repeatable else [value])
        settings = SamplerSettings(samplers, parse_sampler_opts(sampler_opt or []), params)
        command(*args, sampler=settings, **kwargs)

    # typer reads the signature and the annotations: the command's own, plus the sampler flags
    setattr(wrapper, "__signature__", signature.replace(parameters=[*kept, *added]))  # noqa: B010
    wrapper.__annotations__ = {p.name: p.annotation for p in (*kept, *added)}
    del wrapper.__wrapped__
    return wrapper
