"""The structured-output options of ``pyagent generate``: one constraint, the grammar backend, fallback.

Turns ``--json-schema FILE | --json-object | --regex RE | --choice a,b,c | --grammar FILE`` into the
request's :class:`~pyagent_engine.requests.structured_params.StructuredOutputParams`, and describes afterwards
which backend served the requests and how many tokens jump-forward appended.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pyagent_core.errors import RequestError
from pyagent_core.interfaces.grammar import WHITESPACE_MODES
from pyagent_core.text import read_utf8

if TYPE_CHECKING:
    from pyagent_engine.requests.request import RequestOutput
    from pyagent_engine.requests.structured_params import StructuredOutputParams
    from pyagent_engine.structured.orchestrator import StructuredConfig

JsonSchemaOpt = Annotated[Path | None, typer.Option("--json-schema", help="Output must validate against this "
                                                    "JSON Schema file.")]
JsonObjectOpt = Annotated[bool, typer.Option("--json-object", help="Output must be a JSON object.")]
RegexOpt = Annotated[str | None, typer.Option("--regex", help="Output must match this regular expression.")]
ChoiceOpt = Annotated[str | None, typer.Option("--choice", help="Output is one of these comma-separated strings.")]
GrammarOpt = Annotated[Path | None, typer.Option("--grammar", help="Output must follow this grammar file "
                                                 "(EBNF; .lark: Lark, .gbnf: GBNF).")]
GrammarBackendOpt = Annotated[str, typer.Option("--grammar-backend", help="Grammar backend NAME, or auto "
                                                "(walk the fallback order).")]
NoFallbackOpt = Annotated[bool, typer.Option("--no-grammar-fallback", help="With auto, try only the first "
                                             "backend of the fallback order.")]
GrammarOrderOpt = Annotated[str | None, typer.Option("--grammar-order", help="Fallback order of auto: "
                                                     "comma-separated backend names.")]
GrammarTimeoutOpt = Annotated[float, typer.Option("--grammar-timeout", help="Seconds a constraint may take "
                                                  "to compile before its request fails.")]
NoJumpForwardOpt = Annotated[bool, typer.Option("--no-jump-forward", help="Sample every token, also those a "
                                                "constraint forces (a token alone in the mask).")]

GrammarCacheOpt = Annotated[float | None, typer.Option(
    "--grammar-cache-mib", help="MiB of compiled grammars kept for reuse, least recently used dropped first "
                                "(0: none; default: 256).")]

JsonWhitespaceOpt = Annotated[str, typer.Option(
    "--json-whitespace", help="Whitespace between JSON tokens: bounded (one space, or a newline and at most "
                              "20 indentation characters), any (free), compact (none).")]

DIALECTS = {".lark": "lark", ".gbnf": "gbnf"}


def structured_params(json_schema: Path | None, json_object: bool, regex: str | None, choice: str | None,
                      grammar: Path | None, backend: str, no_fallback: bool,
                      config: StructuredConfig, whitespace: str = "bounded") -> StructuredOutputParams | None:
    """The request's structured-output settings from the CLI flags, ``None`` when no constraint is given.

    The constraint is checked at once (before the model loads). Raises :class:`RequestError` (or its
    :class:`~pyagent_core.errors.ConstraintError` subclasses) when several constraints are given, a file
    cannot be read, or the constraint is malformed.
    """
    from pyagent_core.interfaces.grammar import ConstraintSpec
    from pyagent_engine.requests.structured_params import StructuredOutputParams
    from pyagent_engine.structured.checks import check_constraint

    flags = {"--json-schema": json_schema is not None, "--json-object": json_object, "--regex": regex is not None,
             "--choice": choice is not None, "--grammar": grammar is not None}
    given = [flag for flag, present in flags.items() if present]
    if len(given) > 1:
        raise RequestError(f"a request takes one constraint, got {' and '.join(given)}; keep one")
    if whitespace not in WHITESPACE_MODES:
        raise RequestError(f"--json-whitespace takes {', '.join(WHITESPACE_MODES)}, got {whitespace!r}")
    if whitespace != "bounded" and not (json_schema is not None or json_object):
        raise RequestError("--json-whitespace applies to --json-schema and --json-object; add one, or drop it")
    if not given:
        if backend != "auto" or no_fallback:
            raise RequestError("--grammar-backend and --no-grammar-fallback need a constraint "
                               "(--json-schema, --json-object, --regex, --choice or --grammar)")
        return None
    if json_schema is not None:
        constraint = ConstraintSpec(json_schema=read_utf8(json_schema, "JSON schema"), whitespace=whitespace)
    elif grammar is not None:
        constraint = ConstraintSpec(grammar=read_utf8(grammar, "grammar"),
                                    grammar_dialect=DIALECTS.get(grammar.suffix.lower(), "ebnf"))
    elif choice is not None:
        constraint = ConstraintSpec(choice=[c.strip() for c in choice.split(",") if c.strip()])
    elif regex is not None:
        constraint = ConstraintSpec(regex=regex)
    else:
        constraint = ConstraintSpec(json_object=True, whitespace=whitespace)
    check_constraint(constraint, config.max_constraint_bytes)
    return StructuredOutputParams(constraint=constraint, backend=backend, fallback=not no_fallback)


def structured_config(order: str | None, timeout: float, no_jump_forward: bool = False,
                      cache_mib: float | None = None) -> StructuredConfig:
    """Engine-wide structured-output settings from ``--grammar-order``, ``--grammar-timeout``,
    ``--no-jump-forward`` and ``--grammar-cache-mib`` (``None``: the default cache size).

    Raises :class:`RequestError` for a cache size that is not a number of MiB >= 0.
    """
    from pyagent_engine.structured.orchestrator import StructuredConfig

    sizes = {}
    if cache_mib is not None:
        if not 0 <= cache_mib < math.inf:
            raise RequestError(f"--grammar-cache-mib must be a number of MiB >= 0 (0: no cache), got {cache_mib}")
        sizes["cache_bytes"] = round(cache_mib * 2**20)
    return StructuredConfig(fallback_order=order or (), compile_timeout_s=timeout, jump_forward=not no_jump_forward,
                            **sizes)


def grammar_backends(finals: Sequence[RequestOutput]) -> str | None:
    """The grammar backends that served ``finals`` (comma-separated), ``None`` when none was constrained."""
    reports = [o.structured for o in finals if o.structured is not None]
    if not reports:
        return None
    return ",".join(sorted({r.backend for r in reports if r.backend})) or "none"


def grammar_notes(finals: Sequence[RequestOutput]) -> str:
    """The summary's grammar part: jump-forward tokens, the backends ``auto`` skipped, with reasons, and
    the schema keywords the serving backend did not enforce."""
    reports = [o.structured for o in finals if o.structured is not None]
    if not reports:
        return ""
    jumped = sum(r.jump_forward_tokens for r in reports)
    skipped = sorted({f"{s.backend} ({s.reason})" for r in reports for s in r.skipped})
    unenforced = sorted({f"{keyword} ({r.backend})" for r in reports for keyword in r.unenforced})
    note = f", {jumped} jump-forward tokens"
    note += f"; grammar fallback skipped {'; '.join(skipped)}" if skipped else ""
    return note + (f"; NOT ENFORCED (no backend enforces them): {', '.join(unenforced)}" if unenforced else "")
