"""A model's chat template: OpenAI-style messages to the prompt text the model was trained on.

Templates are Jinja2 source from the model (GGUF ``tokenizer.chat_template`` or
``tokenizer_config.json``), rendered in a sandbox with the conventions Hugging Face templates rely
on: ``trim_blocks``/``lstrip_blocks``, the ``loopcontrols`` extension, ``raise_exception(msg)``,
``strftime_now(fmt)``, a ``tojson`` filter that keeps non-ASCII text as is, and the variables
``messages``, ``add_generation_prompt``, ``bos_token``, ``eos_token`` (and ``tools`` when given).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NoReturn

import jinja2
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from pyagent_core.errors import ChatTemplateError

OPENAI_ROLES = frozenset({"system", "user", "assistant", "tool"})


def _is_role(node: nodes.Node) -> bool:
    """``message.role`` or ``message['role']`` (any variable)."""
    if isinstance(node, nodes.Getattr):
        return node.attr == "role"
    return isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and node.arg.value == "role"


def _strings(node: nodes.Node) -> set[str]:
    if isinstance(node, nodes.Const) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (nodes.List, nodes.Tuple)):
        return {s for item in node.items for s in _strings(item)}
    return set()


def template_roles(source: str) -> frozenset[str]:
    """The role names ``source`` compares a message's role with (``message['role'] == 'user'``, ``in [...]``)."""
    roles: set[str] = set()
    for compare in _environment().parse(source).find_all(nodes.Compare):
        operands = [compare.expr, *(op.expr for op in compare.ops)]
        if any(_is_role(operand) for operand in operands):
            roles.update(s for operand in operands for s in _strings(operand))
    return frozenset(roles)


def _raise_exception(message: str) -> NoReturn:
    raise ChatTemplateError(f"the chat template rejected the conversation: {message}")


def _tojson(value: Any, indent: int | None = None, separators: tuple[str, str] | None = None,
            sort_keys: bool = False, ensure_ascii: bool = False) -> str:
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Check OpenAI-format messages and flatten list content (``[{"type": "text", ...}]``) to a string.

    Raises :class:`ChatTemplateError` naming the message that is not a mapping with a string
    ``role`` and a string, ``None`` or text-part-list ``content``.
    """
    if not messages:
        raise ChatTemplateError("no messages to render; pass at least one {'role': ..., 'content': ...}")
    normalized = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise ChatTemplateError(f"message {index} must be a mapping with a string 'role', got {message!r}")
        content = message.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, Mapping) and p.get("type") == "text" for p in content):
                raise ChatTemplateError(f"message {index}: only text content parts are supported, got {content!r}")
            content = "".join(str(part.get("text", "")) for part in content)
        elif content is not None and not isinstance(content, str):
            raise ChatTemplateError(f"message {index}: 'content' must be a string or a list of text parts, "
                                    f"got {type(content).__name__}")
        normalized.append({**message, "content": content})
    return normalized


class ChatTemplate:
    """A compiled chat template.

    Args:
        source: the Jinja2 template text.
        bos_token: the text of the beginning-of-sequence token (template variable ``bos_token``).
        eos_token: the text of the end-of-sequence token (template variable ``eos_token``).

    Raises :class:`ChatTemplateError` if ``source`` is not a valid template.
    """

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateError as error:
            raise ChatTemplateError(f"the model's chat template does not compile: {error}") from None

    @functools.cached_property
    def roles(self) -> frozenset[str]:
        """The message roles this template takes: the OpenAI ones plus any other it names."""
        return OPENAI_ROLES | template_roles(self.source)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **variables: Any,
    ) -> str:
        """The prompt text for ``messages`` (OpenAI format), ending with the assistant's turn header.

        ``tools`` (OpenAI function specs) and further ``variables`` are passed to the template.
        Raises :class:`ChatTemplateError` for malformed messages, a template error, or a
        conversation the template rejects through ``raise_exception``.
        """
        context = {
            "bos_token": self.bos_token, "eos_token": self.eos_token, **variables,
            "messages": normalize_messages(messages), "add_generation_prompt": add_generation_prompt,
        }
        if tools is not None:
            context["tools"] = list(tools)
        try:
            return str(self._template.render(context))
        except (jinja2.TemplateError, TypeError) as error:  # TypeError: e.g. a missing content added to a string
            raise ChatTemplateError(f"the model's chat template failed to render: {error}") from None
