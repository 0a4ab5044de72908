"""Prepared calls run with as few calls into C as possible (``include/pyagent/program.h``).

A :class:`Program` takes a sequence of :class:`~pyagent_kernels.PreparedCall` (made once by the
wrappers' ``prepare_*`` functions) and runs it any number of times. Each run of consecutive calls of
C entry points it knows (the linear products, ``add_rms_norm``, ``rope_split``, ``silu_mul``) becomes
one ``pak_run_ops`` call that makes them in C, in order; any other call (a torch fallback, a torch
operation, LoRA) runs from Python between them, in its place. The kernels are the same, so are the
results; only the Python and cffi work between them goes. Without the compiled extension every call
is a torch fallback and runs as :func:`~pyagent_kernels.run_prepared` would.

Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyagent_kernels import _extension
from pyagent_kernels._extension import PreparedCall

#: The C entry points a program runs itself, by name, with their ``enum pak_op_kind`` names.
OP_KINDS = {
    "pak_linear_f32": "PAK_OP_LINEAR_F32",
    "pak_linear_bf16": "PAK_OP_LINEAR_BF16",
    "pak_linear_quant_f32": "PAK_OP_LINEAR_QUANT_F32",
    "pak_linear_quant_bf16": "PAK_OP_LINEAR_QUANT_BF16",
    "pak_linear_int8": "PAK_OP_LINEAR_INT8",
    "pak_add_rms_norm": "PAK_OP_ADD_RMS_NORM",
    "pak_rope_split": "PAK_OP_ROPE_SPLIT",
    "pak_silu_mul": "PAK_OP_SILU_MUL",
    "pak_paged_attention_call": "PAK_OP_PAGED_ATTENTION",
}


def _op_kind(lib: Any, call: PreparedCall) -> int | None:
    """The op kind of ``call`` when it is a call of a known C entry point, else None."""
    name = OP_KINDS.get(getattr(call.function, "__name__", ""))
    if name is None or getattr(lib, call.function.__name__, None) is not call.function:
        return None
    return int(getattr(lib, name))


def _fill(ffi: Any, op: Any, kind: int, arguments: Sequence[object]) -> None:
    """Write ``kind`` and ``arguments`` (in the entry point's order) into ``op``: pointers to ``p``,
    integers to ``n``, the float to ``f``."""
    op.kind = kind
    pointers = integers = 0
    for argument in arguments:
        if isinstance(argument, ffi.CData):
            op.p[pointers] = argument
            pointers += 1
        elif isinstance(argument, float):
            op.f = argument
        else:
            op.n[integers] = argument
            integers += 1


class Program:
    """``calls`` run in order by :meth:`run`, each run of consecutive known C calls in one call into C.

    The calls' tensors must keep their storage while the program is in use, as for
    :class:`~pyagent_kernels.PreparedCall`.
    """

    def __init__(self, calls: Sequence[PreparedCall]) -> None:
        self.calls = tuple(calls)
        #: What :meth:`run` does, in order: the calls run from Python, and one call per batch of C calls.
        self.steps: list[PreparedCall] = []
        ext = _extension.load()
        kinds = [None if ext.lib is None else _op_kind(ext.lib, call) for call in self.calls]
        start = 0
        while start < len(self.calls):
            end = start
            while end < len(self.calls) and kinds[end] is not None:
                end += 1
            if end - start >= 2:
                self.steps.append(self._batch(ext, self.calls[start:end], kinds[start:end]))
                start = end
            else:
                self.steps.append(self.calls[start])
                start += 1

    def _batch(self, ext: _extension.Extension, calls: Sequence[PreparedCall],
               kinds: Sequence[int | None]) -> PreparedCall:
        """One step running ``calls`` (known C calls) through ``pak_run_ops``."""
        ffi, lib = ext.ffi, ext.lib
        ops = ffi.new("pak_op[]", len(calls))
        for op, call, kind in zip(ops, calls, kinds, strict=True):
            assert kind is not None
            _fill(ffi, op, kind, call.arguments)
        failed = ffi.new("int64_t *")

        def run() -> int:
            rc: int = lib.pak_run_ops(ops, len(calls), failed)
            if rc:
                _extension.failed(calls[failed[0]], rc)
            return 0

        return PreparedCall(run, (), "+".join(dict.fromkeys(call.kernel for call in calls)), ())

    def run(self) -> None:
        """Make every call once, in order; KernelError (or the failing call's own explanation) if a
        C kernel fails, naming that kernel."""
        for call in self.steps:
            rc = call.function(*call.arguments)
            if rc:
                _extension.failed(call, rc)
