"""Checking tool-call arguments while they stream: is the text so far the start of one JSON object?

:class:`ObjectPrefix` is fed the arguments piece by piece and passes on only text that is known
to begin a JSON object (RFC 8259: no ``NaN``, no single quotes, no trailing text). A token whose
end has not arrived (a number, ``true``, an escape) is held until it is complete, and so is the
object's opening brace, until what follows it is known, so ``{invalid}`` releases nothing. The
closing bracket that completes the object is held as well, until :meth:`ObjectPrefix.close`: a
stream can then show a call as complete only once its reader has accepted the whole call.
"""

from __future__ import annotations

import re

from pyagent_parser_base.source import Malformed

_SPACE = re.compile(r"[ \t\n\r]*")
_STRING_RUN = re.compile(r'[^"\\\x00-\x1f]*')
_ESCAPE = re.compile(r'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})')
_ESCAPE_START = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?")
_NUMBER_RUN = re.compile(r"[-+.eE0-9]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_WORD_RUN = re.compile(r"[a-z]*")
_LITERALS = ("true", "false", "null")
_CLOSERS = {"{": "}", "[": "]"}

# What may come next.
_VALUE, _VALUE_OR_CLOSE, _KEY, _KEY_OR_CLOSE, _COLON, _COMMA_OR_CLOSE = range(6)


class ObjectPrefix:
    """An incremental check that text is a JSON object (see the module docstring)."""

    def __init__(self) -> None:
        self._buf = ""  # text received and not yet released
        self._at = 0  # where scanning resumes in _buf
        self._stack: list[str] = []
        self._expect = _VALUE
        self._in_string = False
        self._in_key = False
        self._begun = False  # something after the opening brace is known to be valid
        self._end: int | None = None  # offset in _buf of the bracket completing the object

    def feed(self, text: str) -> str:
        """Check ``text``, the next piece; return the text now known to begin a JSON object.

        Raises:
            Malformed: the text so far cannot begin a JSON object.
        """
        if self._in_string and self._begun and not self._buf and _STRING_RUN.fullmatch(text):
            return text  # more of a string, nothing held: the common case while a value streams
        self._buf += text
        self._scan()
        if self._end is not None:
            release = self._end
        elif self._begun:
            release = self._at
        else:
            release = 0
        out, self._buf = self._buf[:release], self._buf[release:]
        self._at -= release
        if self._end is not None:
            self._end -= release
        return out

    def close(self) -> str:
        """The held end of a complete object (its closing bracket and any whitespace after it).

        Raises:
            Malformed: the object is not complete.
        """
        if self._end is None:
            raise Malformed(f"the arguments end before their JSON object does: {self._buf[-40:]!r}")
        out, self._buf, self._at, self._end = self._buf, "", 0, 0
        return out

    def _scan(self) -> None:
        buf, i, size = self._buf, self._at, len(self._buf)
        while i < size:
            if self._in_string:
                i = _STRING_RUN.match(buf, i).end()  # type: ignore[union-attr]
                if i >= size:
                    break
                char = buf[i]
                if char == '"':
                    self._in_string = False
                    i += 1
                    if self._in_key:
                        self._expect = _COLON
                    else:
                        self._value_done(i - 1)
                    continue
                if char == "\\":
                    escape = _ESCAPE.match(buf, i)
                    if escape:
                        i = escape.end()
                        continue
                    if _ESCAPE_START.match(buf, i).end() == size:  # type: ignore[union-attr]
                        break  # an escape still arriving
                    raise Malformed(f"invalid escape {buf[i:i + 6]!r} in a JSON string")
                raise Malformed(f"a control character ({char!r}) inside a JSON string; it must be escaped")
            i = _SPACE.match(buf, i).end()  # type: ignore[union-attr]
            if i >= size:
                break
            i = self._token(buf, i)
            if i < 0:
                i = -i - 1  # a token still arriving: resume at its start
                break
        self._at = i

    def _token(self, buf: str, i: int) -> int:
        """Consume the token at ``i``; the offset after it, or ``-(i + 1)`` when it may not be complete yet."""
        char = buf[i]
        if self._end is not None:
            raise Malformed(f"text after the arguments' JSON object: {buf[i:i + 20]!r}")
        expect = self._expect
        if expect == _COLON:
            if char != ":":
                raise Malformed(f"expected ':' after a key in the arguments but found {buf[i:i + 20]!r}")
            self._expect = _VALUE
            return i + 1
        if expect == _COMMA_OR_CLOSE or (expect == _KEY_OR_CLOSE and char == "}") or (
                expect == _VALUE_OR_CLOSE and char == "]"):
            return self._comma_or_close(buf, i)
        if expect in (_KEY, _KEY_OR_CLOSE):
            if char != '"':
                raise Malformed(f"expected a key (a JSON string) in the arguments but found {buf[i:i + 20]!r}")
            self._begun = True
            self._in_string, self._in_key = True, True
            return i + 1
        return self._value(buf, i)

    def _comma_or_close(self, buf: str, i: int) -> int:
        char = buf[i]
        if char == ",":
            self._expect = _KEY if self._stack[-1] == "{" else _VALUE
            return i + 1
        if char in "}]" and _CLOSERS[self._stack[-1]] == char:
            self._stack.pop()
            self._begun = True
            self._value_done(i)
            return i + 1
        raise Malformed(f"expected ',' or {_CLOSERS[self._stack[-1]]!r} in the arguments but found {buf[i:i + 20]!r}")

    def _value(self, buf: str, i: int) -> int:
        char = buf[i]
        if not self._stack and char != "{":
            raise Malformed(f"the arguments must be a JSON object but begin with {buf[i:i + 20]!r}")
        if char in _CLOSERS:
            self._stack.append(char)
            self._expect = _KEY_OR_CLOSE if char == "{" else _VALUE_OR_CLOSE
            return i + 1
        if char == '"':
            self._in_string, self._in_key = True, False
            return i + 1
        run = (_NUMBER_RUN if char in "-0123456789" else _WORD_RUN).match(buf, i).end()  # type: ignore[union-attr]
        word = buf[i:run]
        if run == len(buf):
            if word and (char in "-0123456789" or any(literal.startswith(word) for literal in _LITERALS)):
                return -(i + 1)
        elif word in _LITERALS or (char in "-0123456789" and _NUMBER.fullmatch(word)):
            self._value_done(run - 1)
            return run
        raise Malformed(f"expected a JSON value in the arguments but found {buf[i:i + 20]!r}")

    def _value_done(self, last: int) -> None:
        """A value ended at offset ``last``: the object is complete, or a ',' or close bracket follows."""
        if self._stack:
            self._expect = _COMMA_OR_CLOSE
        else:
            self._end = last
