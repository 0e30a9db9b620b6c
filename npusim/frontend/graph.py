"""The graph IR: what the rest of npusim sees of an ONNX model.

Plain dataclasses holding names, op types, attributes and static shapes only — never weight
data. The loader (:mod:`npusim.frontend.onnx_loader`) fills them after binding dynamic dims and
running shape inference, so every tensor a node touches has a concrete shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Any

from npusim.errors import NpusimError

# Bytes per element for ONNX TensorProto element types (the enum values are stable across
# ONNX versions). Sub-byte types (INT4/UINT4/FLOAT4) are rounded up to one byte.
SHOWN = 5  # unbound data-sized sizes listed after the first (SSDlite has 182)

_ITEMSIZE = {
    1: 4,    # FLOAT
    2: 1,    # UINT8
    3: 1,    # INT8
    4: 2,    # UINT16
    5: 2,    # INT16
    6: 4,    # INT32
    7: 8,    # INT64
    9: 1,    # BOOL
    10: 2,   # FLOAT16
    11: 8,   # DOUBLE
    12: 4,   # UINT32
    13: 8,   # UINT64
    14: 8,   # COMPLEX64
    15: 16,  # COMPLEX128
    16: 2,   # BFLOAT16
    17: 1,   # FLOAT8E4M3FN
    18: 1,   # FLOAT8E4M3FNUZ
    19: 1,   # FLOAT8E5M2
    20: 1,   # FLOAT8E5M2FNUZ
    21: 1,   # UINT4
    22: 1,   # INT4
    23: 1,   # FLOAT4E2M1
}


@dataclass(frozen=True)
class Stored:
    """How the file stores a constant it dequantizes (a DequantizeLinear of a quantized
    constant, folded by the front end): ``bits`` per element, per axis how many elements
    share one scale (the whole axis: one scale along it), and the zero point's bits (0:
    none)."""

    bits: int
    blocks: tuple[int, ...]
    zero_point_bits: int = 0


@dataclass
class TensorInfo:
    """Name, static shape and element type of one tensor (activation or weight)."""

    name: str
    shape: tuple[int, ...]
    elem_type: int  # onnx.TensorProto enum value, e.g. 1 = FLOAT
    is_initializer: bool = False  # a weight or a constant (folded at load time)
    # a small constant's value (numpy array) when the front end knows it (shape tensors,
    # axes, scales, position ids): lowering reads Slice starts or a Pow exponent from it
    value: Any = field(default=None, compare=False, repr=False)
    # a constant the file stores quantized and dequantizes (None: stored as elem_type)
    stored: Stored | None = None

    @property
    def numel(self) -> int:
        """Number of elements (1 for a scalar)."""
        return prod(self.shape)

    @property
    def itemsize(self) -> int:
        """Bytes per element; an error for element types with no fixed size (e.g. STRING)."""
        try:
            return _ITEMSIZE[self.elem_type]
        except KeyError:
            raise NpusimError(
                f"tensor '{self.name}' has element type {self.elem_type}, which has no fixed "
                f"size; supported element types are {sorted(_ITEMSIZE)}"
            ) from None

    @property
    def nbytes(self) -> int:
        """Size of the whole tensor in bytes."""
        return self.numel * self.itemsize


@dataclass
class Node:
    """One ONNX node. ``inputs`` may hold "" for an absent optional input."""

    name: str
    op_type: str
    domain: str = ""
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    # a quantized op lowered as its float counterpart (QLinearConv as Conv): the original
    # op type, for results, and the bytes per element it computes in (None: the config's)
    origin: str = ""
    precision: int | None = None
    # nodes of the file this one absorbed (a QDQ unit's DequantizeLinear and
    # QuantizeLinear, frontend.quantized): results list them with its layer
    fused: list[str] = field(default_factory=list)


@dataclass
class Graph:
    """A loaded model: nodes in topological order plus the shape of every tensor.

    ``producer``/``consumers`` use an index built on first use: a pass that edits ``nodes``
    after asking them builds a new Graph (LLM serving appends nodes, and never asks).
    """

    name: str
    nodes: list[Node]
    tensors: dict[str, TensorInfo]
    inputs: list[str]
    outputs: list[str]
    source_path: str = ""
    doc_string: str = ""
    folded: int = 0  # nodes folded away at load time (constant subgraphs, shape arithmetic)
    # tensors that could not be given a static shape, in graph order -> why (one line);
    # lowering reports the first one after any unsupported ops (see check_shapes)
    unshaped: dict[str, str] = field(default_factory=dict)
    _producers: dict[str, Node] | None = field(default=None, init=False, repr=False, compare=False)
    _consumers: dict[str, list[Node]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def check_shapes(self) -> None:
        """Stop with the first tensor that has no static shape, if any."""
        if self.unshaped:
            raise NpusimError(next(iter(self.unshaped.values())))

    def check_counts(self) -> None:
        """Stop when a data-sized node's count (frontend.data_sized) is not given: the first
        one's message names the dim and its range, and the others are listed. Checked before
        anything else, as every shape after such a node waits for it (the shape arithmetic
        on it would otherwise be reported as ops that cannot be lowered)."""
        from npusim.frontend.data_sized import is_data_sized

        missing = [t for t in self.unshaped
                   if (p := self.producer(t)) is not None and is_data_sized(p)
                   and p.outputs[0] == t]
        if missing:
            more = " ".join(f"--dim {t}=N" for t in missing[1:SHOWN + 1])
            if len(missing) > SHOWN + 1:
                more += f" and {len(missing) - SHOWN - 1} more"
            raise NpusimError(self.unshaped[missing[0]]
                              + (f"; also unbound: {more}" if more else ""))

    def _index(self) -> None:
        producers: dict[str, Node] = {}
        consumers: dict[str, list[Node]] = {}
        for node in self.nodes:
            for t in node.outputs:
                if t:
                    producers[t] = node
            for t in node.inputs:
                if t:
                    users = consumers.setdefault(t, [])
                    if not users or users[-1] is not node:  # a node using x twice counts once
                        users.append(node)
        self._producers, self._consumers = producers, consumers

    def producer(self, tensor: str) -> Node | None:
        """The node writing ``tensor``; None for graph inputs and initializers."""
        if self._producers is None:
            self._index()
        return self._producers.get(tensor)

    def consumers(self, tensor: str) -> list[Node]:
        """Nodes reading ``tensor``, in graph order."""
        if self._consumers is None:
            self._index()
        return list(self._consumers.get(tensor, []))

    def shape(self, tensor: str) -> tuple[int, ...]:
        """Static shape of ``tensor``."""
        return self.tensor(tensor).shape

    def tensor(self, name: str) -> TensorInfo:
        """The TensorInfo of ``name``, or an error naming the graph."""
        try:
            return self.tensors[name]
        except KeyError:
            raise NpusimError(f"graph '{self.name}' has no tensor named '{name}'") from None

    def node(self, name: str) -> Node:
        """The node called ``name``."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise NpusimError(f"graph '{self.name}' has no node named '{name}'")

    @property
    def initializers(self) -> list[str]:
        """Names of the weight tensors (shapes only; their data is never loaded)."""
        return [t.name for t in self.tensors.values() if t.is_initializer]
