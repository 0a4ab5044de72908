"""The recurrent sequence mixers beside attention, token by token: short convolution, Mamba2's selective
scan, the gated delta rule and absorbed multi-head latent attention (``include/pyagent/mixers.h``).

Each sequence of a batch carries its recurrent state in a slot of a float32 state tensor (or, for
latent attention, its rows in a paged latent cache); a sequence with no context starts from the zero
state. The kernels walk each sequence's new tokens in order, so they serve decode steps and short
chunks; a host runs long prefills with a chunked algorithm and hands the state over. Work is split
over (sequence, head) items, so a sequence's results do not depend on its batch nor on the thread
count. float32 only. The pure-torch fallbacks (:mod:`pyagent_kernels._mixers_torch`) compute the
same recurrences (bit-identical for the convolution without SiLU, within float rounding otherwise).

:class:`MixerBatch` checks a step's layout once and runs every layer's call with it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from pyagent_kernels import _extension
from pyagent_kernels._checks import check_separate, check_tensor
from pyagent_kernels._extension import Backend
from pyagent_kernels._mixers_torch import gated_delta_torch, mla_torch, short_conv_torch, ssd_torch
from pyagent_kernels.errors import KernelArgumentError

__all__ = ["MixerBatch"]

_F32 = (torch.float32,)
_ACTIVATIONS = {None: 0, "silu": 1}


def _pointer(ffi: Any, tensor: torch.Tensor | None, kind: str = "float *") -> Any:
    return ffi.NULL if tensor is None else ffi.cast(kind, tensor.data_ptr())


def _threads(threads: object) -> int:
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise KernelArgumentError(f"threads={threads!r} must be a positive int (1: the calling thread only)")
    return threads


class MixerBatch:
    """A step's batch layout for the mixer kernels, checked once for every layer that uses it.

    Args:
        query_start_loc: int32 ``[num_seqs + 1]``: sequence ``s`` owns new tokens
            ``query_start_loc[s]:query_start_loc[s + 1]``.
        seq_lens: int32 ``[num_seqs]``: each sequence's length, its new tokens included.
        state_slots: int64 ``[num_seqs]``: each sequence's slot in the state tensors (state kernels).
        block_tables: int32 ``[num_seqs, max_blocks]`` (latent attention).
        slot_mapping: int64 ``[num_tokens]``: where each new token's latent row goes (latent attention).

    Values are checked against each call's tensors (in C, or before the fallback runs); the tensors
    must not change while the batch is in use.

    Raises:
        KernelArgumentError: a tensor of the wrong type, dtype, shape, layout or device.
    """

    def __init__(self, *, query_start_loc: torch.Tensor, seq_lens: torch.Tensor,
                 state_slots: torch.Tensor | None = None, block_tables: torch.Tensor | None = None,
                 slot_mapping: torch.Tensor | None = None) -> None:
        check_tensor(seq_lens, "seq_lens", dtypes=(torch.int32,), shape=(None,))
        self.num_seqs = seq_lens.shape[0]
        check_tensor(query_start_loc, "query_start_loc", dtypes=(torch.int32,), shape=(self.num_seqs + 1,))
        if state_slots is not None:
            check_tensor(state_slots, "state_slots", dtypes=(torch.int64,), shape=(self.num_seqs,))
        if block_tables is not None:
            check_tensor(block_tables, "block_tables", dtypes=(torch.int32,), shape=(self.num_seqs, None))
        if slot_mapping is not None:
            check_tensor(slot_mapping, "slot_mapping", dtypes=(torch.int64,), shape=(None,))
        self.query_start_loc, self.seq_lens, self.state_slots = query_start_loc, seq_lens, state_slots
        self.block_tables, self.slot_mapping = block_tables, slot_mapping
        self._starts, self._lens = query_start_loc.tolist(), seq_lens.tolist()

    @property
    def num_tokens(self) -> int:
        """The batch's new tokens, all sequences together."""
        return self._starts[-1] if self._starts else 0

    # --- value checks, in Python, for the fallback and for the C kernels' error codes ----------------

    def _layout_error(self, num_tokens: int) -> KernelArgumentError | None:
        starts, lens = self._starts, self._lens
        if starts[0] != 0 or starts[-1] != num_tokens:
            return KernelArgumentError(f"query_start_loc must start at 0 and end at the {num_tokens} tokens of the "
                                       f"inputs, got {starts[0]}..{starts[-1]}")
        for s, length in enumerate(lens):
            count = starts[s + 1] - starts[s]
            if count < 0 or length < count:
                return KernelArgumentError(f"sequence {s} has {count} new tokens and seq_lens {length}; "
                                           "query_start_loc must not decrease and a sequence holds at least its "
                                           "new tokens")
        return None

    def _state_error(self, num_tokens: int, num_slots: int) -> KernelArgumentError | None:
        if self.state_slots is None:
            return KernelArgumentError("this call needs state_slots (int64 [num_seqs]); build the MixerBatch with them")
        error = self._layout_error(num_tokens)
        if error is not None:
            return error
        seen: set[int] = set()
        for s, slot in enumerate(self.state_slots.tolist()):
            if not 0 <= slot < num_slots or slot in seen:
                return KernelArgumentError(f"state_slots[{s}] = {slot} is outside [0, {num_slots}) or used by an "
                                           "earlier sequence; give each sequence its own slot of the state")
            seen.add(slot)
        return None

    def _latent_error(self, num_tokens: int, num_blocks: int, block_size: int) -> KernelArgumentError | None:
        if self.block_tables is None or self.slot_mapping is None:
            return KernelArgumentError("latent attention needs block_tables and slot_mapping; build the MixerBatch "
                                       "with them")
        error = self._layout_error(num_tokens)
        if error is not None:
            return error
        if self.slot_mapping.shape[0] != num_tokens:
            return KernelArgumentError(f"slot_mapping holds {self.slot_mapping.shape[0]} slots for {num_tokens} tokens")
        tables = self.block_tables.tolist()
        for s, length in enumerate(self._lens):
            blocks = -(-length // block_size)
            if blocks > len(tables[s]) or any(not 0 <= b < num_blocks for b in tables[s][:blocks]):
                return KernelArgumentError(f"sequence {s} of length {length} needs {blocks} valid block ids (in "
                                           f"[0, {num_blocks})) in its block-table row, got {tables[s][:blocks]}")
        slots = self.slot_mapping.tolist()
        bad = [t for t, slot in enumerate(slots) if not 0 <= slot < num_blocks * block_size]
        if bad:
            return KernelArgumentError(f"slot_mapping[{bad[0]}] = {slots[bad[0]]} is outside the cache's "
                                       f"{num_blocks * block_size} slots")
        return None

    def _raise(self, rc: int, lib: Any, error: KernelArgumentError | None, kernel: str) -> None:
        if rc in (lib.PAK_EPARAM, lib.PAK_EINDEX) and error is not None:
            raise error
        _extension.check_status(rc, kernel)

    def _c_layout(self, ffi: Any) -> tuple[Any, Any, Any]:
        return (_pointer(ffi, self.query_start_loc, "int32_t *"), _pointer(ffi, self.seq_lens, "int32_t *"),
                _pointer(ffi, self.state_slots, "int64_t *"))

    # --- the kernels ---------------------------------------------------------------------------------

    def short_conv(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, state: torch.Tensor, *,
                   activation: str | None = None, backend: Backend = "auto", threads: int = 1) -> torch.Tensor:
        """The causal depthwise convolution of every sequence (``mixers.h``); returns ``[num_tokens, channels]``.

        Args:
            x: float32 ``[num_tokens, channels]``.
            weight: float32 ``[channels, width]``, ``width >= 2``.
            bias: float32 ``[channels]`` or ``None``.
            state: float32 ``[num_slots, channels, width - 1]``, updated in place at the batch's slots.
            activation: ``None`` or ``"silu"``.
            backend, threads: as for every kernel ("auto", "c", "torch"; C items spread over threads).
        """
        check_tensor(x, "x", dtypes=_F32, shape=(None, None))
        tokens, channels = x.shape
        check_tensor(weight, "weight", dtypes=_F32, shape=(channels, None))
        width = weight.shape[1]
        if width < 2:
            raise KernelArgumentError(f"weight must have a width of at least 2, got {width}")
        if bias is not None:
            check_tensor(bias, "bias", dtypes=_F32, shape=(channels,))
        check_tensor(state, "state", dtypes=_F32, shape=(None, channels, width - 1), writable=True)
        if activation not in _ACTIVATIONS:
            raise KernelArgumentError(f"activation={activation!r} must be None or 'silu'")
        threads = _threads(threads)
        check_separate("short_conv", {"state": state}, {"x": x, "weight": weight})
        ext = _extension.c_extension(backend, "short_conv")
        if ext is None:
            error = self._state_error(tokens, state.shape[0])
            if error is not None:
                raise error
            assert self.state_slots is not None
            return short_conv_torch(x, weight, bias, state, self.query_start_loc, self.seq_lens, self.state_slots,
                                    activation == "silu")
        if self.state_slots is None:
            raise self._state_error(tokens, state.shape[0]) or KernelArgumentError("state_slots missing")
        ffi, lib = ext.ffi, ext.lib
        out = torch.empty_like(x)
        err = ffi.new("int64_t *")
        rc = lib.pak_short_conv(_pointer(ffi, x), _pointer(ffi, weight), _pointer(ffi, bias), _pointer(ffi, state),
                                _pointer(ffi, out), tokens, channels, width, state.shape[0], *self._c_layout(ffi),
                                self.num_seqs, _ACTIVATIONS[activation], threads, err)
        if rc:
            self._raise(rc, lib, self._state_error(tokens, state.shape[0]), "short_conv")
        return out

    def ssd(self, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
            D: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, *,
            dt_limit: tuple[float, float] = (0.0, math.inf), backend: Backend = "auto",
            threads: int = 1) -> torch.Tensor:
        """Mamba2's selective scan (``mixers.h``); returns ``y [num_tokens, heads, head_dim]``.

        Args:
            x: float32 ``[num_tokens, heads, head_dim]``. dt: ``[num_tokens, heads]``.
            A, D, dt_bias: float32 ``[heads]``.
            B, C: float32 ``[num_tokens, groups, state_size]``, ``groups`` dividing ``heads``.
            state: float32 ``[num_slots, heads, head_dim, state_size]``, updated in place.
            dt_limit: ``(min, max)`` clamp of the time step after softplus.
            backend, threads: as :meth:`short_conv`.
        """
        check_tensor(x, "x", dtypes=_F32, shape=(None, None, None))
        tokens, heads, head_dim = x.shape
        check_tensor(B, "B", dtypes=_F32, shape=(tokens, None, None))
        groups, size = B.shape[1], B.shape[2]
        if groups == 0 or heads % groups:
            raise KernelArgumentError(f"B has {groups} groups, which must divide the {heads} heads")
        check_tensor(C, "C", dtypes=_F32, shape=(tokens, groups, size))
        check_tensor(dt, "dt", dtypes=_F32, shape=(tokens, heads))
        for name, vector in (("A", A), ("D", D), ("dt_bias", dt_bias)):
            check_tensor(vector, name, dtypes=_F32, shape=(heads,))
        check_tensor(state, "state", dtypes=_F32, shape=(None, heads, head_dim, size), writable=True)
        low, high = (float(v) for v in dt_limit)
        if math.isnan(low) or math.isnan(high) or low > high:
            raise KernelArgumentError(f"dt_limit={dt_limit!r} must be (min, max) with min <= max")
        threads = _threads(threads)
        ext = _extension.c_extension(backend, "ssd")
        if ext is None:
            error = self._state_error(tokens, state.shape[0])
            if error is not None:
                raise error
            assert self.state_slots is not None
            return ssd_torch(x, dt, A, B, C, D, dt_bias, state, self.query_start_loc, self.seq_lens, self.state_slots,
                             (low, high))
        if self.state_slots is None:
            raise self._state_error(tokens, state.shape[0]) or KernelArgumentError("state_slots missing")
        ffi, lib = ext.ffi, ext.lib
        y = torch.empty_like(x)
        err = ffi.new("int64_t *")
        rc = lib.pak_ssd(*(_pointer(ffi, t) for t in (x, dt, A, B, C, D, dt_bias, state, y)), tokens, heads, head_dim,
                         groups, size, state.shape[0], *self._c_layout(ffi), self.num_seqs, low, high, threads, err)
        if rc:
            self._raise(rc, lib, self._state_error(tokens, state.shape[0]), "ssd")
        return y

    def gated_delta(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                    state: torch.Tensor, *, scale: float, backend: Backend = "auto",
                    threads: int = 1) -> torch.Tensor:
        """The gated delta rule (``mixers.h``); returns ``o [num_tokens, value_heads, value_dim]``.

        Args:
            q, k: float32 ``[num_tokens, key_heads, key_dim]``.
            v: float32 ``[num_tokens, value_heads, value_dim]``, ``key_heads`` dividing ``value_heads``.
            g, beta: float32 ``[num_tokens, value_heads]``: log decay and write strength.
            state: float32 ``[num_slots, value_heads, key_dim, value_dim]``, updated in place.
            scale: the factor on the queries.
            backend, threads: as :meth:`short_conv`.
        """
        check_tensor(v, "v", dtypes=_F32, shape=(None, None, None))
        tokens, value_heads, value_dim = v.shape
        check_tensor(q, "q", dtypes=_F32, shape=(tokens, None, None))
        key_heads, key_dim = q.shape[1], q.shape[2]
        if key_heads == 0 or value_heads % key_heads:
            raise KernelArgumentError(f"q has {key_heads} heads, which must divide v's {value_heads}")
        check_tensor(k, "k", dtypes=_F32, shape=(tokens, key_heads, key_dim))
        check_tensor(g, "g", dtypes=_F32, shape=(tokens, value_heads))
        check_tensor(beta, "beta", dtypes=_F32, shape=(tokens, value_heads))
        check_tensor(state, "state", dtypes=_F32, shape=(None, value_heads, key_dim, value_dim), writable=True)
        if not isinstance(scale, (float, int)) or not math.isfinite(scale):
            raise KernelArgumentError(f"scale={scale!r} must be a finite number (usually key_dim ** -0.5)")
        threads = _threads(threads)
        ext = _extension.c_extension(backend, "gated_delta")
        if ext is None:
            error = self._state_error(tokens, state.shape[0])
            if error is not None:
                raise error
            assert self.state_slots is not None
            return gated_delta_torch(q, k, v, g, beta, state, self.query_start_loc, self.seq_lens, self.state_slots,
                                     float(scale))
        if self.state_slots is None:
            raise self._state_error(tokens, state.shape[0]) or KernelArgumentError("state_slots missing")
        ffi, lib = ext.ffi, ext.lib
        o = torch.empty_like(v)
        err = ffi.new("int64_t *")
        rc = lib.pak_gated_delta(*(_pointer(ffi, t) for t in (q, k, v, g, beta, state, o)), tokens, key_heads, key_dim,
                                 value_heads, value_dim, state.shape[0], *self._c_layout(ffi), self.num_seqs,
                                 float(scale), threads, err)
        if rc:
            self._raise(rc, lib, self._state_error(tokens, state.shape[0]), "gated_delta")
        return o

    def mla(self, q_nope: torch.Tensor, q_pe: torch.Tensor, latent: torch.Tensor, k_pe: torch.Tensor,
            w_uk: torch.Tensor, w_uv: torch.Tensor, cache: torch.Tensor, *, scale: float, backend: Backend = "auto",
            threads: int = 1) -> torch.Tensor:
        """Absorbed multi-head latent attention (``mixers.h``); returns ``[num_tokens, heads, v_dim]``.

        Args:
            q_nope: float32 ``[num_tokens, heads, nope]``. q_pe: ``[num_tokens, heads, rope]``.
            latent: float32 ``[num_tokens, size]``. k_pe: ``[num_tokens, rope]``.
            w_uk: float32 ``[heads, nope, size]``. w_uv: ``[heads, v_dim, size]``.
            cache: float32 ``[num_blocks, block_size, size + rope]``; the new rows are written at
                ``slot_mapping``.
            scale: the factor on the scores.
            backend, threads: as :meth:`short_conv` (items are a token's heads).
        """
        check_tensor(q_nope, "q_nope", dtypes=_F32, shape=(None, None, None))
        tokens, heads, nope = q_nope.shape
        check_tensor(q_pe, "q_pe", dtypes=_F32, shape=(tokens, heads, None))
        rope = q_pe.shape[2]
        check_tensor(latent, "latent", dtypes=_F32, shape=(tokens, None))
        size = latent.shape[1]
        check_tensor(k_pe, "k_pe", dtypes=_F32, shape=(tokens, rope))
        check_tensor(w_uk, "w_uk", dtypes=_F32, shape=(heads, nope, size))
        check_tensor(w_uv, "w_uv", dtypes=_F32, shape=(heads, None, size))
        check_tensor(cache, "cache", dtypes=_F32, shape=(None, None, size + rope), writable=True)
        if not isinstance(scale, (float, int)) or not math.isfinite(scale):
            raise KernelArgumentError(f"scale={scale!r} must be a finite number")
        threads = _threads(threads)
        num_blocks, block_size = cache.shape[0], cache.shape[1]
        ext = _extension.c_extension(backend, "mla")
        if ext is None or self.block_tables is None or self.slot_mapping is None:
            error = self._latent_error(tokens, num_blocks, block_size)
            if error is not None:
                raise error
            assert self.block_tables is not None and self.slot_mapping is not None
            return mla_torch(q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache, self.block_tables, self.slot_mapping,
                             self.seq_lens, self.query_start_loc, float(scale))
        ffi, lib = ext.ffi, ext.lib
        out = q_nope.new_empty((tokens, heads, w_uv.shape[1]))
        err = ffi.new("int64_t *")
        rc = lib.pak_mla(*(_pointer(ffi, t) for t in (q_nope, q_pe, latent, k_pe, w_uk, w_uv, cache, out)), tokens,
                         heads, nope, rope, size, w_uv.shape[1], num_blocks, block_size,
                         _pointer(ffi, self.block_tables, "int32_t *"), self.block_tables.shape[1],
                         _pointer(ffi, self.slot_mapping, "int64_t *"), _pointer(ffi, self.seq_lens, "int32_t *"),
                         _pointer(ffi, self.query_start_loc, "int32_t *"), self.num_seqs, float(scale), threads, err)
        if rc:
            self._raise(rc, lib, self._latent_error(tokens, num_blocks, block_size), "mla")
        return out
