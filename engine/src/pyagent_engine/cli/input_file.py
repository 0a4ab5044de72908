"""The prompts file of ``pyagent generate --input``: each line read and checked on its own.

A line is a plain-text prompt, or a JSON object with ``"prompt": "..."`` or ``"messages": [...]``
(OpenAI chat messages) and optionally ``"id"`` or ``"custom_id"`` (a string or integer carried to the
output record, as in vLLM's offline API and OpenAI's batch format) and the scheduling fields
``"priority"``, ``"deadline_s"`` and ``"tenant"`` of that request (see
:class:`~pyagent_engine.requests.params.SamplingParams`). Blank lines are skipped.

The file is UTF-8; a byte-order mark is dropped, and a UTF-16 or UTF-32 file with its mark is read
too. A line that cannot be used (not UTF-8, invalid JSON, a message without ``content``, a lone
surrogate, a role the chat template does not know) becomes a :class:`PromptLine` whose ``error``
reads ``FILE:LINE: what is wrong``; the other lines still run. A file that cannot be read at all
raises :class:`RequestError`.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from pyagent_core.errors import ChatTemplateError, RequestError
from pyagent_core.text import check_text
from pyagent_engine.requests.params import SamplingParams

if TYPE_CHECKING:
    from pyagent_engine.api.llm import Prompt
    from pyagent_engine.models.chat_template import ChatTemplate

ID_KEYS = ("id", "custom_id")
PROMPT_KEYS = ("prompt", "messages")
SCHEDULING_KEYS = ("priority", "deadline_s", "tenant")
_WIDE_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
              (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


@attrs.frozen
class PromptLine:
    """One non-blank line of a prompts file.

    Attributes:
        index: its position among the file's non-blank lines, from 0 (the order outputs come in).
        line: its line number in the file, from 1.
        prompt: the prompt (text or messages), ``None`` when the line is unusable.
        ids: the line's ``id`` / ``custom_id``, as given.
        error: ``FILE:LINE: what is wrong`` when the line is unusable, else ``None``.
        scheduling: the line's ``priority`` / ``deadline_s`` / ``tenant``, checked.
    """

    index: int
    line: int
    prompt: Prompt | None = None
    ids: Mapping[str, Any] = attrs.field(factory=dict)
    error: str | None = None
    scheduling: Mapping[str, Any] = attrs.field(factory=dict)


def _read_bytes(path: Path) -> bytes:
    if path.is_dir():
        raise RequestError(f"{path}: is a directory; --input takes a file of prompts, one per line")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise RequestError(f"{path}: no such file; --input takes a file of prompts, one per line") from None
    except OSError as exc:
        raise RequestError(f"{path}: cannot read it ({exc.strerror})") from None


def _lines(path: Path, data: bytes) -> Iterator[tuple[int, str, str | None]]:
    """``(number, text, problem)`` per line: its text and ``None``; or, for a line that cannot be used, what
    is wrong with it and its text as far as it reads (undecodable bytes replaced), to find its id in."""
    for bom, encoding in _WIDE_BOMS:
        if data.startswith(bom):
            try:
                text = data.decode(encoding)
            except UnicodeDecodeError as exc:
                raise RequestError(f"{path}: starts with a {encoding.upper()} byte-order mark but does not decode "
                                   f"as {encoding.upper()} ({exc.reason}); save it as UTF-8") from None
            for number, line in enumerate(text.split("\n"), 1):
                yield number, line.removesuffix("\r"), None
            return
    for number, raw in enumerate(data.removeprefix(codecs.BOM_UTF8).split(b"\n"), 1):
        try:
            line = raw.removesuffix(b"\r").decode("utf-8")
        except UnicodeDecodeError as exc:
            yield number, raw.decode("utf-8", errors="replace"), (
                f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); save the file as UTF-8")
            continue
        if "\x00" in line:
            yield number, line, "holds NUL bytes (a UTF-16 file without a byte-order mark?); save the file as UTF-8"
            continue
        yield number, line, None


def _check_message(message: Any, where: str) -> None:
    if not isinstance(message, dict):
        raise RequestError(f"{where} must be an object with 'role' and 'content', got {json.dumps(message)}")
    role = message.get("role")
    if not isinstance(role, str):
        raise RequestError(f"{where} needs a string 'role' (system, user, assistant or tool)")
    content = message.get("content")
    if content is None and not (role == "assistant" and message.get("tool_calls")):
        raise RequestError(f"{where} ({role}) has no 'content'; give its text as \"content\": \"...\"")
    if isinstance(content, list):
        for number, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise RequestError(f'{where}.content[{number}] must be {{"type": "text", "text": "..."}}')
            check_text(part["text"], f"{where}.content[{number}].text")
    elif content is not None and not isinstance(content, str):
        raise RequestError(f"{where}.content must be a string or a list of text parts, got {type(content).__name__}")
    for key, value in message.items():
        if isinstance(value, str):
            check_text(value, f"{where}.{key}")


def _parse_json(text: str) -> tuple[Prompt, dict[str, Any], dict[str, Any]]:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(f"invalid JSON at column {exc.colno} ({exc.msg}); write one object per line") from None
    if not isinstance(record, dict):
        raise RequestError(f"expected a JSON object, got {type(record).__name__}")
    unknown = sorted(set(record) - {*ID_KEYS, *PROMPT_KEYS, *SCHEDULING_KEYS})
    if unknown:
        raise RequestError(f"unknown key {unknown[0]!r}; a line holds 'prompt' or 'messages', "
                           "and optionally 'id' or 'custom_id', 'priority', 'deadline_s' and 'tenant'")
    scheduling = {key: record[key] for key in SCHEDULING_KEYS if key in record}
    SamplingParams(**scheduling)  # raises RequestError naming a bad field
    ids = {key: record[key] for key in ID_KEYS if key in record}
    for key, value in ids.items():
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise RequestError(f"'{key}' must be a string or an integer, got {json.dumps(value)}")
    if ("prompt" in record) == ("messages" in record):
        raise RequestError('expected {"messages": [...]} or {"prompt": "..."} (exactly one)')
    if "prompt" in record:
        if not isinstance(record["prompt"], str) or not record["prompt"]:
            raise RequestError(f"'prompt' must be a non-empty string, got {json.dumps(record['prompt'])}")
        check_text(record["prompt"], "prompt")
        return record["prompt"], ids, scheduling
    messages = record["messages"]
    if not isinstance(messages, list) or not messages:
        raise RequestError(f"'messages' must be a non-empty list of messages, got {json.dumps(messages)}")
    for number, message in enumerate(messages):
        _check_message(message, f"messages[{number}]")
    return messages, ids, scheduling


def _id_of(text: str) -> dict[str, Any]:
    """The ``id``/``custom_id`` of a line that failed, read from the members of its JSON object that parse:
    a line cut short, or broken after its id, still gives it."""
    decoder = json.JSONDecoder()
    members: dict[str, Any] = {}
    position = text.find("{") + 1 if text.lstrip().startswith("{") else 0
    try:
        while position:
            key, position = decoder.raw_decode(text, _skip(text, position))
            position = _skip(text, position)
            if not isinstance(key, str) or text[position:position + 1] != ":":
                break
            members[key], position = decoder.raw_decode(text, _skip(text, position + 1))
            position = _skip(text, position)
            position = position + 1 if text[position:position + 1] == "," else 0
    except json.JSONDecodeError:
        pass
    return {k: members[k] for k in ID_KEYS if isinstance(members.get(k), (str, int))
            and not isinstance(members[k], bool)}


def _skip(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def read_prompt_lines(path: Path) -> list[PromptLine]:
    """Every non-blank line of ``path``, each parsed and checked on its own (see the module docstring).

    Raises :class:`RequestError` when the file cannot be read or holds no line at all.
    """
    lines: list[PromptLine] = []
    for number, text, problem in _lines(path, _read_bytes(path)):
        if problem is None and not text.strip():
            continue
        index = len(lines)
        if problem is not None:
            lines.append(PromptLine(index, number, ids=_id_of(text), error=f"{path}:{number}: {problem}"))
        elif not text.lstrip().startswith("{"):
            try:
                check_text(text, "the line")
                lines.append(PromptLine(index, number, prompt=text))
            except RequestError as exc:
                lines.append(PromptLine(index, number, error=f"{path}:{number}: {exc}"))
        else:
            try:
                prompt, ids, scheduling = _parse_json(text)
                lines.append(PromptLine(index, number, prompt=prompt, ids=ids, scheduling=scheduling))
            except RequestError as exc:
                lines.append(PromptLine(index, number, ids=_id_of(text), error=f"{path}:{number}: {exc}"))
    if not lines:
        raise RequestError(f"{path} holds no prompts; write one prompt (or JSON object) per line")
    return lines


def check_messages(path: Path, lines: list[PromptLine], template: ChatTemplate) -> list[PromptLine]:
    """``lines`` with each conversation checked against the model's chat ``template``: its roles must be
    ones the template takes (:attr:`ChatTemplate.roles`), and the template must render it (a template
    may reject a conversation through ``raise_exception``)."""
    checked = []
    for line in lines:
        if isinstance(line.prompt, list):
            unknown = [(i, m["role"]) for i, m in enumerate(line.prompt) if m["role"] not in template.roles]
            problem = None
            if unknown:
                number, role = unknown[0]
                problem = (f"messages[{number}].role {role!r} is not a role of this model's chat template; "
                           f"use one of: {', '.join(sorted(template.roles))}")
            else:
                try:
                    template.render(line.prompt, add_generation_prompt=True)
                except ChatTemplateError as exc:
                    problem = str(exc)
            if problem is not None:
                line = attrs.evolve(line, prompt=None, error=f"{path}:{line.line}: {problem}")
        checked.append(line)
    return checked
