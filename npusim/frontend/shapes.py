"""Static shapes for every tensor: constant folding and shape inference in one forward pass.

Once the symbolic input dims are bound, every shape in an exported graph is a constant, and
so is every *shape computation* in it (``Shape -> Gather -> Unsqueeze -> Concat ->
Reshape``, ``Range``, ``Expand``, ``ConstantOfShape``, ``Where`` on masks, ...). So npusim
walks the nodes once, in topological order, and for each node

1. infers its output types with the op's own inference function from ONNX
   (``onnx.shape_inference.infer_node_outputs``), handing it the values of the inputs that
   are known constants, so data-dependent shapes (Reshape, Expand, Range, Slice, Tile,
   ConstantOfShape, Resize, ...) come out exact; ops ONNX does not define (ONNX Runtime's
   ``com.microsoft`` ops such as FusedMatMul, SkipLayerNormalization, RotaryEmbedding) are
   inferred by ONNX Runtime itself from a one-node model (cached per signature);
2. folds it if it depends only on constants: ``Shape``/``Size`` of a tensor whose shape is
   known, and any deterministic standard op whose inputs are all constants. Small results
   are computed with ONNX's reference implementation (``onnx.reference``), so shape
   arithmetic is evaluated with the ONNX specification's own semantics, never guessed;
   large results (weights made by ``ConstantOfShape``, a transposed or cast weight, a
   causal mask built from shapes alone) only keep their shape and become weights: they are
   never materialised, as a deployment compiler would precompute them;
3. inlines an ``If`` whose condition is a known constant, and unrolls a ``Loop`` whose
   trip count and per-iteration condition are (``_Pass.unroll``).

Folded nodes leave the graph (they cost nothing); what stays is what a real NPU computes.
ONNX Runtime's ``symbolic_shape_infer`` tool was the other candidate: it needs sympy, has no
rule for several ops its own optimizer emits (FusedMatMul, FusedConv, QLinearConv) and writes
a file into the working directory when it gives up, while the ops' own ONNX inference
functions, ONNX's reference evaluator and ONNX Runtime's session cover every op.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from math import prod

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, TypeProto, defs, helper, numpy_helper

from npusim.errors import NpusimError
from npusim.frontend.data_sized import count_bound, count_of, is_data_sized, output_types
from npusim.frontend.graph import Stored
from npusim.frontend.quantized import stored_after

STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")

# A Loop with a known number of iterations is unrolled up to this many (a longer one stays
# a Loop: npusim cannot lower it).
MAX_UNROLL = 4096

# Folded results with at most this many elements are computed and kept by value (shape
# tensors, position ids, scales); larger ones keep their shape only.
VALUE_MAX = 1 << 16

# Ops that only make constants from shapes or constants: once the dims are bound every
# instance is folded (an instance whose inputs depend on input data cannot be shaped and
# is reported as such), so lowering never sees them.
ALWAYS_FOLDED = {"Constant", "Shape", "Size", "ConstantOfShape", "Range", "EyeLike",
                 "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"}

# Ops whose result is not a function of their inputs: never folded.
NONDETERMINISTIC = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                    "Multinomial", "Bernoulli", "Dropout"}
# Control flow and sequences: folded only through their own rules (If) or not at all.
NOT_FOLDED = {"If", "Loop", "Scan", "SequenceConstruct", "SequenceEmpty", "SequenceInsert",
              "SequenceErase", "SequenceAt", "SplitToSequence", "ConcatFromSequence",
              "SequenceLength", "SequenceMap", "Optional", "OptionalGetElement",
              "OptionalHasElement"}


@dataclass
class Tensor:
    """What the pass knows of one tensor."""

    elem_type: int
    shape: tuple[int, ...] | None  # None: rank or some dim unknown
    constant: bool = False  # a weight, a graph constant or a folded result
    value: np.ndarray | None = None  # known small constant value
    stored: Stored | None = None  # a folded dequantization: how the file stores the data


@dataclass
class Shaped:
    """The result of :func:`infer_static`: the nodes left to lower and every tensor."""

    nodes: list[onnx.NodeProto]
    tensors: dict[str, Tensor]
    folded: int = 0  # nodes folded away
    unshaped: dict[str, onnx.NodeProto] = field(default_factory=dict)  # tensor -> producer
    bounds: dict[str, int] = field(default_factory=dict)  # data-sized node -> its most


def _static(tp: TypeProto) -> tuple[int, tuple[int, ...] | None] | None:
    """(elem_type, shape or None) of a tensor type; None for non-tensor types."""
    if not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return tt.elem_type, None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return tt.elem_type, None
        dims.append(int(d.dim_value))
    return tt.elem_type, tuple(dims)


def _known(st) -> bool:
    """Whether an inferred output type is a tensor of static shape."""
    return isinstance(st, tuple) and st[1] is not None


def _type_proto(t: Tensor) -> TypeProto:
    return helper.make_tensor_type_proto(t.elem_type, list(t.shape) if t.shape is not None else None)


class _Pass:
    def __init__(self, model: onnx.ModelProto, where: str, counts: dict[str, int]):
        self.where = where
        self.model = model
        self.counts = counts  # data-sized nodes' counts by name (frontend.data_sized)
        self.bounds: dict[str, int] = {}  # the most each data-sized node may keep
        self.opsets = {o.domain or "": o.version for o in model.opset_import}
        self.opsets.setdefault("", defs.onnx_opset_version())
        self.tensors: dict[str, Tensor] = {}
        self.others: dict[str, TypeProto] = {}  # sequence / optional values: type only
        self.nodes: list[onnx.NodeProto] = []
        self.folded = 0
        self.unshaped: dict[str, onnx.NodeProto] = {}
        self.data_cache: dict[str, TensorProto] = {}
        self.ort_cache: dict[bytes, dict[int, tuple[int, tuple[int, ...] | None]]] = {}
        self.needed = _consumed(model.graph)
        # shapes the file states (value_info, graph outputs), used where inference gives
        # none: an op whose output shape depends on an input's values (GroupQueryAttention's
        # total_sequence_length) can still be shaped when the exporter wrote the shape down
        self.declared: dict[str, tuple[int, tuple[int, ...]]] = {}
        for vi in list(model.graph.value_info) + list(model.graph.output):
            st = _static(vi.type)
            if st is not None and st[1] is not None:
                self.declared[vi.name] = st

    # ----------------------------------------------------------------- inputs

    def seed(self, weights: set[str]) -> None:
        g = self.model.graph
        for vi in g.input:
            st = _static(vi.type)
            if st is not None:
                self.tensors[vi.name] = Tensor(st[0], st[1], constant=vi.name in weights)
            else:
                self.others[vi.name] = vi.type
        for t in g.initializer:
            shape = tuple(int(d) for d in t.dims)
            value = None
            if t.data_location != TensorProto.EXTERNAL and prod(shape) <= VALUE_MAX:
                try:
                    value = numpy_helper.to_array(t)
                except Exception:  # noqa: BLE001 - odd encodings stay shape-only
                    value = None
            self.tensors[t.name] = Tensor(t.data_type, shape, constant=True, value=value)

    # ----------------------------------------------------------------- the walk

    def run(self, nodes) -> None:
        for node in nodes:
            if node.op_type == "If" and node.domain in ("", "ai.onnx"):
                cond = self.tensors.get(node.input[0])
                if cond is not None and cond.value is not None:
                    nodes = _inline_if(node, bool(np.asarray(cond.value).reshape(-1)[0]))
                    # the branch's outputs are read now (by the If's outputs' Identities)
                    self.needed.update(t for n in nodes for t in n.input if t)
                    self.run(nodes)
                    self.folded += 1
                    continue
            if node.op_type == "Loop" and node.domain in ("", "ai.onnx") and self.unroll(node):
                continue
            self.visit(node)

    def unroll(self, node: onnx.NodeProto) -> bool:
        """Unroll a ``Loop`` whose iterations are known once the dims are bound: the trip
        count a constant and the condition, iteration after iteration, a constant (what
        tf2onnx writes for a Keras RNN: ``time < steps``). Each iteration's body is walked
        like any other nodes (its names prefixed ``<loop>/iter<i>/``), the loop-carried
        values flow from one to the next, and the scan outputs are stacked by a Concat.
        Returns False (and leaves everything as it was) when the loop cannot be unrolled:
        a data-dependent condition, an unknown count, more than ``MAX_UNROLL`` iterations,
        a body with subgraphs of its own."""
        body = next(a.g for a in node.attribute if a.name == "body")
        if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS)
               for n in body.node for a in n.attribute):
            return False
        trips = self._scalar(node.input[0]) if node.input and node.input[0] else None
        cond = self._scalar(node.input[1]) if len(node.input) > 1 and node.input[1] else True
        if cond is None or (trips is None and not cond):
            return False
        limit = MAX_UNROLL if trips is None else min(int(trips), MAX_UNROLL + 1)
        if limit > MAX_UNROLL:
            return False
        saved = (len(self.nodes), dict(self.tensors), dict(self.others), dict(self.unshaped),
                 self.folded, set(self.needed))
        carried = list(node.input[2:])
        n_carried = len(carried)
        ins = [i.name for i in body.input]
        outs = [o.name for o in body.output]
        scans: list[list[str]] = [[] for _ in outs[1 + n_carried:]]
        loop = node.name or "Loop"
        i = 0
        while i < limit and cond:
            prefix = f"{loop}/iter{i}/"
            names = {ins[0]: prefix + "iteration", ins[1]: prefix + "cond_in"}
            names.update(zip(ins[2:], carried))
            local = {o for n in body.node for o in n.output if o} | {
                t.name for t in body.initializer}
            names.update({t: prefix + t for t in local})
            nodes = [helper.make_node("Constant", [], [names[ins[0]]],
                                      value=numpy_helper.from_array(np.array(i, np.int64))),
                     helper.make_node("Constant", [], [names[ins[1]]],
                                      value=numpy_helper.from_array(np.array(True)))]
            for init in body.initializer:
                c = TensorProto()
                c.CopyFrom(init)
                c.name = names[init.name]
                nodes.append(helper.make_node("Constant", [], [c.name], value=c))
            for n in body.node:
                c = onnx.NodeProto()
                c.CopyFrom(n)
                c.name = prefix + (n.name or n.op_type)
                del c.input[:]
                c.input.extend(names.get(t, t) for t in n.input)
                del c.output[:]
                c.output.extend(names.get(t, t) for t in n.output)
                nodes.append(c)
            self.needed.update(t for n in nodes for t in n.input if t)
            self.needed.update(names.get(t, t) for t in outs)
            self.run(nodes)
            cond = self._scalar(names.get(outs[0], outs[0]))
            if cond is None:  # a condition on data: not unrollable
                self._restore(saved)
                return False
            carried = [names.get(t, t) for t in outs[1:1 + n_carried]]
            for k, t in enumerate(outs[1 + n_carried:]):
                scans[k].append(names.get(t, t))
            i += 1
        if i == 0 or (trips is None and cond):  # none ran, or no end within MAX_UNROLL
            self._restore(saved)
            return False
        tail = [helper.make_node("Identity", [src], [dst], name=f"{loop}/{dst}")
                for src, dst in zip(carried, node.output[:n_carried]) if dst]
        for k, dst in enumerate(node.output[n_carried:]):
            if not dst:
                continue
            rows = []
            for j, t in enumerate(scans[k]):
                rows.append(f"{loop}/scan{k}/{j}")
                tail.append(helper.make_node("Unsqueeze", [t, f"{loop}/axis0"], [rows[-1]],
                                             name=rows[-1]))
            tail.append(helper.make_node("Concat", rows, [dst], name=f"{loop}/{dst}",
                                         axis=0))
        tail.insert(0, helper.make_node("Constant", [], [f"{loop}/axis0"],
                                        value=numpy_helper.from_array(np.array([0], np.int64))))
        self.run(tail)
        self.folded += 1
        return True

    def _scalar(self, name: str):
        """The value of a known one-element constant tensor, else None."""
        t = self.tensors.get(name)
        if t is None or t.value is None or np.asarray(t.value).size != 1:
            return None
        return np.asarray(t.value).reshape(-1)[0]

    def _restore(self, saved) -> None:
        n, self.tensors, self.others, self.unshaped, self.folded, self.needed = saved
        del self.nodes[n:]

    def visit(self, node: onnx.NodeProto) -> None:
        ins = [self.tensors.get(i) if i else None for i in node.input]
        if self.fold_shape_of(node, ins):
            return
        out_types = self.infer(node, ins)
        self.check_structure(node, ins, out_types)
        if is_data_sized(node) and not all(_known(out_types.get(i))
                                           for i, o in enumerate(node.output) if o):
            out_types = self.sized_by_count(node, ins, out_types)
        if self.foldable(node, ins):
            folded = self.evaluate(node, ins, out_types)
            if not folded and all(_known(out_types.get(i))
                                  for i, o in enumerate(node.output) if o):
                for i, o in enumerate(node.output):
                    if o:
                        self.tensors[o] = Tensor(out_types[i][0], out_types[i][1], True)
                self.folded += 1
                folded = True
            if folded:
                out = self.tensors.get(node.output[0]) if node.output else None
                if out is not None:
                    out.stored = stored_after(node, ins, out.shape)
                return
        self.nodes.append(node)
        for i, o in enumerate(node.output):
            if not o:
                continue
            st = out_types.get(i)
            if isinstance(st, TypeProto):
                self.others[o] = st
                st = None
            if not _known(st) and o in self.declared:
                st = self.declared[o]
            if st is not None and st[1] is not None:
                self.tensors[o] = Tensor(st[0], st[1])
            elif o in self.needed and o not in self.unshaped:
                self.unshaped[o] = node

    def check_structure(self, node, ins, out_types) -> None:
        """What ONNX's shape rules let pass and ONNX Runtime refuses, said at the node
        (otherwise it surfaces later as another node's mismatch, a tile that fits nowhere,
        or a shape said to depend on values): a Reshape keeps its element count (the rule
        takes a target without -1 as given); a Conv's groups divide its channels and its
        kernel fits the padded input; a product does not reduce over nothing."""
        if node.domain not in STANDARD_DOMAINS or node.op_type not in _STRUCTURE_RULES:
            return
        shapes = [t.shape if t is not None else None for t in ins]
        out = out_types.get(0)
        problem = _STRUCTURE_RULES[node.op_type](
            _attributes(node), shapes, out[1] if _known(out) else None)
        if problem:
            known = {n: t for n, t in zip(node.input, ins) if n and t is not None}
            raise NpusimError(f"{self.where}: node '{node.name or node.op_type}' "
                              f"({node.op_type}): {problem}; input shapes "
                              f"{_describe_inputs(node, known)}")

    def sized_by_count(self, node, ins, out_types):
        """A data-sized node's outputs shaped by the count the user gave (``--dim``)."""
        if not ins or any(n and (t is None or t.shape is None) for n, t in zip(node.input, ins)):
            return out_types  # an input's shape unknown: reported as such
        attrs = _attributes(node)
        shapes = [t.shape if t is not None else None for t in ins]
        values = [t.value if t is not None else None for t in ins]
        name = node.output[0]
        bound = count_bound(node.op_type, attrs, shapes, values)
        self.bounds[name] = bound
        count = count_of(node, name, self.counts, bound)
        if count is None:
            return out_types
        return dict(enumerate(output_types(node.op_type, attrs, shapes, ins[0].elem_type,
                                           count)))

    def fold_shape_of(self, node, ins) -> bool:
        """Shape, Size and EyeLike of a tensor whose shape is known are constants."""
        if node.op_type not in ("Shape", "Size", "EyeLike") or node.domain not in ("", "ai.onnx"):
            return False
        x = ins[0] if ins else None
        if x is None or x.shape is None:
            return False
        if node.op_type == "EyeLike":  # depends on the shape only: a weight-like constant
            attrs = {a.name: a.i for a in node.attribute}
            self.tensors[node.output[0]] = Tensor(attrs.get("dtype", x.elem_type), x.shape, True)
            self.folded += 1
            return True
        if node.op_type == "Size":
            value = np.array(prod(x.shape), dtype=np.int64)
        else:
            attrs = {a.name: a.i for a in node.attribute}
            r = len(x.shape)
            start = attrs.get("start", 0)
            end = attrs.get("end", r)
            start = min(max(start + r if start < 0 else start, 0), r)
            end = min(max(end + r if end < 0 else end, 0), r)
            value = np.array(x.shape[start:end], dtype=np.int64)
        self.tensors[node.output[0]] = Tensor(TensorProto.INT64, value.shape, True, value)
        self.folded += 1
        return True

    def foldable(self, node, ins) -> bool:
        if node.domain not in ("", "ai.onnx") or node.op_type in NONDETERMINISTIC \
                or node.op_type in NOT_FOLDED:
            return False
        if not defs.has(node.op_type):
            return False
        return all(t is not None and t.constant for t, name in zip(ins, node.input) if name)

    def evaluate(self, node, ins, out_types) -> bool:
        """Compute a constant node's outputs with ONNX's reference implementation, when its
        inputs are known by value and its outputs are small."""
        if any(t is not None and t.value is None for t in ins):
            return False
        for i, o in enumerate(node.output):
            st = out_types.get(i)
            if isinstance(st, TypeProto):
                return False
            if o and (st is None or st[1] is None or prod(st[1]) > VALUE_MAX):
                if _known(st):
                    return False  # known and large: shape only
                size = _size_from_values(node, ins)
                if size is None or size > VALUE_MAX:
                    return False  # could be large: keep the shape only
        try:
            values = _reference_run(node, [t.value if t is not None else None for t in ins],
                                    self.opsets)
        except Exception:  # noqa: BLE001 - the reference has no rule: keep it a node
            return False
        for o, v, in zip(node.output, values):
            if not o:
                continue
            v = np.asarray(v)
            elem = helper.np_dtype_to_tensor_dtype(v.dtype) if v.dtype != object else 0
            if elem == 0:
                return False
            small = v.size <= VALUE_MAX
            self.tensors[o] = Tensor(elem, tuple(int(d) for d in v.shape), True,
                                     v if small else None)
        self.folded += 1
        return True

    # ----------------------------------------------------------------- inference

    def infer(self, node, ins) -> dict[int, tuple[int, tuple[int, ...] | None]]:
        """Output index -> (elem_type, static shape or None), from ONNX's inference function
        of the op, or ONNX Runtime's for ops ONNX does not define."""
        known = {n: t for n, t in zip(node.input, ins) if n and t is not None}
        if node.domain in STANDARD_DOMAINS and defs.has(node.op_type, node.domain or ""):
            out = self.onnx_infer(node, known)
            if all(isinstance(out.get(i), TypeProto) or _known(out.get(i))
                   for i, o in enumerate(node.output) if o):
                return out
            if node.op_type in NOT_FOLDED or node.op_type == "Constant" or any(
                    n and n not in known for n in node.input):
                return out
            ort = self.ort_infer(node, known)
            for i, st in ort.items():
                if st[1] is not None:
                    out[i] = st
            return out
        return self.ort_infer(node, known)

    def onnx_infer(self, node, known: dict[str, Tensor]):
        """ONNX's inference function of the op; sequence or optional outputs come back as
        their TypeProto."""
        domain = node.domain if node.domain != "ai.onnx" else ""
        try:
            schema = defs.get_schema(node.op_type, self.opsets.get(domain, 1), domain)
        except defs.SchemaError:
            return {}
        node = _with_defaults(node, schema)
        types = {n: _type_proto(t) for n, t in known.items()}
        types.update({n: self.others[n] for n in node.input if n in self.others})
        if any(n and n not in types for n in node.input):
            return {}  # an input without a type: nothing to infer from
        data = {n: self.tensor_proto(n, t) for n, t in known.items() if t.value is not None}
        opsets = [helper.make_opsetid(d, v) for d, v in self.opsets.items()]
        try:
            inferred = onnx.shape_inference.infer_node_outputs(schema, node, types, data,
                                                               opset_imports=opsets)
        except Exception as e:  # noqa: BLE001 - inconsistent inputs: say so at the node
            if all(t.value is not None for t in known.values()) and self.foldable(
                    node, [known.get(n) for n in node.input if n]):
                return {}  # a constant: the reference evaluator may still compute it
            raise NpusimError(f"{self.where}: node '{node.name or node.op_type}' "
                              f"({node.op_type}): shape inference failed: "
                              f"{_first_line(e)}; input shapes "
                              f"{_describe_inputs(node, known)}") from None
        out = {}
        for i, o in enumerate(node.output):
            if o in inferred:
                st = _static(inferred[o])
                out[i] = st if st is not None else inferred[o]
        if not schema.has_type_and_shape_inference_function and (
                schema.has_function or schema.has_context_dependent_function) and not all(
                _known(out.get(i)) for i, o in enumerate(node.output) if o):
            out.update(self.function_infer(node, types, data, opsets))
        return out

    def function_infer(self, node, types, data, opsets):
        """Outputs of an op ONNX defines as a function with no shape rule of its own
        (GreaterOrEqual and LessOrEqual at opsets 12-15 in onnx 1.23: the element type
        only), inferred through its body in a graph of its own."""
        inputs = [helper.make_value_info(n, types[n]) for n in node.input if n]
        outputs = [helper.make_value_info(o, TypeProto()) for o in node.output if o]
        graph = helper.make_graph([node], "probe", inputs, outputs, list(data.values()))
        try:
            inferred = onnx.shape_inference.infer_shapes(
                helper.make_model(graph, opset_imports=opsets), strict_mode=False,
                data_prop=True)
        except Exception:  # noqa: BLE001 - no better than the node's own inference
            return {}
        found = {v.name: v.type for v in inferred.graph.output}
        return {i: st for i, o in enumerate(node.output)
                if o in found and (st := _static(found[o])) is not None and _known(st)}

    def tensor_proto(self, name: str, t: Tensor) -> TensorProto:
        tp = self.data_cache.get(name)
        if tp is None:
            tp = numpy_helper.from_array(np.asarray(t.value), name)
            self.data_cache[name] = tp
        return tp

    def ort_infer(self, node, known: dict[str, Tensor]):
        from npusim.frontend.ort_shapes import node_output_types

        key = node.SerializeToString() + repr(
            [(n, t.elem_type, t.shape, None if t.value is None else t.value.tobytes())
             for n, t in known.items()]).encode()
        if key not in self.ort_cache:
            self.ort_cache[key] = node_output_types(node, known, self.opsets)
        return dict(self.ort_cache[key])


# ops whose output can be far larger than their inputs: sized from the input values first
_GROWING = {"ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Upsample", "Pad",
            "EyeLike", "OneHot"}


def _size_from_values(node, ins) -> int | None:
    """Elements of the output of a growing op, from its inputs' values (None: unknown);
    other ops are no larger than their inputs."""
    op = node.op_type
    vals = [None if t is None else t.value for t in ins]
    try:
        if op not in _GROWING:
            return max((int(np.asarray(v).size) for v in vals if v is not None), default=1)
        if op == "ConstantOfShape":
            return int(np.prod(np.asarray(vals[0]).reshape(-1)))
        if op == "Range":
            start, limit, delta = (float(np.asarray(v).reshape(-1)[0]) for v in vals[:3])
            return max(0, int(np.ceil((limit - start) / delta))) if delta else None
        if op == "Expand":
            return int(np.prod(np.broadcast_shapes(np.asarray(vals[0]).shape,
                                                   tuple(np.asarray(vals[1]).reshape(-1)))))
        if op == "Tile":
            return int(np.asarray(vals[0]).size * np.prod(np.asarray(vals[1]).reshape(-1)))
    except Exception:  # noqa: BLE001 - odd values: unknown
        return None
    return None


def _reference_run(node: onnx.NodeProto, values: list, opsets: dict[str, int]) -> list:
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if n else "" for i, n in enumerate(node.input)]
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    del copy.input[:]
    copy.input.extend(names)
    outs = [f"out{i}" if o else "" for i, o in enumerate(node.output)]
    del copy.output[:]
    copy.output.extend(outs)
    graph = helper.make_graph(
        [copy], "fold",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype),
                                       None) for n, v in zip(names, values) if n],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs if o])
    ev = ReferenceEvaluator(graph, opsets=dict(opsets))
    feeds = {n: np.asarray(v) for n, v in zip(names, values) if n}
    with np.errstate(all="ignore"), warnings.catch_warnings():  # log(0) is -inf, as ONNX says
        warnings.simplefilter("ignore")
        results = ev.run(None, feeds)
    it = iter(results)
    return [next(it) if o else None for o in outs]


def _attributes(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _reshape_rule(attrs, shapes, out) -> str | None:
    x = shapes[0] if shapes else None
    if x is None or out is None or prod(x) == prod(out):
        return None
    return (f"{prod(x)} elements {list(x)} cannot take the shape {list(out)} "
            f"({prod(out)} elements)")


def _conv_rule(attrs, shapes, out) -> str | None:
    x, w = (shapes + [None, None])[:2]
    if x is None or w is None or len(x) < 3 or len(w) != len(x):
        return None
    group = int(attrs.get("group", 1))
    if group < 1 or x[1] % group or w[0] % group:
        return (f"group = {group} must divide its {x[1]} input and {w[0]} output channels")
    if w[1] * group != x[1]:
        return (f"its weight's {w[1]} input channels x group {group} are not the input's "
                f"{x[1]} channels")
    if 0 in x[1:2] and out is not None and prod(out):
        return "it reduces over 0 input channels (its output would be all zeros)"
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return None  # SAME / VALID pad to fit
    spatial = len(x) - 2
    pads = list(attrs.get("pads", [0] * 2 * spatial))
    dil = list(attrs.get("dilations", [1] * spatial))
    for i in range(spatial):
        size = x[2 + i] + pads[i] + pads[i + spatial]
        span = dil[i] * (w[2 + i] - 1) + 1
        if span > size:
            return (f"its kernel spans {span} along spatial axis {i}, more than the "
                    f"{size} of its padded input")
    return None


def _product_rule(attrs, shapes, out) -> str | None:
    """A MatMul or Gemm over a reduction of 0 (its output, not empty, all zeros or C)."""
    a, b = (shapes + [None, None])[:2]
    if a is None or b is None or not a or not b or out is None or not prod(out):
        return None
    k = a[-2] if attrs.get("transA") and len(a) >= 2 else a[-1]
    if k == 0:
        return "it reduces over 0 elements (its output would be all zeros, or its bias)"
    return None


_STRUCTURE_RULES = {"Reshape": _reshape_rule, "Conv": _conv_rule, "MatMul": _product_rule,
                    "Gemm": _product_rule}


def _inline_if(node: onnx.NodeProto, cond: bool) -> list[onnx.NodeProto]:
    """The nodes of the taken branch, its outputs renamed to the If's outputs."""
    branch = next(a.g for a in node.attribute
                  if a.name == ("then_branch" if cond else "else_branch"))
    nodes = list(branch.node)
    for init in branch.initializer:  # branch constants become Constant nodes
        nodes.insert(0, helper.make_node("Constant", [], [init.name], value=init))
    for out, vi in zip(node.output, branch.output):
        if out:
            nodes.append(helper.make_node("Identity", [vi.name], [out],
                                          name=f"{node.name or 'If'}/{out}"))
    return nodes


def _consumed(g: onnx.GraphProto) -> set[str]:
    """Tensor names some node reads (also inside subgraphs) or the graph returns."""
    names = {o.name for o in g.output}

    def walk(graph):
        for n in graph.node:
            names.update(i for i in n.input if i)
            for a in n.attribute:
                if a.type == AttributeProto.GRAPH:
                    walk(a.g)
                elif a.type == AttributeProto.GRAPHS:
                    for sg in a.graphs:
                        walk(sg)

    walk(g)
    return names


def _describe_inputs(node, known: dict[str, Tensor]) -> str:
    parts = []
    for n in node.input:
        if not n:
            continue
        t = known.get(n)
        if t is None:
            parts.append(f"'{n}' unknown")
        elif t.shape is None:
            parts.append(f"'{n}' of unknown shape")
        else:
            parts.append(f"'{n}' {list(t.shape)}")
    return ", ".join(parts) or "none"


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _with_defaults(node, schema):
    """``node`` with every attribute it omits set to its schema default. An omitted
    attribute means its default, but some of ONNX's inference functions read an omitted one
    as 0: STFT's ``onesided`` (default 1) gave every bin instead of n // 2 + 1 (onnx 1.23)."""
    given = {a.name for a in node.attribute}
    missing = [a.default_value for name, a in schema.attributes.items()
               if a.default_value.type != AttributeProto.UNDEFINED and name not in given]
    if not missing:
        return node
    filled = onnx.NodeProto()
    filled.CopyFrom(node)
    filled.attribute.extend(missing)
    return filled


def infer_static(model: onnx.ModelProto, weights: set[str], where: str,
                 counts: dict[str, int] | None = None) -> Shaped:
    """Fold constants and give every tensor of ``model`` a static shape (see the module
    docstring). ``weights``: graph inputs that are weights (initializers without data);
    ``counts``: the sizes of data-sized nodes' outputs (:mod:`.data_sized`) by name."""
    p = _Pass(model, where, dict(counts or {}))
    p.seed(weights)
    p.run(list(model.graph.node))
    tensors = {n: t for n, t in p.tensors.items()}
    return Shaped(p.nodes, tensors, p.folded, p.unshaped, p.bounds)


__all__ = ["ALWAYS_FOLDED", "Shaped", "Tensor", "infer_static", "VALUE_MAX"]
