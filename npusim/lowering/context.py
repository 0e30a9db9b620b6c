"""What every op lowering gets: the graph, the config, DRAM addresses, the builder."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from npusim.config import NpuConfig
from npusim.errors import NpusimError
from npusim.frontend.graph import Graph, Node
from npusim.lowering.fusion import VectorGroup
from npusim.lowering.mapping import LoopCounts, Mapping, MappingTable
from npusim.lowering.tiling import ACC_BYTES, Budget
from npusim.program import ProgramBuilder



@dataclass
class LoweringContext:
    graph: Graph
    config: NpuConfig
    builder: ProgramBuilder
    mapping: MappingTable | None = None
    address: dict[str, int] = field(default_factory=dict)
    nbytes: dict[str, int] = field(default_factory=dict)  # bytes given to each (where known)
    producer_layer: dict[str, int] = field(default_factory=dict)
    # a GEMM or conv that absorbs a BatchNormalization or a bias Add loads that bias
    # (node name -> tensor holding it), as it would after the deployment-time folding
    folded_bias: dict[str, str] = field(default_factory=dict)
    # bytes per element of the node being lowered when it differs from the config's (a
    # quantized QLinearConv / MatMulInteger computes in int8: Node.precision)
    node_precision: int | None = None
    # tensors computed at run time that a node's output path reads (node name -> tensors:
    # an integer GEMM's dequantization scale, fusion.plan_fusions): its layer waits for them
    waits: dict[str, list[str]] = field(default_factory=dict)
    # a group's first node -> the element-wise nodes that run as one vector pass with it
    # (fusion.vector_groups)
    groups: dict[str, VectorGroup] = field(default_factory=dict)

    @property
    def budget(self) -> Budget:
        b = Budget.of(self.config)
        return b if self.node_precision is None else replace(b, precision=self.node_precision)

    @property
    def precision(self) -> int:
        return self.node_precision or self.config.precision

    def addr(self, tensor: str, nbytes: int | None = None) -> int:
        """DRAM base address of a tensor, allocated on first use (``nbytes``: its size when
        not one element per ``precision`` bytes, e.g. a weight stored in 4 bits)."""
        if tensor not in self.address:
            if nbytes is None:
                nbytes = self.graph.tensor(tensor).numel * self.precision
            self.address[tensor] = self.builder.allocate(nbytes)
            self.nbytes[tensor] = nbytes
        return self.address[tensor]

    def bias_addr(self, tensor: str) -> int:
        """DRAM base address of a bias the accumulator adds: it is stored as the accumulator
        reads it, ACC_BYTES an element (Gemmini's bias, the D matrix, is ``acc_t``), so
        the GEMM's bias loads stay inside it."""
        return self.addr(tensor, self.graph.tensor(tensor).numel * ACC_BYTES)

    def scratch(self, name: str, shape, itemsize: int | None = None) -> str:
        """An internal tensor of a lowering (a GEMM's output before a layout move, a
        transposed convolution's columns): registered in the graph and given DRAM space,
        ``itemsize`` bytes per element (default: the precision)."""
        from npusim.frontend.graph import TensorInfo

        if name not in self.graph.tensors:
            self.graph.tensors[name] = TensorInfo(name, tuple(int(d) for d in shape), 1, False)
        if itemsize is not None and name not in self.address:
            self.address[name] = self.builder.allocate(
                self.graph.tensors[name].numel * itemsize)
        self.addr(name)
        return name

    def alias(self, tensor: str, same_as: str) -> None:
        """``tensor`` occupies the same bytes as ``same_as`` (a pure relabelling)."""
        self.address[tensor] = self.addr(same_as)

    def preds(self, node: Node) -> list[int]:
        """Layers producing this node's inputs (and what its output path reads)."""
        tensors = [*node.inputs, *self.waits.get(node.name, ())]
        return sorted({self.producer_layer[t] for t in tensors if t in self.producer_layer})

    def lookup_mapping(self, key: LoopCounts) -> Mapping | None:
        return self.mapping.lookup(key) if self.mapping is not None else None

    def mapping_error(self, node: Node, m: Mapping, why: str) -> NpusimError:
        where = f"{self.mapping.path}:{m.line}" if self.mapping is not None else f"line {m.line}"
        return NpusimError(f"mapping {where} ('{m.text.strip()}') does not fit layer "
                           f"'{node.name}' ({node.op_type}): {why}")
