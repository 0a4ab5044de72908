"""The engine loop: admit requests, schedule a step, run the model, sample, detokenize, finish.

Everything pluggable comes from the registry: the attention backend and every sampler of the
chain. Lifecycle hooks fire for the engine, each request and each step; a plugin that raises in a
hook is reported with a warning and the engine goes on.
"""

from __future__ import annotations

import functools
import itertools
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch

from pyagent_core.errors import RequestError
from pyagent_core.interfaces.grammar import TokenizerInfo
from pyagent_core.interfaces.scheduler import SchedulerContext
from pyagent_core.records import EngineInfo, RequestInfo, StepStats
from pyagent_core.registry import Registry, get_registry
from pyagent_core.types import AttentionSpec
from pyagent_engine.core.attention_choice import build_attention
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.core.runner import ModelRunner, StepLogits, torch_on_one_thread
from pyagent_engine.core.text_tracker import TextTracker
from pyagent_engine.kv.groups import PagedKVGroup
from pyagent_engine.kv.manager import build_kv_manager
from pyagent_engine.models.loader import LoadedModel
from pyagent_engine.requests.isolation import describe, run_isolated
from pyagent_engine.requests.logprobs import TokenLogprob
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request, RequestMetrics, RequestOutput, RequestStatus
from pyagent_engine.sampling.chain import SamplerChain
from pyagent_engine.sampling.logprob_scoring import LogprobRecorder, recorder_for, token_logprobs
from pyagent_engine.scheduling.policy import build_scheduling_policy
from pyagent_engine.scheduling.scheduler import ScheduledChunk, Scheduler
from pyagent_engine.spec.config import SpeculativeConfig
from pyagent_engine.spec.decoder import SpeculativeDecoder
from pyagent_engine.structured.orchestrator import StructuredConfig
from pyagent_engine.structured.runtime import StructuredOutputs


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
    )


class Engine:
    """Continuous batching over a paged KV cache with the selected plugins.

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
    """

    def __init__(self, loaded: LoadedModel, *, registry: Registry | None = None, attention: str | None = None,
                 attention_options: Mapping[str, Any] | None = None,
                 samplers: str | Sequence[str] | None = None,
                 sampler_options: Mapping[str, Mapping[str, Any]] | None = None, config: EngineConfig | None = None,
                 structured: StructuredConfig | None = None, speculative: SpeculativeConfig | None = None) -> None:
        self.loaded = loaded
        self.registry = registry or get_registry()
        self.config = config or EngineConfig()
        model_config = loaded.config
        attention_context = loaded.model.attention_context(model_config, self.config.block_size,
                                                           _dtype_name(loaded.dtype))
        self.attention_context = attention_context
        self.attention_selection, backend = build_attention(self.registry, attention, attention_options,
                                                            attention_context, self._unsupported)
        self.kv, self.eviction_selection = build_kv_manager(
            self.config, [PagedKVGroup.of_model(model_config, loaded.dtype)], int(self.config.kv_cache_gib * 2**30),
            self.registry)
        self.num_blocks = self.kv.num_blocks
        self.runner = ModelRunner(loaded.model, backend, self.kv)
        policy, self.scheduler_selection = build_scheduling_policy(
            self.registry, self.config.scheduler, self.config.scheduler_options,
            SchedulerContext(self.num_blocks, self.config.block_size, self.config.max_num_seqs,
                             self.config.max_num_batched_tokens), self.config.prefix_caching)
        self.scheduler = Scheduler(self.kv, self.config.max_num_seqs, self.config.max_num_batched_tokens, policy)
        self._new_sampler = functools.partial(SamplerChain, self.registry, model_config.vocab_size, samplers,
                                              sampler_options, model_config.eos_token_ids, self._tokenizer_info)
        self.sampler = self._new_sampler()
        self._probe: SamplerChain | None = None
        self.speculative = None if speculative is None else SpeculativeDecoder(
            self.registry, speculative, model_config.vocab_size, model_config.max_position_embeddings,
            target=loaded, attention=self.attention_selection)
        self.structured = StructuredOutputs(self.registry, loaded.tokenizer, model_config.eos_token_ids,
                                            model_config.vocab_size, structured)
        self.trackers: dict[str, TextTracker] = {}
        self._ids = itertools.count()
        self._undelivered: list[RequestOutput] = []
        self.info = EngineInfo(
            engine_id=f"engine-{next(_engine_ids)}", model=str(loaded.source), architecture=model_config.architecture,
            dtype=_dtype_name(loaded.dtype), vocab_size=model_config.vocab_size,
            max_model_len=model_config.max_position_embeddings, block_size=self.config.block_size,
            num_kv_blocks=self.num_blocks, max_num_seqs=self.config.max_num_seqs,
            max_num_batched_tokens=self.config.max_num_batched_tokens, backends=self.backends,
        )
        self._fire("pyagent_engine_started")

    def _tokenizer_info(self) -> TokenizerInfo:
        return self.structured.tokenizer_info

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
    def backends(self) -> dict[str, str]:
        """The backend chosen for each stage, by kind."""
        chosen = {"attention": self.attention_selection.backend.name, "sampler": ",".join(self.sampler.names)}
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

    def add_request(self, prompt_token_ids: Sequence[int], params: SamplingParams, *,
                    prompt: str | None = None, request_id: str | None = None) -> Request:
        """Validate and queue a request; raises :class:`RequestError` when it cannot run.

        ``request_id`` must not be that of an unfinished request; by default :meth:`next_request_id`.
        """
        ids = list(prompt_token_ids)
        context = self.loaded.config.max_position_embeddings
        if not ids:
            raise RequestError("the prompt is empty; give at least one token of text")
        if len(ids) >= context:
            raise RequestError(f"the prompt has {len(ids)} tokens but the model's context is {context}; "
                               "shorten the prompt")
        vocab = self.loaded.config.vocab_size
        outside = [t for t in ids if not 0 <= t < vocab]
        if outside:
            raise RequestError(f"prompt token ids must be in [0, {vocab}); got {outside[:5]}")
        needed = -(-min(len(ids) + params.max_tokens, context) // self.config.block_size)
        if needed > self.num_blocks:
            raise RequestError(f"the request needs {needed} KV blocks but the cache has {self.num_blocks}; "
                               "raise kv_cache_gib or lower max_tokens")
        if request_id is None:
            request_id = self.next_request_id()
        elif request_id in self.trackers:
            raise RequestError(f"request id {request_id!r} belongs to an unfinished request; give each request "
                               "its own id (or none: the engine numbers them)")
        request = Request(request_id, ids, params, prompt=prompt)
        self.sampler.check_params(request)
        if params.structured is not None:
            self.structured.submit(request)  # checked now; scheduled once its grammar is compiled
        self.trackers[request.request_id] = TextTracker(self.loaded.tokenizer, ids, params.stop)
        if params.structured is None:
            self.scheduler.add(request)
        self._fire("pyagent_request_added", request=request_info(request))
        return request

    def next_request_id(self) -> str:
        """A request id never given out before by this engine and not in use: ``"0"``, ``"1"``, ..."""
        while (request_id := str(next(self._ids))) in self.trackers:
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
        started = time.perf_counter()
        outputs.extend(self._admit_structured())
        if self.speculative is not None:  # grammar-constrained requests are not drafted for
            self.speculative.propose([r for r in self.scheduler.running if self.structured.params_of(r) is None],
                                     self.loaded.config.max_position_embeddings)
        plan = self.scheduler.schedule()
        if not plan.chunks:
            outputs.extend(self._finish(r, "error", "no KV blocks free for it")
                           for r in list(self.scheduler.waiting)[:1])
            return
        ran = run_isolated(plan.chunks, self._execute)  # a failing kernel ends its requests, not the batch
        outputs.extend(self._finish(c.request, "error", f"model step failed: {why}") for c, why in ran.failed)
        for chunk in ran.kept:  # a draft's nodes count once verified (see _emit)
            if chunk.request.draft is None:
                self.kv.commit(chunk.request, chunk.num_tokens)
        if ran.result is not None:
            self._score_prompts(ran.result)
        sampled = [c.request for c in ran.kept if c.sample]
        before = [len(r.output_token_ids) for r in sampled]
        if sampled and ran.result is not None:
            outputs.extend(self._sample(sampled, ran.result.sampled))
        generated = [len(r.output_token_ids) - count for r, count in zip(sampled, before, strict=True)]
        first_prompts = sum(len(r.prompt_token_ids) for r, count, new in zip(sampled, before, generated, strict=True)
                            if count == 0 < new)  # requests that got their first token this step
        self._fire("pyagent_step_finished", stats=StepStats(**{
            "num_scheduled_tokens": plan.num_tokens,
            "num_prefill_tokens": sum(c.num_tokens for c in plan.chunks if not c.sample or c.num_tokens > 1),
            "num_decode_tokens": sum(1 for c in plan.chunks if c.sample and c.num_tokens == 1),
            "num_running": len(self.scheduler.running),
            "num_waiting": len(self.scheduler.waiting),
            "num_preempted": len(plan.preempted),
            "kv_blocks_free": self.kv.num_free,
            "kv_blocks_total": self.num_blocks,
            "num_cached_tokens": plan.num_cached_tokens,
            "num_prompt_tokens": first_prompts,
            "num_generation_tokens": sum(generated),
            **self.kv.take_counters(),
            **({} if self.speculative is None
               else self.speculative.step_stats(plan.chunks, time.perf_counter() - started)),
            "step_time_s": time.perf_counter() - started,
        }))

    @staticmethod
    def _score_prompts(logits: StepLogits) -> None:
        """Add the prompt logprobs of the positions computed this step (always raw: the model's logits)."""
        for request, positions, rows in logits.prompt:
            assert request.prompt_logprobs is not None and request.params.prompt_logprobs is not None
            tokens = request.prompt_token_ids[positions.start + 1:positions.stop + 1]
            request.prompt_logprobs.extend(token_logprobs(rows, tokens, [request.params.prompt_logprobs] * len(tokens)))

    def _sample(self, sampled: list[Request], logits: torch.Tensor) -> list[RequestOutput]:
        """Choose each request's tokens and append them; a request that sampling fails on ends alone."""
        now = time.perf_counter()
        chosen = run_isolated(
            sampled, lambda requests: self._choose(requests, self._rows(sampled, logits, requests), self.sampler),
            lambda request: self._choose([request], self._rows(sampled, logits, [request]), self._probe_sampler()))
        outputs = [self._finish(r, "error", f"sampling failed: {why}") for r, why in chosen.failed]
        tokens, records = chosen.result or ([], None)
        for i, request in enumerate(chosen.kept):
            record = records[i] if records is not None and request.logprobs is not None else None
            outputs.extend(self._emit(request, tokens[i], record, now))
        return outputs

    def _execute(self, chunks: Sequence[ScheduledChunk]) -> StepLogits:
        return self.runner.execute(chunks, [c.request for c in chunks if c.sample])

    def _probe_sampler(self) -> SamplerChain:
        """A second chain, for trying a request alone without disturbing the rows of the main one."""
        if self._probe is None:
            self._probe = self._new_sampler()
        return self._probe

    @staticmethod
    def _rows(sampled: Sequence[Request], logits: torch.Tensor, requests: Sequence[Request]) -> torch.Tensor:
        """The rows of ``logits`` (``1 + len(draft)`` per request of ``sampled``) that belong to ``requests``."""
        if list(requests) == list(sampled):
            return logits
        starts, row = {}, 0
        for request in sampled:
            starts[id(request)] = row
            row += 1 + len(request.draft or ())
        index = [i for r in requests for i in range(starts[id(r)], starts[id(r)] + 1 + len(r.draft or ()))]
        return logits.index_select(0, torch.tensor(index, dtype=torch.long))

    def _choose(self, requests: Sequence[Request], logits: torch.Tensor,
                sampler: SamplerChain) -> tuple[list[list[int]], list[list[TokenLogprob]] | None]:
        """The tokens each request emits: the sampled one, or those of its verified draft
        (see :mod:`pyagent_engine.spec.decoder`), under its grammar's mask; and, when any request
        asks for logprobs, each emitted token's record (see :mod:`pyagent_engine.requests.logprobs`)."""
        recorder = recorder_for([r.params.logprobs for r in requests], self.config.logprobs_mode)
        if self.speculative is not None:
            constrained = any(self.structured.params_of(r) is not None for r in requests)
            emitted = self.speculative.verify(requests, logits, sampler,
                                              mask=self.structured.apply_masks if constrained else None,
                                              recorder=recorder)
            return emitted, None if recorder is None else recorder.records
        if recorder is None:
            self.structured.apply_masks(requests, logits)
            return [[token] for token in sampler.sample(requests, logits)], None
        return self._choose_recorded(requests, logits, sampler, recorder)

    def _choose_recorded(self, requests: Sequence[Request], logits: torch.Tensor, sampler: SamplerChain,
                         recorder: LogprobRecorder) -> tuple[list[list[int]], list[list[TokenLogprob]]]:
        """:meth:`_choose` without speculation for a batch where some request asks for logprobs."""
        raw = recorder.score(logits) if recorder.raw else None  # before the grammar mask changes the rows
        self.structured.apply_masks(requests, logits)
        if raw is not None:
            tokens = sampler.sample(requests, logits)
            recorder.record(raw, tokens)
        else:
            tokens, processed = sampler.sample_processed(requests, logits)
            recorder.record(recorder.score(processed), tokens)
        return [[token] for token in tokens], recorder.records

    def _emit(self, request: Request, tokens: Sequence[int], records: Sequence[TokenLogprob] | None,
              now: float) -> list[RequestOutput]:
        """Commit a verified draft's keys and values, then append ``tokens`` (with their logprob
        ``records``, when the request asks for them) until the request finishes."""
        outputs = []
        try:
            if self.speculative is not None and request.draft is not None:
                self.kv.commit(request, 1 + len(request.draft), request.accepted_nodes)
                self.speculative.verified(request, request.accepted_nodes)
            for i, token in enumerate(tokens):
                outputs.append(self._append_sampled(request, token, now, None if records is None else records[i]))
                if outputs[-1].finished:
                    break
        except Exception as error:  # detokenizing or a grammar failing on this request ends it alone
            if not request.finished:
                outputs.append(self._finish(request, "error", f"output failed: {describe(error)}"))
        return outputs

    def _admit_structured(self) -> list[RequestOutput]:
        """Schedule requests whose grammar is compiled; fail those whose compile failed or timed out.

        Waits for a compile only when nothing else can run.
        """
        if not self.structured.has_pending():
            return []
        ready, failed = self.structured.poll(block=not self.scheduler.has_work())
        for request in ready:
            self.scheduler.add(request)
        return [self._finish(request, "error", str(error)) for request, error in failed]

    def _append_sampled(self, request: Request, token: int, now: float,
                        record: TokenLogprob | None = None) -> RequestOutput:
        """Append a sampled token (through the request's grammar, if any), then the tokens it forces.

        A request that asks for logprobs gets no forced tokens: jump-forward appends them without
        computing their logits, so they would have none; they are sampled (under the mask) instead.
        """
        problem = self.structured.accept(request, token)
        if problem is not None:
            return self._finish(request, "error", problem)
        if request.logprobs is not None:
            assert record is not None and record.token_id == token
            request.logprobs.append(record)
            return self._append(request, token, now)
        output = self._append(request, token, now)
        for forced in [] if output.finished else self.structured.jump_forward(request):
            later = self._append(request, forced, now)
            output = attrs.evolve(later, delta=output.delta + later.delta)
            if later.finished:
                break
        return output

    def _append(self, request: Request, token: int, now: float) -> RequestOutput:
        request.output_token_ids.append(token)
        request.token_times.append(now)
        if request.first_token_time is None:
            request.first_token_time = now
        tracker = self.trackers[request.request_id]
        params = request.params
        eos = not params.ignore_eos and token in self.loaded.config.eos_token_ids
        if eos or token in params.stop_token_ids:
            return self._finish(request, "stop")
        tracker.add(token)
        if tracker.stopped:
            return self._finish(request, "stop")
        if (len(request.output_token_ids) >= params.max_tokens
                or request.num_tokens >= self.loaded.config.max_position_embeddings):
            return self._finish(request, "length")
        return self._report(request, final=False)

    def _finish(self, request: Request, reason: str, error: str | None = None) -> RequestOutput:
        self.scheduler.finish(request)
        request.status = RequestStatus.FINISHED
        request.finish_reason, request.error = reason, error
        request.finish_time = time.perf_counter()
        self.trackers[request.request_id].finish()
        output = self._report(request, final=True)
        self.structured.release(request)
        if self.speculative is not None:
            self.speculative.finished(request)
        del self.trackers[request.request_id]
        self._fire("pyagent_request_finished", request=request_info(request), reason=reason)
        return output

    def _report(self, request: Request, final: bool) -> RequestOutput:
        tracker = self.trackers[request.request_id]
        metrics = None
        if final:
            end = request.finish_time or time.perf_counter()
            first = request.first_token_time
            decoded = len(request.output_token_ids) - 1
            metrics = RequestMetrics(
                time_to_first_token=None if first is None else first - request.arrival_time,
                total_time=end - request.arrival_time,
                decode_tokens_per_s=decoded / (end - first) if first is not None and decoded > 0 and end > first
                else None,
            )
        return RequestOutput(
            request_id=request.request_id, prompt=request.prompt, prompt_token_ids=request.prompt_token_ids,
            output_token_ids=list(request.output_token_ids), text=tracker.text, delta=tracker.delta(final),
            finished=final, finish_reason=request.finish_reason, error=request.error, metrics=metrics,
            num_cached_tokens=request.num_cached_tokens, structured=self.structured.report(request),
            logprobs=None if request.logprobs is None else list(request.logprobs),
            prompt_logprobs=None if request.prompt_logprobs is None else list(request.prompt_logprobs),
        )

    def close(self) -> list[RequestOutput]:
        """Abort what is left (their final outputs are returned) and fire ``pyagent_engine_stopped``."""
        aborted = [self.abort(request) for request in
                   [*self.scheduler.running, *self.scheduler.waiting, *self.structured.pending_requests()]]
        self.structured.close()
        self._fire("pyagent_engine_stopped")
        return aborted
