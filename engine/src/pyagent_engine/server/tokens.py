"""``POST /tokenize`` and ``POST /detokenize`` in vLLM's bodies and in llama-server's.

``/tokenize`` takes vLLM's ``{"prompt"}`` (``add_special_tokens``, on by default) or ``{"messages"}``
(through the chat template), or llama-server's ``{"content"}`` (``add_special``, off by default;
``parse_special``); it answers ``{"count", "max_model_len", "tokens"}``, with vLLM's ``token_strs``
(each token's vocabulary entry) on ``return_token_strs`` and, on llama-server's ``with_pieces``,
``tokens`` as ``{"id", "piece"}`` objects (the piece's text, or its bytes when they are not UTF-8).
``/detokenize`` takes ``{"tokens"}`` from either and answers both ``prompt`` (vLLM) and ``content``
(llama-server). Both run on a worker thread: a large text must not stall the event loop.
"""

from __future__ import annotations

from typing import Any

from pyagent_engine.server.errors import bad_request
from pyagent_engine.server.protocol import ChatCompletionRequest, DetokenizeRequest, TokenizeRequest
from pyagent_engine.server.state import ServerState
from pyagent_engine.server.tools import history

_TEXTS = ("prompt", "messages", "content")


def _piece(raw: bytes) -> str | list[int]:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


def tokenize(state: ServerState, body: TokenizeRequest) -> dict[str, Any]:
    """The answer of ``/tokenize`` (see the module docstring).

    Raises:
        APIError: not exactly one of ``prompt``, ``messages`` and ``content``, or messages for a model
            without a chat template.
    """
    given = [name for name in _TEXTS if getattr(body, name) is not None]
    if len(given) != 1:
        raise bad_request(f"give exactly one of prompt or messages (vLLM's body) or content (llama-server's); "
                          f"got {', '.join(given) or 'none'}", "prompt")
    tokenizer = state.tokenizer
    if body.content is not None:
        tokens = tokenizer.encode(body.content, add_special_tokens=body.add_special, parse_special=body.parse_special)
    elif body.prompt is not None:
        tokens = tokenizer.encode(body.prompt, add_special_tokens=body.add_special_tokens)
    else:
        assert body.messages is not None
        if state.chat_template is None:
            raise bad_request("this model has no chat template; tokenize a prompt instead", "messages")
        text = state.chat_template.render(history(ChatCompletionRequest(messages=body.messages)),
                                          add_generation_prompt=body.add_generation_prompt)
        tokens = tokenizer.encode(text, add_special_tokens=False)
    answer: dict[str, Any] = {"count": len(tokens), "max_model_len": state.max_model_len, "tokens": list(tokens)}
    if body.with_pieces:
        answer["tokens"] = [{"id": token, "piece": _piece(state.vocab[token])} for token in tokens]
    if body.return_token_strs:
        answer["token_strs"] = [tokenizer.id_to_token(token) for token in tokens]
    return answer


def detokenize(state: ServerState, body: DetokenizeRequest) -> dict[str, Any]:
    """The answer of ``/detokenize``: the text as vLLM's ``prompt`` and llama-server's ``content``.

    Raises:
        APIError: a token id outside the vocabulary.
    """
    vocab = state.engine.llm.loaded.config.vocab_size
    outside = [t for t in body.tokens if not 0 <= t < vocab]
    if outside:
        raise bad_request(f"token ids must be in [0, {vocab}); got {outside[:5]}", "tokens")
    text = state.tokenizer.decode(body.tokens)
    return {"prompt": text, "content": text}
