"""The engine: requests in, outputs out, one step at a time through the stages of :mod:`pyagent_engine.stages`.

:meth:`Engine.step` is the loop: schedule -> prepare inputs -> model forward -> logits masks ->
select tokens -> record logprobs -> commit -> append, detokenize and stop, each stage a small
object handing a frozen record to the next. Everything pluggable comes from the registry: the
attention backend, every sampler of the chain, the proposer, the eviction and scheduling policies.
Lifecycle hooks fire for the engine, each request and each step; a plugin that raises in a hook is
reported with a warning and the engine goes on.
"""

from __future__ import annotations

import functools
import itertools
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from pyagent_core.errors import ConfigError, LoRAAdapterError, RequestError
from pyagent_core.interfaces.grammar import TokenizerInfo
from pyagent_core.interfaces.lora import LoRASettings
from pyagent_core.interfaces.scheduler import SchedulerContext
from pyagent_core.records import EngineInfo, RequestInfo, StepStats
from pyagent_core.registry import Registry, get_registry
from pyagent_core.types import AttentionSpec
from pyagent_engine.core.attention_choice import build_attention
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.core.lora_adapters import ServedAdapters
from pyagent_engine.core.mixer_choice import build_mixer
from pyagent_engine.kv.manager import build_kv_manager
from pyagent_engine.models.loader import LoadedModel
from pyagent_engine.requests.isolation import describe, run_isolated
from pyagent_engine.requests.lora import LoRARequest, ServedAdapter
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request, RequestOutput, RequestStatus
from pyagent_engine.sampling.host import sampler_host
from pyagent_engine.scheduling.policy import build_scheduling_policy
from pyagent_engine.scheduling.scheduler import Scheduler, SchedulerOutput
from pyagent_engine.spec.config import SpeculativeConfig
from pyagent_engine.spec.decoder import SpeculativeDecoder
from pyagent_engine.stages.append import AppendTokens
from pyagent_engine.stages.commit import Commit
from pyagent_engine.stages.forward import Forward, torch_on_one_thread
from pyagent_engine.stages.inputs import PrepareInputs
from pyagent_engine.stages.logprobs import RecordLogprobs
from pyagent_engine.stages.masks import MaskLogits
from pyagent_engine.stages.records import Selection, StepLogits
from pyagent_engine.stages.schedule import Schedule
from pyagent_engine.stages.select import SelectTokens
from pyagent_engine.structured.orchestrator import StructuredConfig
from pyagent_engine.structured.runtime import StructuredOutputs
from pyagent_sampler_host.host import SamplerHost


def weakly(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` (bound to the engine) called through a weak reference. The engine hands such callbacks
    to the stages it owns; a bound method would make a reference cycle, and the engine's KV cache (a
    gibibyte by default) would stay allocated until the garbage collector's next full pass instead of
    being freed with the engine's last reference."""
    reference, name = weakref.WeakMethod(method), method.__qualname__

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = reference()
        if bound is None:
            raise ReferenceError(f"{name} was called after its engine was freed")
        return bound(*args, **kwargs)

    return call


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


_engine_ids = itertools.count()


def request_info(request: Request) -> RequestInfo:
    """A frozen snapshot of ``request`` for the lifecycle hooks."""
    params = request.params
    return RequestInfo(
        request_id=request.request_id, prompt_token_ids=request.prompt_token_ids,
        output_token_ids=request.output_token_ids,
        params={**params.sampler_params(), "max_tokens": params.max_tokens, "stop": params.stop,
                "stop_token_ids": params.stop_token_ids, "ignore_eos": params.ignore_eos},
        arrival_time=request.arrival_time, scheduled_time=request.scheduled_time,
        first_token_time=request.first_token_time, token_times=request.token_times,
        finish_time=request.finish_time, num_cached_tokens=request.num_cached_tokens,
        num_preemptions=request.num_preemptions, finish_reason=request.finish_reason, error=request.error,
        lora_name=None if request.lora is None else request.lora.name,
    )


class Engine:
    """Continuous batching over a paged KV cache with the selected plugins.

    The stages of a step are attributes, in step order: :attr:`schedule`, :attr:`inputs`,
    :attr:`forward`, :attr:`masks`, :attr:`select`, :attr:`logprobs`, :attr:`commit`,
    :attr:`append` (:attr:`stages` names them all); :attr:`kv` is the KV manager.

    Args:
        loaded: the model (see :func:`pyagent_engine.models.loader.load_model`).
        registry: where backends are selected (default: the installed plugins).
        attention: attention backend name (default: selection precedence of the registry).
        attention_options: options for it (``--attention-opt``).
        samplers: logits processors in chain order (names or an order string such as
            ``"top_k,top_p,temperature"``; default: every installed processor with a stage, in its declared order);
            greedy and multinomial select tokens.
        sampler_options: options per sampler name (``--sampler-opt NAME.KEY=VALUE``).
        config: cache and batch sizes.
        structured: structured-output settings (grammar fallback order, compile cache and limits).
        speculative: speculative decoding (proposer, its options, draft length); ``None``: off.
        mixer: the mixer backend for a model whose layers call mixer families (default: selection
            precedence of the registry); ``mixer_options`` its options.

    A model whose layers keep a recurrent state gets a state slot per running sequence beside its
    blocks; prefix caching and speculative decoding are refused for it, and speculative decoding for a
    model with other mixer layers (:meth:`~pyagent_core.interfaces.cache.CacheLayout.limits` says why).
    """

    def __init__(self, loaded: LoadedModel, *, registry: Registry | None = None, attention: str | None = None,
                 attention_options: Mapping[str, Any] | None = None,
                 samplers: str | Sequence[str] | None = None,
                 sampler_options: Mapping[str, Mapping[str, Any]] | None = None, config: EngineConfig | None = None,
                 structured: StructuredConfig | None = None, speculative: SpeculativeConfig | None = None,
                 mixer: str | None = None, mixer_options: Mapping[str, Any] | None = None) -> None:
        self.loaded = loaded
        self.registry = registry or get_registry()
        self.config = config or EngineConfig()
        model_config = loaded.config
        attention_context = loaded.model.attention_context(model_config, self.config.block_size,
                                                           _dtype_name(loaded.dtype))
        self.attention_context = attention_context
        self.attention_selection, backend = build_attention(self.registry, attention, attention_options,
                                                            attention_context, self._unsupported)
        self.layout = loaded.model.cache_layout(model_config)
        families = loaded.model.mixer_families(model_config)
        self._refuse_limits(families, speculative is not None)
        self.mixer_selection, mixer_backend = build_mixer(
            self.registry, families, _dtype_name(loaded.dtype), self.config.block_size, mixer, mixer_options)
        self.kv, self.eviction_selection = build_kv_manager(
            self.config, self.layout, int(self.config.kv_cache_gib * 2**30), loaded.dtype, self.config.max_num_seqs,
            model_config.max_position_embeddings, self.registry)
        self.num_blocks = self.kv.num_blocks
        policy, self.scheduler_selection = build_scheduling_policy(
            self.registry, self.config.scheduler, self.config.scheduler_options,
            SchedulerContext(self.num_blocks, self.config.block_size, self.config.max_num_seqs,
                             self.config.max_num_batched_tokens), self.config.prefix_caching)
        self.loras = None if not self.config.enable_lora else ServedAdapters(
            loaded.model, model_config, LoRASettings(self.config.max_loras, self.config.max_lora_rank))
        self.scheduler = Scheduler(self.kv, self.config.max_num_seqs, self.config.max_num_batched_tokens, policy,
                                   None if self.loras is None else self.loras.slots)
        self._new_sampler = functools.partial(sampler_host, self.registry, model_config.vocab_size, samplers,
                                              sampler_options, model_config.eos_token_ids, weakly(self._tokenizer_info))
        self.sampler = self._new_sampler()
        self._probe: SamplerHost[Request] | None = None
        self.speculative = None if speculative is None else SpeculativeDecoder(
            self.registry, speculative, model_config.vocab_size, model_config.max_position_embeddings,
            target=loaded, attention=self.attention_selection)
        self.structured = StructuredOutputs(self.registry, loaded.tokenizer, model_config.eos_token_ids,
                                            model_config.vocab_size, structured)
        mode, context = self.config.logprobs_mode, model_config.max_position_embeddings
        self.schedule = Schedule(self.scheduler, self.structured, self.speculative, context)
        self.inputs = PrepareInputs(self.kv)
        self.forward = Forward(loaded.model, backend, self.kv, mixer_backend)
        self.masks = MaskLogits(self.structured, mode)
        self.select = SelectTokens(mode)
        self.logprobs = RecordLogprobs(mode)
        self.commit = Commit(self.kv, self.speculative)
        self.append = AppendTokens(loaded.tokenizer, model_config.eos_token_ids, context, self.structured,
                                   weakly(self._finish))
        self._ids = itertools.count()
        self._undelivered: list[RequestOutput] = []
        self.info = EngineInfo(
            engine_id=f"engine-{next(_engine_ids)}", model=self.config.model_name or str(loaded.source),
            architecture=model_config.architecture,
            dtype=_dtype_name(loaded.dtype), vocab_size=model_config.vocab_size,
            max_model_len=model_config.max_position_embeddings, block_size=self.config.block_size,
            num_kv_blocks=self.num_blocks, num_state_slots=self.kv.num_slots, max_num_seqs=self.config.max_num_seqs,
            max_num_batched_tokens=self.config.max_num_batched_tokens, backends=self.backends,
        )
        self._fire("pyagent_engine_started")

    def _tokenizer_info(self) -> TokenizerInfo:
        return self.structured.tokenizer_info

    def _refuse_limits(self, families: Sequence[str], speculative: bool) -> None:
        """Raise :class:`ConfigError` for a feature asked of the model that its layout rules out
        (:meth:`~pyagent_core.interfaces.cache.CacheLayout.limits`)."""
        limits = self.layout.limits(families)
        asked = {"prefix caching": (self.config.prefix_caching, "drop --prefix-caching (prefix_caching=False)"),
                 "speculative decoding": (speculative, "drop --speculative (speculative=None)")}
        for feature, (on, fix) in asked.items():
            if on and feature in limits:
                raise ConfigError(f"{feature} is not supported for the {self.loaded.config.architecture} "
                                  f"architecture: {limits[feature]}; {fix}")

    def _unsupported(self, spec: AttentionSpec) -> str | None:
        """Why the model cannot run on the attention backend of ``spec`` (``None``: it can)."""
        cfg = self.loaded.config
        problems = []
        dtype = _dtype_name(self.loaded.dtype)
        if dtype not in spec.dtypes:
            problems.append(f"dtype {dtype} (supports {', '.join(spec.dtypes)})")
        if spec.head_sizes and cfg.head_dim not in spec.head_sizes:
            problems.append(f"head size {cfg.head_dim}")
        if spec.block_sizes and self.config.block_size not in spec.block_sizes:
            problems.append(f"block size {self.config.block_size}")
        context = self.attention_context
        windows = sorted({w for w in context.sliding_windows if w is not None})
        if windows and not spec.sliding_window:
            problems.append(f"sliding-window attention (the model's window: {', '.join(map(str, windows))})")
        if context.logits_soft_cap is not None and not spec.logits_soft_cap:
            problems.append(f"attention logit soft-capping (the model caps scores at {context.logits_soft_cap})")
        return "it does not support " + "; ".join(problems) if problems else None

    @property
    def stages(self) -> dict[str, Any]:
        """The stage objects of a step, by name, in step order (for profiling:
        :func:`~pyagent_engine.stages.timing.timed_stages`)."""
        return {"schedule": self.schedule, "inputs": self.inputs, "forward": self.forward, "masks": self.masks,
                "select": self.select, "logprobs": self.logprobs, "commit": self.commit, "append": self.append}

    @property
    def backends(self) -> dict[str, str]:
        """The backend chosen for each stage, by kind."""
        chosen = {"attention": self.attention_selection.backend.name, "sampler": ",".join(self.sampler.names)}
        if self.mixer_selection is not None:
            chosen["mixer"] = self.mixer_selection.backend.name
        if self.eviction_selection is not None:
            chosen["eviction"] = self.eviction_selection.backend.name
        if self.scheduler_selection is not None:
            chosen["scheduler"] = self.scheduler_selection.backend.name
        if self.speculative is not None:
            chosen["proposer"] = self.speculative.name
        return chosen

    def _fire(self, hook: str, **kwargs: Any) -> None:
        """Call ``hook`` of every plugin with this engine's :class:`EngineInfo` and ``kwargs``."""
        for plugin, error in self.registry.call_hook(hook, engine=self.info, **kwargs):
            warnings.warn(f"plugin {plugin!r} failed in {hook}: {type(error).__name__}: {error}", stacklevel=3)

    # --- requests ------------------------------------------------------------------------------

    def add_lora(self, lora_request: LoRARequest) -> ServedAdapter:
        """Read and register a LoRA adapter (vLLM's ``add_lora``); requests then name it by ``lora_name``.

        Raises :class:`LoRAAdapterError` when LoRA is off (``EngineConfig.enable_lora``), the adapter
        is unreadable or not for this model, or its name or id is taken (see
        :meth:`~pyagent_engine.core.lora_adapters.ServedAdapters.add`).
        """
        return self._loras().add(lora_request)

    def remove_lora(self, name: str) -> None:
        """Stop serving adapter ``name`` (requests using it finish with it); raises
        :class:`~pyagent_core.errors.UnknownLoRAAdapterError` when it is not served."""
        self._loras().remove(name)

    def list_loras(self) -> list[ServedAdapter]:
        """The registered adapters, in registration order (none when LoRA is off)."""
        return [] if self.loras is None else list(self.loras.by_name.values())

    def _loras(self) -> ServedAdapters:
        if self.loras is None:
            raise LoRAAdapterError("LoRA adapters are off in this engine; enable them with "
                                   "EngineConfig(enable_lora=True) (pyagent serve --enable-lora)")
        return self.loras

    def add_request(self, prompt_token_ids: Sequence[int], params: SamplingParams, *,
                    prompt: str | None = None, request_id: str | None = None,
                    lora_request: LoRARequest | None = None) -> Request:
        """Validate and queue a request; raises :class:`RequestError` when it cannot run, and
        :class:`LoRAAdapterError` when its ``lora_request`` cannot be served (:meth:`add_lora`).

        ``request_id`` must not be that of an unfinished request; by default :meth:`next_request_id`.
        """
        ids = list(prompt_token_ids)
        context = self.loaded.config.max_position_embeddings
        if not ids:
            raise RequestError("the prompt is empty; give at least one token of text")
        if len(ids) >= context:
            raise RequestError(f"the prompt has {len(ids)} tokens but the model's context is {context}; "
                               "shorten the prompt")
        if len(ids) + params.max_tokens > context:
            raise RequestError(f"the prompt has {len(ids)} tokens and max_tokens is {params.max_tokens}: "
                               f"{len(ids) + params.max_tokens} tokens, over the model's context of {context}; "
                               f"lower max_tokens to at most {context - len(ids)} or shorten the prompt")
        vocab = self.loaded.config.vocab_size
        outside = [t for t in ids if not 0 <= t < vocab]
        if outside:
            raise RequestError(f"prompt token ids must be in [0, {vocab}); got {outside[:5]}")
        needed = -(-(len(ids) + params.max_tokens) // self.config.block_size)
        if needed > self.num_blocks:
            raise RequestError(f"the request needs {needed} KV blocks but the cache has {self.num_blocks}; "
                               "raise kv_cache_gib or lower max_tokens")
        if request_id is None:
            request_id = self.next_request_id()
        elif request_id in self.append.trackers:
            raise RequestError(f"request id {request_id!r} belongs to an unfinished request; give each request "
                               "its own id (or none: the engine numbers them)")
        lora = None if lora_request is None else self._loras().add(lora_request)
        request = Request(request_id, ids, params, prompt=prompt, lora=lora)
        self.sampler.check_params(request)
        if params.structured is not None:
            self.structured.submit(request)  # checked now; scheduled once its grammar is compiled
        self.append.track(request)
        if params.structured is None:
            self.scheduler.add(request)
        self._fire("pyagent_request_added", request=request_info(request))
        return request

    def next_request_id(self) -> str:
        """A request id never given out before by this engine and not in use: ``"0"``, ``"1"``, ..."""
        while (request_id := str(next(self._ids))) in self.append.trackers:
            pass
        return request_id

    def has_unfinished(self) -> bool:
        """True while any request waits (for its grammar or to be scheduled) or runs."""
        return self.scheduler.has_work() or self.structured.has_pending()

    def abort(self, request: Request) -> RequestOutput:
        """Stop ``request`` now; its output so far is reported with finish reason ``abort``."""
        return self._finish(request, "abort")

    # --- the loop ------------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Run one step; return an output for every request that produced text or finished.

        A failure ends only the requests it can be attributed to (see :mod:`pyagent_engine.requests.isolation`),
        with ``finish_reason == "error"``; their KV blocks are freed. An error outside those stages
        fails the running requests; an interrupt (``KeyboardInterrupt``) fails them too, is raised, and
        their outputs come with the next step.
        """
        outputs, self._undelivered = self._undelivered, []
        try:
            with torch_on_one_thread():
                self._step(outputs)
        except Exception as error:
            outputs.extend(self._fail_running(f"engine step failed: {describe(error)}"))
        except BaseException as error:
            self._undelivered = outputs + self._fail_running(f"interrupted: {describe(error)}")
            raise
        return outputs

    def _fail_running(self, reason: str) -> list[RequestOutput]:
        return [self._finish(r, "error", reason) for r in list(self.scheduler.running) if not r.finished]

    def _step(self, outputs: list[RequestOutput]) -> None:
        """The stages in order. A stage that fails for some requests ends those (``finish_reason ==
        "error"``): the inputs and the forward are isolated together per chunk, the masks, selection and
        logprobs together per request (:func:`~pyagent_engine.requests.isolation.run_isolated`)."""
        started = time.perf_counter()
        batch = self.schedule.run()
        outputs.extend(self._finish(request, "error", why) for request, why in batch.failed)
        if not batch.plan.chunks:
            return
        ran = run_isolated(batch.plan.chunks, lambda chunks: self.forward.run(self.inputs.run(chunks)))
        outputs.extend(self._finish(c.request, "error", f"model step failed: {why}") for c, why in ran.failed)
        logits, selection = ran.result, Selection()
        sampled = [] if logits is None else list(logits.rows.requests)
        before = [len(r.output_token_ids) for r in sampled]
        if logits is not None:
            self.logprobs.score_prompts(logits)
            if sampled:
                chosen = run_isolated(sampled, lambda requests: self._choose(logits, requests, self.sampler),
                                      lambda request: self._choose(logits, [request], self._probe_sampler()))
                outputs.extend(self._finish(r, "error", f"sampling failed: {why}") for r, why in chosen.failed)
                selection = chosen.result or selection
            outputs.extend(self._finish(r, "error", f"commit failed: {why}")
                           for r, why in self.commit.run(ran.kept, selection))
            outputs.extend(self.append.run(selection))
        rows = 0 if logits is None else logits.rows.num_rows
        self._fire("pyagent_step_finished", stats=self._step_stats(batch.plan, sampled, before, rows, started))

    def _choose(self, logits: StepLogits, requests: Sequence[Request], host: SamplerHost[Request]) -> Selection:
        """Masks, then selection with ``host``, then logprobs, for ``requests`` (some of ``logits``'s)."""
        masked = self.masks.run(logits, requests)
        return self.logprobs.run(masked, self.select.run(masked, host))

    def _step_stats(self, plan: SchedulerOutput, sampled: Sequence[Request], before: Sequence[int], rows: int,
                    started: float) -> StepStats:
        """The step's :class:`StepStats`: ``sampled`` had ``before`` output tokens each and ``rows`` logits rows."""
        generated = [len(r.output_token_ids) - count for r, count in zip(sampled, before, strict=True)]
        first_prompts = sum(len(r.prompt_token_ids) for r, count, new in zip(sampled, before, generated, strict=True)
                            if count == 0 < new)  # requests that got their first token this step
        return StepStats(**{
            "num_scheduled_tokens": plan.num_tokens,
            "num_prefill_tokens": sum(c.num_tokens for c in plan.chunks if not c.sample or c.num_tokens > 1),
            "num_decode_tokens": sum(1 for c in plan.chunks if c.sample and c.num_tokens == 1),
            "num_running": len(self.scheduler.running),
            "num_waiting": len(self.scheduler.waiting),
            "num_preempted": len(plan.preempted),
            "kv_blocks_free": self.kv.num_free,
            "kv_blocks_total": self.num_blocks,
            "state_slots_free": self.kv.num_free_slots,
            "state_slots_total": self.kv.num_slots,
            "num_cached_tokens": plan.num_cached_tokens,
            "num_prompt_tokens": first_prompts,
            "num_generation_tokens": sum(generated),
            **self.kv.take_counters(),
            **({} if self.speculative is None
               else self.speculative.step_stats(plan.chunks, rows, time.perf_counter() - started)),
            "step_time_s": time.perf_counter() - started,
            **self._lora_stats(),
        })

    def _lora_stats(self) -> dict[str, Any]:
        """The adapters of running and waiting requests, and the slots, for ``StepStats`` (nothing when LoRA is off)."""
        if self.loras is None:
            return {}
        waiting = [*self.scheduler.waiting, *self.structured.pending_requests()]
        return {"running_lora_adapters": tuple(sorted({r.lora.name for r in self.scheduler.running if r.lora})),
                "waiting_lora_adapters": tuple(sorted({r.lora.name for r in waiting if r.lora})),
                "max_lora": self.config.max_loras}

    def _probe_sampler(self) -> SamplerHost[Request]:
        """A second sampler host, for trying a request alone without disturbing the rows of the main one."""
        if self._probe is None:
            self._probe = self._new_sampler()
        return self._probe

    def _finish(self, request: Request, reason: str, error: str | None = None) -> RequestOutput:
        """End ``request`` (its blocks go back through the scheduler and the KV manager); its final output."""
        self.scheduler.finish(request)
        request.status = RequestStatus.FINISHED
        request.finish_reason, request.error = reason, error
        request.finish_time = time.perf_counter()
        output = self.append.final_output(request)
        self.structured.release(request)
        if self.speculative is not None:
            self.speculative.finished(request)
        self._fire("pyagent_request_finished", request=request_info(request), reason=reason)
        return output

    def close(self) -> list[RequestOutput]:
        """Abort what is left (their final outputs are returned) and fire ``pyagent_engine_stopped``."""
        aborted = [self.abort(request) for request in
                   [*self.scheduler.running, *self.scheduler.waiting, *self.structured.pending_requests()]]
        self.structured.close()
        self._fire("pyagent_engine_stopped")
        return aborted
