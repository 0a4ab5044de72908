"""The Python API: ``LLM(...).generate(prompts, params)`` and its streaming variant.

A prompt is a string (tokenized as is, or wrapped in the chat template with ``chat=True``), a list
of OpenAI-style messages (always templated), or a list of token ids. A prompt that cannot run (empty,
longer than the context, holding a lone surrogate) becomes an output with ``finish_reason ==
"error"``; the others go on. Sampling parameters the sampler chain refuses raise
:class:`~pyagent_core.errors.RequestError` before anything runs.

One ``LLM`` may be used from several threads at once, and several of its streams may be read in
turns: every call gets the outputs of its own requests (see :mod:`pyagent_engine.api.shared_engine`).
Request ids are unique over the ``LLM``'s lifetime.

LoRA adapters (vLLM's interface): ``LLM(enable_lora=True, max_loras=..., max_lora_rank=...)`` or
``LLM(lora_modules={"sql": "adapters/sql"})`` (which enables them), then per call
``generate(..., lora_request=LoRARequest("sql", 1, "adapters/sql"))``, a registered adapter's name,
or one per prompt; prompts of different adapters and of the base model run in the same steps.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from pyagent_core.errors import ChatTemplateError, RequestError, UnknownLoRAAdapterError
from pyagent_core.registry import Registry
from pyagent_engine.api.shared_engine import Session, SharedEngine
from pyagent_engine.core.config import EngineConfig
from pyagent_engine.core.engine import Engine
from pyagent_engine.models.config import DEFAULT_DTYPE
from pyagent_engine.models.gguf_file import ProgressCallback
from pyagent_engine.models.loader import load_model
from pyagent_engine.requests.lora import LoRARequest
from pyagent_engine.requests.params import SamplingParams
from pyagent_engine.requests.request import Request, RequestOutput
from pyagent_engine.spec.config import SpeculativeConfig
from pyagent_engine.structured.orchestrator import StructuredConfig

Messages = Sequence[Mapping[str, Any]]
Prompt = str | Messages | Sequence[int]
AdapterChoice = LoRARequest | str | None
"""A prompt's LoRA adapter: a :class:`LoRARequest`, the name of a registered adapter, or ``None`` (the base model)."""


class LLM:
    """A model with the selected plugins, ready to generate.

    Args:
        model: a ``.gguf`` file, a checkpoint folder, or ``None`` for the embedded SmolLM2-135M-Instruct.
        dtype: ``"float32"`` (default, see :data:`~pyagent_engine.models.config.DEFAULT_DTYPE`) or ``"bfloat16"``.
        quantized: keep a GGUF's block-quantized matrices in their blocks (fewer bytes read per
            token); false dequantizes them at load.
        precision: how products with those blocks run: ``"int8"`` (int8-quantized activations and
            integer dot products, as llama.cpp: the faster) or ``"exact"`` (the dequantized model's bits,
            what comparisons with transformers use); ``None``: ``$PYAGENT_PRECISION``, else ``precision``
            in ``pyagent.toml``'s ``[engine]`` table, else ``"int8"``.
        attention: attention backend name; ``attention_options`` its options.
        samplers: logits processors in chain order (names or an order string; default: the default order).
        sampler_options: options per sampler name (``--sampler-opt NAME.KEY=VALUE``).
        registry: where plugins come from (default: the installed ones).
        progress: ``progress(done, total, what)`` while a model is converted the first time.
        config: cache and batch sizes.
        structured: structured-output settings (grammar fallback order, compile cache and limits).
        speculative: speculative decoding (proposer, its options, draft length); ``None``: off.
        enable_lora: serve LoRA adapters (vLLM's ``enable_lora``); ``max_loras`` adapters at once (the
            model's slots), of rank up to ``max_lora_rank`` (``None``: ``config``'s, by default 1 and 16).
        lora_modules: adapters to register now, name -> PEFT folder or LoRA GGUF file (turns LoRA on);
            their ``lora_int_id`` are 1, 2, ... in this order.
    """

    def __init__(self, model: str | None = None, *, dtype: str = DEFAULT_DTYPE, attention: str | None = None,
                 attention_options: Mapping[str, Any] | None = None,
                 samplers: str | Sequence[str] | None = None,
                 sampler_options: Mapping[str, Mapping[str, Any]] | None = None, registry: Registry | None = None,
                 progress: ProgressCallback | None = None, config: EngineConfig | None = None,
                 structured: StructuredConfig | None = None, speculative: SpeculativeConfig | None = None,
                 quantized: bool = True, precision: str | None = None, enable_lora: bool = False,
                 max_loras: int | None = None, max_lora_rank: int | None = None,
                 lora_modules: Mapping[str, str] | None = None) -> None:
        config = config or EngineConfig()
        if enable_lora or lora_modules or max_loras is not None or max_lora_rank is not None:
            config = attrs.evolve(config, enable_lora=True, max_loras=max_loras or config.max_loras,
                                  max_lora_rank=max_lora_rank or config.max_lora_rank)
        self.loaded = load_model(model, dtype, progress=progress, quantized=quantized, precision=precision)
        self.engine = Engine(self.loaded, registry=registry, attention=attention,
                             attention_options=attention_options, samplers=samplers,
                             sampler_options=sampler_options, config=config, structured=structured,
                             speculative=speculative)
        self.shared = SharedEngine(self.engine)
        for int_id, (name, path) in enumerate((lora_modules or {}).items(), start=1):
            self.engine.add_lora(LoRARequest(name, int_id, str(path)))

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer."""
        return self.loaded.tokenizer

    def encode(self, prompt: Prompt, *, chat: bool = False, system: str | None = None) -> tuple[list[int], str | None]:
        """Token ids (and text, when there is text) of ``prompt``; see the module docstring."""
        if isinstance(prompt, str) and not chat:
            return self.tokenizer.encode(prompt), prompt
        if isinstance(prompt, Sequence) and prompt and all(isinstance(t, int) for t in prompt):
            return list(prompt), None  # type: ignore[arg-type]
        messages: list[Mapping[str, Any]] = (
            [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)  # type: ignore[arg-type]
        )
        if system is not None and not (messages and messages[0].get("role") == "system"):
            messages.insert(0, {"role": "system", "content": system})
        if self.loaded.chat_template is None:
            raise RequestError("this model has no chat template; pass raw text (chat=False / --raw)")
        text = self.loaded.chat_template.render(messages, add_generation_prompt=True)
        return self.tokenizer.encode(text, add_special_tokens=False), text

    def stream(self, prompts: Sequence[Prompt], params: SamplingParams | Sequence[SamplingParams] | None = None,
               *, chat: bool = False, system: str | None = None,
               lora_request: AdapterChoice | Sequence[AdapterChoice] = None) -> Iterator[RequestOutput]:
        """Run ``prompts`` batched; yield outputs as text arrives (``delta``) and when each finishes.

        Closing the generator (or dropping it) before the end aborts the requests still running.

        Raises:
            RequestError: the sampler chain refuses a ``params`` (before any request is added).
            LoRAAdapterError: a ``lora_request`` cannot be served (before any request is added).
        """
        listed = self._params(params, len(prompts))
        adapters = self._adapters(lora_request, len(prompts))
        with self.shared.session() as session:
            yield from self._submit(session, prompts, listed, chat, system, adapters)
            yield from session

    def generate(self, prompts: str | Sequence[Prompt],
                 params: SamplingParams | Sequence[SamplingParams] | None = None,
                 *, chat: bool = False, system: str | None = None,
                 lora_request: AdapterChoice | Sequence[AdapterChoice] = None) -> list[RequestOutput]:
        """Run ``prompts`` (one string, or a list of prompts) to completion; one final output per prompt, in order.

        A prompt that cannot run (empty, longer than the context, not whole Unicode) gets an output with
        ``finish_reason == "error"`` and the others run. ``lora_request``: the LoRA adapter of every
        prompt, or one per prompt (see :data:`AdapterChoice`).

        Raises:
            RequestError: the sampler chain refuses a ``params`` (before any request is added).
            LoRAAdapterError: a ``lora_request`` cannot be served (before any request is added).
        """
        batch: list[Prompt] = [prompts] if isinstance(prompts, str) else list(prompts)
        listed = self._params(params, len(batch))
        adapters = self._adapters(lora_request, len(batch))
        with self.shared.session() as session:
            finals = {o.request_id: o for o in self._submit(session, batch, listed, chat, system, adapters)}
            finals.update((o.request_id, o) for o in session if o.finished)
        return [finals[request_id] for request_id in session.request_ids]

    def _submit(self, session: Session, prompts: Sequence[Prompt], params: list[SamplingParams], chat: bool,
                system: str | None, adapters: list[LoRARequest | None]) -> Iterator[RequestOutput]:
        """Add ``prompts`` through ``session``; yield a final error output for each that cannot run."""
        for prompt, sampling, adapter in zip(prompts, params, adapters, strict=True):
            request_id = session.new_id()
            try:
                ids, text = self.encode(prompt, chat=chat, system=system)
                session.add(request_id, ids, sampling, text, adapter)
            except (RequestError, ChatTemplateError) as error:
                yield RequestOutput(request_id=request_id, prompt=prompt if isinstance(prompt, str) else None,
                                    prompt_token_ids=[], output_token_ids=[], text="", delta="", finished=True,
                                    finish_reason="error", error=str(error))

    def _params(self, params: SamplingParams | Sequence[SamplingParams] | None, count: int) -> list[SamplingParams]:
        """One :class:`SamplingParams` per prompt, each checked by the sampler chain before any request is added."""
        if params is None or isinstance(params, SamplingParams):
            listed = [params or SamplingParams()] * count
        elif len(params) != count:
            raise RequestError(f"got {len(params)} SamplingParams for {count} prompts; give one, or one per prompt")
        else:
            listed = list(params)
        for distinct in {id(p): p for p in listed}.values():
            self.check_params(distinct)
        return listed

    def _adapters(self, choice: AdapterChoice | Sequence[AdapterChoice], count: int) -> list[LoRARequest | None]:
        """One :class:`LoRARequest` (or ``None``) per prompt, each registered (read and checked) before any
        request is added."""
        listed = list(choice) if isinstance(choice, Sequence) and not isinstance(choice, str) else [choice] * count
        if len(listed) != count:
            raise RequestError(f"got {len(listed)} LoRA requests for {count} prompts; give one, or one per prompt")
        requests = [self.lora_request(c) if isinstance(c, str) else c for c in listed]
        for distinct in {r for r in requests if r is not None}:
            self.add_lora(distinct)
        return requests

    def add_lora(self, lora_request: LoRARequest) -> None:
        """Read and register a LoRA adapter (see :meth:`~pyagent_engine.core.engine.Engine.add_lora`)."""
        with self.shared.locked() as engine:
            engine.add_lora(lora_request)

    def remove_lora(self, name: str) -> None:
        """Stop serving LoRA adapter ``name`` (see :meth:`~pyagent_engine.core.engine.Engine.remove_lora`)."""
        with self.shared.locked() as engine:
            engine.remove_lora(name)

    def list_loras(self) -> list[LoRARequest]:
        """The registered LoRA adapters' requests, in registration order."""
        with self.shared.locked() as engine:
            return [served.request for served in engine.list_loras()]

    def lora_request(self, name: str) -> LoRARequest:
        """The :class:`LoRARequest` of registered adapter ``name``; raises
        :class:`~pyagent_core.errors.UnknownLoRAAdapterError` when none has that name."""
        found = [r for r in self.list_loras() if r.lora_name == name]
        if not found:
            names = ", ".join(r.lora_name for r in self.list_loras()) or "none"
            raise UnknownLoRAAdapterError(f"the LoRA adapter {name!r} is not loaded; loaded: {names}")
        return found[0]

    def check_params(self, params: SamplingParams) -> None:
        """Raise :class:`RequestError` when a sampler of the chain refuses ``params`` (a value out of range, a
        parameter in ``extra`` that no sampler reads), as ``SamplingParams`` itself does for its own fields."""
        with self.shared.locked() as engine:
            engine.sampler.check_params(Request("check", [0], params))

    def close(self) -> None:
        """Stop the engine (fires ``pyagent_engine_stopped``); calls still running get their requests
        back with ``finish_reason == "abort"``."""
        self.shared.close()
