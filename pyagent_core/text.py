"""Checks that text is whole Unicode, with errors that say where it is not and what to do.

Text reaches pyagent from files, the command line, stdin and request bodies. Two things in a
Python ``str`` cannot be encoded as UTF-8 and break tokenizers and grammar compilers: a lone
surrogate (a JSON ``"\\ud800"`` escape with no partner), and an undecodable byte that Python kept
as a surrogate escape (``U+DC80``-``U+DCFF``, how command-line arguments and file names that are not
UTF-8 arrive). :func:`check_text` finds either and names the byte or code point;
:func:`decode_utf8` and :func:`read_utf8` decode bytes and name the first byte that is not UTF-8.
"""

from __future__ import annotations

import codecs
from pathlib import Path

from pyagent_core.errors import RequestError

_ESCAPED = range(0xDC80, 0xDD00)
"""Code points Python's ``surrogateescape`` error handler uses for the undecodable bytes 0x80-0xFF."""


def text_problem(value: str, *, escaped_bytes: bool = False) -> str | None:
    """What makes ``value`` impossible to encode as UTF-8, or ``None`` when it is whole Unicode.

    The answer names the first bad code point: a lone surrogate, or, with ``escaped_bytes`` (text
    Python decoded with ``surrogateescape``: command-line arguments, stdin), the undecodable byte a
    surrogate escape stands for (``"byte 0xe9 at character 3 is not UTF-8"``).
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        point = ord(value[error.start])
        if escaped_bytes and point in _ESCAPED:
            return f"byte 0x{point - 0xDC00:02x} at character {error.start} is not UTF-8"
        return (f"a lone surrogate (\\u{point:04x}) at character {error.start} is not Unicode text; escape a "
                "character outside the BMP as a surrogate pair (\\ud83d\\ude00)")
    return None


def check_text(value: str, where: str, *, escaped_bytes: bool = False) -> None:
    """Raise :class:`RequestError` naming ``where`` when ``value`` is not whole Unicode (see :func:`text_problem`)."""
    problem = text_problem(value, escaped_bytes=escaped_bytes)
    if problem is not None:
        raise RequestError(f"{where}: {problem}")


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` decoded as UTF-8 (a byte-order mark dropped).

    Raises:
        RequestError: naming ``where``, the first byte that is not UTF-8 and its line.
    """
    try:
        return data.removeprefix(codecs.BOM_UTF8).decode("utf-8")
    except UnicodeDecodeError as error:
        start = error.start + (len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0)
        line = data[:start].count(b"\n") + 1
        raise RequestError(f"{where} is not UTF-8 (byte 0x{data[start]:02x} on line {line}); "
                           "convert it first, e.g. iconv -f latin1 -t utf-8") from None


def read_utf8(path: Path, what: str) -> str:
    """The text of the ``what`` file ``path`` (UTF-8, a byte-order mark dropped).

    Raises:
        RequestError: the file cannot be read, or is not UTF-8 (the message names the byte).
    """
    try:
        data = path.read_bytes()
    except OSError as error:
        raise RequestError(f"cannot read the {what} file {path}: {error.strerror}; give an existing file") from None
    return decode_utf8(data, f"the {what} file {path}")
