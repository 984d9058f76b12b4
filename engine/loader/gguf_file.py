"""A lean GGUF parser: metadata as plain Python values, tensors as memory-mapped numpy views.

The `gguf` package's reader builds a numpy view per array element (seconds for a 49k-token
vocabulary); this walks the same layout with struct and hands tensors to `gguf.quants` unchanged.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# GGUF metadata value types -> struct format (scalars) or a marker for strings/arrays.
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
         7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}
STRING, ARRAY = 8, 9


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order (fastest-varying first), as llama.cpp writes it
    tensor_type: GGMLQuantizationType
    data: np.ndarray  # rows of raw blocks (quantised) or values (F32/F16), in numpy order


class GGUFFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self.buf = np.memmap(path, dtype=np.uint8, mode="r")
        self.mv = memoryview(self.buf)
        self.pos = 0
        if bytes(self.mv[:4]) != MAGIC:
            raise ValueError("bad magic (not a GGUF file)")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", self.mv, 4)
        if version not in (2, 3):
            raise ValueError(f"unsupported GGUF version {version}")
        self.pos = 24
        self.fields: dict[str, object] = {}
        for _ in range(n_kv):
            key = self._string()
            (kind,) = self._unpack("<I")
            self.fields[key] = self._value(kind)
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._unpack("<I")
            dims = self._unpack(f"<{n_dims}Q")
            kind, offset = self._unpack("<IQ")
            infos.append((name, tuple(int(d) for d in dims), GGMLQuantizationType(kind), offset))
        alignment = int(self.fields.get("general.alignment", DEFAULT_ALIGNMENT))  # type: ignore[call-overload]
        data_start = -(-self.pos // alignment) * alignment
        self.tensors = [self._tensor(name, dims, kind, data_start + offset) for name, dims, kind, offset in infos]

    def _unpack(self, fmt: str) -> tuple:
        values = struct.unpack_from(fmt, self.mv, self.pos)
        self.pos += struct.calcsize(fmt)
        return values

    def _string(self) -> str:
        (length,) = self._unpack("<Q")
        end = self.pos + length
        if end > len(self.mv):
            raise ValueError("string runs past the end of the file")
        text = bytes(self.mv[self.pos:end]).decode("utf-8", errors="replace")
        self.pos = end
        return text

    def _value(self, kind: int) -> object:
        if kind in SCALARS:
            return self._unpack("<" + SCALARS[kind])[0]
        if kind == STRING:
            return self._string()
        if kind != ARRAY:
            raise ValueError(f"unknown metadata value type {kind}")
        item_kind, count = self._unpack("<IQ")
        if item_kind in NUMPY:
            dtype = np.dtype(NUMPY[item_kind]).newbyteorder("<")
            end = self.pos + count * dtype.itemsize
            if end > len(self.mv):
                raise ValueError("array runs past the end of the file")
            values = np.frombuffer(self.mv[self.pos:end], dtype=dtype).tolist()
            self.pos = end
            return values
        return [self._value(item_kind) for _ in range(count)]

    def _tensor(self, name: str, dims: tuple[int, ...], kind: GGMLQuantizationType, start: int) -> TensorInfo:
        block_elems, block_bytes = GGML_QUANT_SIZES[kind]
        rows_shape = tuple(reversed(dims))  # numpy order: slowest-varying first
        row_elems = rows_shape[-1]
        if row_elems % block_elems:
            raise ValueError(f"tensor {name!r}: row of {row_elems} is not a multiple of the {kind.name} block")
        row_bytes = row_elems // block_elems * block_bytes
        n_rows = int(np.prod(rows_shape[:-1], dtype=np.int64)) if len(rows_shape) > 1 else 1
        end = start + n_rows * row_bytes
        if end > len(self.buf):
            raise ValueError(f"tensor {name!r} runs past the end of the file (truncated?)")
        raw = self.buf[start:end]
        if kind == GGMLQuantizationType.F32:
            data = raw.view(np.float32).reshape(rows_shape)
        elif kind == GGMLQuantizationType.F16:
            data = raw.view(np.float16).reshape(rows_shape)
        else:
            data = raw.reshape(*rows_shape[:-1], row_bytes)
        return TensorInfo(name, dims, kind, data)
