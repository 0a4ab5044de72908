"""Every pluggy hook specification of pyagent.

A plugin is a module of functions decorated with :data:`pyagent_core.hookimpl` whose names match
the specifications below; the module is named by an entry point in the ``pyagent`` group. A plugin
implements only the hooks it needs.

Registration hooks receive a ``register`` callback and call it once per backend with a frozen spec
record from :mod:`pyagent_core.types`. They must not import the backend's implementation or heavy
libraries (torch, the grammar library...): they run every time plugins are listed.

Lifecycle hooks are called by an engine (pyagent-engine's, or another host's) with frozen records
from :mod:`pyagent_core.records`; their return values are ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

from pyagent_core.records import DoctorCheck, EngineInfo, RequestInfo, StepStats
from pyagent_core.types import (
    AttentionSpec,
    EvictionSpec,
    GrammarSpec,
    MixerSpec,
    ModelSpec,
    ProposerSpec,
    ReasoningParserSpec,
    SamplerSpec,
    SchedulerSpec,
    ToolParserSpec,
)

if TYPE_CHECKING:
    import typer

PROJECT = "pyagent"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --- registration: one hook per component kind -------------------------------------------------


@hookspec
def pyagent_register_attention_backends(register: Callable[[AttentionSpec], None]) -> None:
    """Register attention backends.

    Args:
        register: call once per backend with an :class:`~pyagent_core.types.AttentionSpec`.

    Returns:
        Nothing; the return value is ignored. Not ``firstresult``: every plugin's hook runs.
    """


@hookspec
def pyagent_register_mixers(register: Callable[[MixerSpec], None]) -> None:
    """Register mixer backends: the sequence mixers beside attention (short convolution, Mamba2's SSD,
    Gated DeltaNet, multi-head latent attention).

    Args:
        register: call once per backend with a :class:`~pyagent_core.types.MixerSpec`.

    Returns:
        Nothing; the return value is ignored. Not ``firstresult``: every plugin's hook runs.
    """


@hookspec
def pyagent_register_samplers(register: Callable[[SamplerSpec], None]) -> None:
    """Register samplers: batch-level logits processors and final token selectors.

    Args:
        register: call once per sampler with a :class:`~pyagent_core.types.SamplerSpec`.

    Returns:
        Nothing; the return value is ignored. Not ``firstresult``: every plugin's hook runs.
    """


@hookspec
def pyagent_register_grammar_backends(register: Callable[[GrammarSpec], None]) -> None:
    """Register structured-output (grammar) backends.

    Args:
        register: call once per backend with a :class:`~pyagent_core.types.GrammarSpec`.

    Returns:
        Nothing; the return value is ignored. Not ``firstresult``: every plugin's hook runs.
    """


@hookspec
def pyagent_register_proposers(register: Callable[[ProposerSpec], None]) -> None:
    """Register speculative-decoding proposers.

    Args:
        register: call once per proposer with a :class:`~pyagent_core.types.ProposerSpec`.

    Returns:
        Nothing; the return value is ignored. Not ``firstresult``: every plugin's hook runs.
    """


@hookspec
def pyagent_register_eviction_policies(register: Callable[[EvictionSpec], None]) -> None:
    """Register KV-cache eviction policies.

    Args:
        register: call once per policy with an :class:`~pyagent_core.types.EvictionSpec`.

    Returns:
        Nothing; the return value is ignored. Not ``firstresult``: every plugin's hook runs.
    """


@hookspec
def pyagent_register_schedulers(register: Callable[[SchedulerSpec], None]) -> None:
    """Register scheduling policies (the waiting-queue order and the preemption victim).

    Args:
        register: call once per policy with a :class:`~pyagent_core.types.SchedulerSpec`.

    Returns:
        Nothing; the return value is ignored. Not ``firstresult``: every plugin's hook runs.
    """


@hookspec
def pyagent_register_models(register: Callable[[ModelSpec], None]) -> None:
    """Register model architectures (the decoders checkpoints and GGUF files run on).

    Args:
        register: call once per architecture with a :class:`~pyagent_core.types.ModelSpec`.

    Returns:
        Nothing; the return value is ignored. Not ``firstresult``: every plugin's hook runs.
    """


@hookspec
def pyagent_register_tool_parsers(register: Callable[[ToolParserSpec], None]) -> None:
    """Register tool-call parsers.

    Args:
        register: call once per parser with a :class:`~pyagent_core.types.ToolParserSpec`.

    Returns:
        Nothing; the return value is ignored. Not ``firstresult``: every plugin's hook runs.
    """


@hookspec
def pyagent_register_reasoning_parsers(register: Callable[[ReasoningParserSpec], None]) -> None:
    """Register reasoning parsers.

    Args:
        register: call once per parser with a :class:`~pyagent_core.types.ReasoningParserSpec`.

    Returns:
        Nothing; the return value is ignored. Not ``firstresult``: every plugin's hook runs.
    """


# --- engine lifecycle ----------------------------------------------------------------------------
#
# An engine fires these with frozen snapshots (pyagent_core.records), never with its own objects.
# Each plugin's implementation runs in isolation: one that raises is reported with a warning and the
# engine goes on.


@hookspec
def pyagent_engine_started(engine: EngineInfo) -> None:
    """Called once after an engine has loaded its model and selected its backends.

    Args:
        engine: the engine's model, sizes and chosen backends.

    Returns:
        Nothing. Not ``firstresult``.
    """


@hookspec
def pyagent_engine_stopped(engine: EngineInfo) -> None:
    """Called once when an engine shuts down, after its last request has finished.

    Args:
        engine: the engine that stopped.

    Returns:
        Nothing. Not ``firstresult``.
    """


@hookspec
def pyagent_request_added(engine: EngineInfo, request: RequestInfo) -> None:
    """Called when a request has been validated and queued.

    Args:
        engine: the engine that took the request.
        request: the request as queued (id, prompt token ids, sampling parameters, arrival time).

    Returns:
        Nothing. Not ``firstresult``.
    """


@hookspec
def pyagent_request_finished(engine: EngineInfo, request: RequestInfo, reason: str) -> None:
    """Called when a request finishes, successfully or not.

    Args:
        engine: the engine that ran the request.
        request: the finished request, with every output token id and its timing.
        reason: why it finished: ``"stop"``, ``"length"``, ``"abort"`` or ``"error"``
            (``request.error`` then says what went wrong).

    Returns:
        Nothing. Not ``firstresult``.
    """


@hookspec
def pyagent_step_finished(engine: EngineInfo, stats: StepStats) -> None:
    """Called after every engine step.

    Args:
        engine: the engine that ran the step.
        stats: what the step scheduled and computed, the cache and speculative-decoding counters of
            this step, and its wall time.

    Returns:
        Nothing. Not ``firstresult``.
    """


# --- command line --------------------------------------------------------------------------------


@hookspec
def pyagent_register_commands(app: typer.Typer) -> None:
    """Add subcommands to the ``pyagent`` command line.

    Args:
        app: the root typer application; call ``app.command()`` or ``app.add_typer()`` on it.

    Returns:
        Nothing. Not ``firstresult``. Keep the hook's module light: it runs on every CLI start.
    """


@hookspec
def pyagent_check_model(path: str) -> list[DoctorCheck]:
    """Say whether the model at ``path`` can run here, for ``pyagent doctor --model PATH``.

    Args:
        path: the model file or folder the user named.

    Returns:
        :class:`~pyagent_core.records.DoctorCheck` rows, one per question (architecture served, block
        types, tokenizer...); a row with ``ok`` false says what cannot run and why. Not
        ``firstresult``: every plugin's rows are shown. It may import what reading the model takes.
    """
    raise NotImplementedError  # a specification: plugins implement it


@hookspec
def pyagent_doctor_checks() -> list[DoctorCheck]:
    """Report what ``pyagent doctor`` should show about this plugin's environment.

    Args:
        None.

    Returns:
        A list of :class:`~pyagent_core.records.DoctorCheck` rows (compiled kernels, a model file,
        a library version...). Not ``firstresult``: every plugin's rows are shown. Keep it cheap:
        ``pyagent doctor`` must stay fast and must not import torch.
    """
    raise NotImplementedError  # a specification: plugins implement it
