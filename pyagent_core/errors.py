"""Exception classes raised by pyagent.

Every message says what was wrong, with which value, and what to do about it. The CLI prints
``str(error)`` without a traceback for any :class:`PyagentError` and exits non-zero.
"""

from __future__ import annotations

from collections.abc import Iterable


def _choices(names: Iterable[str]) -> str:
    listed = sorted(names)
    return ", ".join(listed) if listed else "(none installed)"


class PyagentError(Exception):
    """Base class of every error pyagent raises on purpose."""


class SpecError(PyagentError, ValueError):
    """A plugin registered a malformed spec record (bad name, impl path, option or field)."""


class UnknownKindError(PyagentError, KeyError):
    """A component kind that pyagent does not define was named."""

    def __init__(self, kind: str, valid: Iterable[str]) -> None:
        self.kind = kind
        super().__init__(f"unknown component kind {kind!r}; choose one of: {_choices(valid)}")

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class SelectionError(PyagentError):
    """Base class for errors raised while selecting a backend by name."""


class UnknownBackendError(SelectionError, KeyError):
    """No installed plugin registered a backend of that kind under that name."""

    def __init__(self, kind: str, name: str, valid: Iterable[str], hint: str = "") -> None:
        self.kind, self.name, self.hint = kind, name, hint
        msg = f"no {kind} backend named {name!r}; choose one of: {_choices(valid)}"
        super().__init__(msg + (f" ({hint})" if hint else ""))

    def __str__(self) -> str:
        return str(self.args[0])


class BackendUnavailableError(SelectionError):
    """The backend is registered but cannot run here (missing requirement, failed check, broken plugin)."""

    def __init__(self, kind: str, name: str, reason: str, valid: Iterable[str]) -> None:
        self.kind, self.name, self.reason = kind, name, reason
        super().__init__(
            f"{kind} backend {name!r} is not available: {reason}; "
            f"available {kind} backends: {_choices(valid)}"
        )


class NoBackendError(SelectionError):
    """Nothing selected a backend of this kind and none is available to be the default."""

    def __init__(self, kind: str, unavailable: Iterable[tuple[str, str]], blocked: str = "") -> None:
        self.kind = kind
        reasons = "; ".join(f"{name}: {reason}" for name, reason in unavailable)
        if blocked:
            super().__init__(f"no {kind} backend is available: {blocked}; allow a plugin of this kind in "
                             "PYAGENT_PLUGINS (or unset it), see `pyagent plugins`")
            return
        detail = f"installed but unavailable: {reasons}" if reasons else "none is installed"
        super().__init__(f"no {kind} backend is available ({detail}); install a plugin of this kind, "
                         "see `pyagent list` and the backend matrix in docs/backends.md")


class NotSelectableError(SelectionError):
    """A backend that the kind's selection cannot name (a sampler selection naming a logits processor)."""

    def __init__(self, kind: str, name: str, source: str, why: str, valid: Iterable[str]) -> None:
        self.kind, self.name = kind, name
        super().__init__(f"{kind} {name!r} (from {source}) {why}; the {kind} selection is one of: "
                         f"{', '.join(sorted(valid)) or '(none installed)'}")


class NothingSelectedError(SelectionError):
    """Nothing selects a backend of a kind that has no default (the parsers)."""

    def __init__(self, kind: str, env_var: str, no_default: str) -> None:
        self.kind = kind
        super().__init__(f"no {kind} is selected and the kind has no default ({no_default}); choose one with "
                         f"`pyagent use {kind} NAME`, {env_var}=NAME or the command's flag")


class AmbiguousBackendError(SelectionError):
    """Two or more distributions registered the same backend name for one kind."""

    def __init__(self, kind: str, name: str, dists: Iterable[str]) -> None:
        self.kind, self.name, self.dists = kind, name, sorted(dists)
        qualified = ", ".join(f"{d}:{name}" for d in self.dists)
        super().__init__(
            f"{kind} backend {name!r} is registered by several distributions "
            f"({', '.join(self.dists)}); select one as DIST:NAME, one of: {qualified}"
        )


class OptionError(PyagentError, ValueError):
    """A backend option was unknown, of the wrong type, or out of range."""


class ConfigError(PyagentError):
    """A configuration file or environment variable could not be read or has a bad value."""


class ScaffoldError(PyagentError):
    """``pyagent new-plugin`` could not create the requested plugin."""


class EvictionError(PyagentError, LookupError):
    """An eviction policy was misused: evict when empty, unknown or duplicate block id, insert when full."""


class TraceError(PyagentError, ValueError):
    """A KV-cache block trace cannot be replayed: unreadable, malformed line, or not a prefix chain."""


class ModelLoadError(PyagentError):
    """A model could not be loaded; the subclasses say whether it is missing, malformed or unsupported."""


class ModelNotFoundError(ModelLoadError, FileNotFoundError):
    """The model path names nothing on disk."""


class ModelFormatError(ModelLoadError, ValueError):
    """The model file or folder is not what it claims: not a GGUF file, truncated, or missing pieces."""


class UnsupportedModelError(ModelLoadError):
    """The model is well formed but uses an architecture, tokenizer or feature pyagent does not run."""


class LoRAAdapterError(PyagentError, ValueError):
    """A LoRA adapter cannot be served: unreadable or malformed, made for another base model, asking for
    what pyagent does not run (``modules_to_save``, DoRA), or too large for the model's slots."""


class UnknownLoRAAdapterError(LoRAAdapterError, LookupError):
    """A request or an unload names a LoRA adapter the engine does not serve (a server answers 404)."""


class ChatTemplateError(PyagentError, ValueError):
    """A chat template could not be rendered: bad messages, a template error, or ``raise_exception``."""


class RequestError(PyagentError, ValueError):
    """A generation request is invalid: empty or too long prompt, bad sampling parameters."""


class ConstraintError(RequestError):
    """A request's structured-output constraint cannot be served; raised (or reported) before generation."""


class ConstraintTooLargeError(ConstraintError):
    """The constraint's text is larger than the configured limit."""


class ConstraintTooDeepError(ConstraintError):
    """The constraint's JSON nests deeper than the limit (checked before anything walks it recursively)."""


class InvalidSchemaError(ConstraintError):
    """A JSON schema is not valid JSON, or not a valid JSON Schema (checked against its metaschema)."""


class UnresolvedReferenceError(InvalidSchemaError):
    """A ``$ref`` of a JSON schema points at nothing inside the schema (pyagent retrieves no remote schema)."""


class RegexSyntaxError(ConstraintError):
    """A regular expression does not parse."""


class UnsatisfiableConstraintError(ConstraintError):
    """The constraint admits no output at all (contradictory bounds, an empty enum, ``false``)."""


class UnsupportedConstraintError(ConstraintError):
    """No grammar backend that may serve the request can compile the constraint; the reasons are listed."""


class GrammarBackendError(ConstraintError):
    """The grammar backend the request names is unknown or cannot run here."""


class GrammarTimeoutError(ConstraintError):
    """Compiling the constraint took longer than the configured limit."""
