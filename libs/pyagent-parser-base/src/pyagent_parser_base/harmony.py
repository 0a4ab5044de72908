"""OpenAI's harmony format (gpt-oss): messages with a channel and an optional recipient.

A message is ``<|start|>HEADER<|message|>BODY`` ended by ``<|end|>``, ``<|call|>`` or ``<|return|>``;
the header names the channel (``<|channel|>analysis``, ``commentary``, ``final``) and, for a tool
call, the recipient (``to=functions.get_weather``, in the header's role part or after the channel).
The generation prompt ends with ``<|start|>assistant``, so the first header has no ``<|start|>``.

:func:`harmony_program` reads the messages and lets a *router* decide what each one is for the
parser at hand: reasoning, content, a tool call, text passed through verbatim, or dropped. A
tool parser routes calls as calls and leaves the ``analysis`` channel to a reasoning parser; a
reasoning parser takes ``analysis`` as reasoning and passes calls through verbatim, so that the two
chained (reasoning first) read every message once.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import attrs

from pyagent_parser_base.emitter import Emitter
from pyagent_parser_base.jsonscan import json_arguments
from pyagent_parser_base.machine import Program
from pyagent_parser_base.source import (
    ParseFailure,
    Source,
    Truncated,
    Wait,
    read_until,
    skip_space,
    starts_with,
    stream_until,
)

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
_CHANNEL = re.compile(r"<\|channel\|>\s*([^\s<]+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")

REASONING, CONTENT, CALL, VERBATIM, DROP = "reasoning", "content", "call", "verbatim", "drop"


@attrs.frozen
class Header:
    """A message header: its text (from ``<|start|>`` or ``<|channel|>``), channel and recipient."""

    text: str
    channel: str
    recipient: str | None

    @classmethod
    def parse(cls, text: str) -> Header:
        """Read the channel and recipient out of a header's text."""
        channel = _CHANNEL.search(text)
        recipient = _RECIPIENT.search(text)
        return cls(text, channel.group(1) if channel else "", recipient.group(1) if recipient else None)

    @property
    def tool(self) -> str | None:
        """The called function (``functions.`` dropped), or ``None`` when the message has no recipient."""
        if self.recipient is None:
            return None
        return self.recipient.removeprefix("functions.")


Router = Callable[[Header], str]
"""Decides what a message is: REASONING, CONTENT, CALL, VERBATIM or DROP."""


def _drop(_text: str) -> None:
    """Discards a message's text."""


def harmony_program(route: Router) -> Program:
    """A program reading harmony messages, each handled as ``route`` says."""

    def program(src: Source, out: Emitter) -> Wait[None]:
        first = yield from skip_space(src)
        opener: str | None = ""
        if first is None:
            return
        if not ((yield from starts_with(src, "to=")) or (yield from starts_with(src, "<|"))):
            opener = None
        while True:
            if opener is None:
                opener = yield from stream_until(src, (START, CHANNEL), out.text)
                if opener is None:
                    return
            try:
                rest, _ = yield from read_until(src, (MESSAGE,), "a message header")
            except Truncated:
                if _RECIPIENT.search(src.buf, src.pos):
                    out.fail(f"the text ends inside the header of a tool call: {src.snippet(src.pos)!r}")
                return
            header = Header.parse(opener + rest)
            yield from _message(src, out, header, route(header))
            opener = None

    return program


def _message(src: Source, out: Emitter, header: Header, role: str) -> Wait[None]:
    if role == CALL:
        begin = src.pos
        out.start_call(header.tool or "")
        try:
            yield from json_arguments(src, out)
        except ParseFailure as failure:
            out.fail(f"{failure}; in {src.snippet(begin)!r}")
            yield from stream_until(src, ENDS, _drop)
            return
        out.end_call()
        yield from skip_space(src)
        for end in ENDS:
            if (yield from starts_with(src, end)):
                src.pos += len(end)
                break
        return
    if role == VERBATIM:  # a first header without <|start|> gets one, so that it is found again in content
        out.text(("" if header.text.startswith("<|") else "<|start|>assistant ") + header.text + MESSAGE)
    sink = {REASONING: out.think, CONTENT: out.text, VERBATIM: out.text}.get(role, _drop)
    stop = yield from stream_until(src, (*ENDS, START), sink)
    if stop == START:
        src.pos -= len(START)
    elif stop is not None and role == VERBATIM:
        out.text(stop)

