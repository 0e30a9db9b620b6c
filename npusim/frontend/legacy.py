"""Old ONNX forms rewritten into their opset-13 form before anything else reads the graph.

Two kinds, each a table of op -> rewrite, by the op's definition in ONNX's changelog:

``REMOVED``: experimental ops ONNX dropped in opset 10 that ONNX Runtime still runs (Caffe2
and early exporters wrote them: tiny-YOLOv2's ImageScaler), rewritten as ONNX's own table of
their replacements spells them (docs/Operators.md, "Deprecated Experimental Operators"):

==================  ==========================================================
ImageScaler         ``Add(Mul(x, scale), bias)``, the bias one value per channel
Affine              ``Add(Mul(x, alpha), beta)``
Scale               ``Mul(x, scale)``
ScaledTanh          ``Mul(Tanh(Mul(x, beta)), alpha)``
ParametricSoftplus  ``Mul(Softplus(Mul(x, beta)), alpha)``
Crop                ``Slice`` of the two spatial axes (``border``: left, top, right, bottom;
                    ``scale``: the kept height and width)
DynamicSlice        ``Slice``
GivenTensorFill,    ``Constant``, ``ConstantOfShape`` (shape arithmetic: folded at load)
ConstantFill
==================  ==========================================================

``GAPS``: forms ONNX's version converter has no adapter for. Graphs below opset 13 go
through the converter (``onnx_loader._upgrade_opset``), which steps the whole graph one
opset at a time and stops at these ("No Adapter From Version $1 for Pad"): that refused
every Caffe2-era export holding a Pad, and every graph below opset 7 holding an LSTM.

=============  =====  ===========================================================
op             below  the old form, and what it becomes
=============  =====  ===========================================================
Pad            2      ``paddings``, ``value`` attributes -> ``pads``, ``constant_value`` inputs
LpPool,        2      ``p`` a float -> an integer
GlobalLpPool
Split          2      ``split`` an attribute (or input) -> the ``split`` input
Cast, Tile     6      ``to`` a type name -> its number; Tile's scalar ``tiles`` along
                      ``axis`` -> ``repeats`` per axis
LSTM, GRU,     7      ``output_sequence`` dropped (Y is an optional output since)
RNN
Add, Sub,      7      ``broadcast``/``axis`` (legacy broadcasting: B's dims aligned with A's
Mul, Div,             from ``axis``) -> numpy broadcasting, B unsqueezed at its end where
Pow, And, Or,         needed. The converter has no adapter for the logic ops, and the one of
Xor, Equal,           the arithmetic ops unsqueezes B by A's rank less ``axis``, not less B's
Less, Greater         rank as well: Caffe2's bias (C) at axis 1 of an N, C, H, W tensor became
                      (C, 1, 1, 1), broadcasting over N (a batch-1 graph silently grew a batch
                      of C; ONNX 1.23)
BatchNorm-     9      ``spatial = 0`` (one parameter per activation: MXNet's exports), which
alization             the converter's 8 -> 9 adapter refuses: inference is ``x * scale +
                      shift`` with the parameters folded, so that Mul and Add (per-channel
                      parameters: the BatchNormalization of opset 9, of the same cost)
=============  =====  ===========================================================

Rewritten nodes, and any constant they need, sit in a private domain until :func:`restore`:
the converter passes other domains through untouched, reading their outputs' shapes from
``value_info``, which :func:`rewrite` declares (ONNX's inference at the graph's opset, and
for each rewritten node at opset 13).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, TensorProto, defs, helper, numpy_helper

from npusim.errors import NpusimError

# Graphs in older opsets are converted to this one (onnx_loader._upgrade_opset).
MIN_OPSET = 13
HIDDEN = "npusim.legacy"  # the private domain rewritten nodes sit in until restore()
_BIG = np.iinfo(np.int64).max  # a Slice end past the axis


class _Rewrite:
    """What the graph knows of its tensors (shapes, types, constant values), and the names
    of what rewrites add."""

    def __init__(self, model: ModelProto, where: str):
        self.where = where
        self.shapes: dict[str, list[int | None]] = {}
        self.types: dict[str, int] = {}
        g = model.graph
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            self.declare(vi)
        for init in g.initializer:
            self.types[init.name] = init.data_type
            self.shapes[init.name] = list(init.dims)
        self.values = {i.name: numpy_helper.to_array(i) for i in g.initializer
                       if i.data_location != TensorProto.EXTERNAL and has_inline_data(i)}
        for n in g.node:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
                for a in n.attribute:
                    if a.name == "value":
                        self.values[n.output[0]] = numpy_helper.to_array(a.t)
        self.counter = 0

    def declare(self, vi: onnx.ValueInfoProto) -> None:
        if vi.type.HasField("tensor_type"):
            tt = vi.type.tensor_type
            self.types[vi.name] = tt.elem_type
            if tt.HasField("shape"):
                self.shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else None
                                        for d in tt.shape.dim]

    def learn(self, node: NodeProto, opset: int) -> None:
        """``node``'s outputs' shapes, when not known yet: inferred alone (hidden nodes at
        opset 13, others at ``opset``, else converted alone to opset 13)."""
        if all(o in self.shapes for o in node.output if o):
            return
        if node.domain not in ("", "ai.onnx", HIDDEN):
            return  # inferred alone at an ONNX opset, another domain's op is unknown (and a
            # tree ensemble's attributes, hundreds of MB, were copied into four probes)
        if node.domain == HIDDEN:
            found = _infer_alone(node, self, MIN_OPSET)
        else:
            found = _infer_alone(node, self, opset) or _infer_alone(node, self, opset,
                                                                     MIN_OPSET)
        for vi in found:
            self.declare(vi)

    def name(self, node: NodeProto, what: str) -> str:
        self.counter += 1
        return f"{node.name or node.op_type}/{what}__legacy{self.counter}"

    def constant(self, array: np.ndarray, node: NodeProto, what: str) -> NodeProto:
        name = self.name(node, what)
        array = np.asarray(array)
        self.types[name] = helper.np_dtype_to_tensor_dtype(array.dtype)
        self.shapes[name] = list(array.shape)
        self.values[name] = array
        return helper.make_node("Constant", [], [name], name=name, domain=HIDDEN,
                                value=numpy_helper.from_array(array, name))

    def float_constant(self, values, node: NodeProto, what: str, like: str) -> NodeProto:
        """A constant of ``like``'s float type (a multiplier or bias from an attribute)."""
        dtype = helper.tensor_dtype_to_np_dtype(self.types.get(like, TensorProto.FLOAT))
        return self.constant(np.asarray(values, dtype), node, what)

    def rank(self, tensor: str, node: NodeProto) -> int:
        shape = self.shapes.get(tensor)
        if shape is None:
            raise NpusimError(f"{self.where}: {node.op_type} node '{node.name}' in its old "
                              f"form needs the rank of '{tensor}', which shape inference did "
                              f"not find; export the model at opset >= {MIN_OPSET}")
        return len(shape)

    def value(self, tensor: str, node: NodeProto) -> np.ndarray:
        if tensor not in self.values:
            raise NpusimError(f"{self.where}: {node.op_type} node '{node.name}' in its old "
                              f"form takes '{tensor}' as data, not as a constant; npusim "
                              f"needs it constant (export the model at opset >= {MIN_OPSET})")
        return self.values[tensor]


def has_inline_data(t: TensorProto) -> bool:
    """Whether an initializer carries its values in the file (not external, not stripped)."""
    return bool(t.raw_data) or any(len(getattr(t, f)) for f in (
        "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data"))


def _attrs(node: NodeProto, drop: tuple[str, ...] = ()) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in drop}


def _same(node: NodeProto, inputs=None, drop: tuple[str, ...] = (), **attrs) -> NodeProto:
    """``node`` in the hidden domain with other inputs or attributes."""
    kept = {**_attrs(node, drop), **attrs}
    return helper.make_node(node.op_type, list(node.input if inputs is None else inputs),
                            list(node.output), name=node.name, domain=HIDDEN, **kept)


def _op(op: str, inputs: list[str], output: str, name: str, **attrs) -> NodeProto:
    return helper.make_node(op, inputs, [output], name=name, domain=HIDDEN, **attrs)


# --------------------------------------------------------------------------- removed ops

def _scale_shift(node, rw, scale, shift, shift_shape=None):
    """``x * scale + shift`` (either left out when None) into the node's output."""
    x, y, out = node.input[0], node.output[0], []
    if scale is not None:
        c = rw.float_constant(scale, node, "scale", x)
        mid = rw.name(node, "scaled") if shift is not None else y
        out += [c, _op("Mul", [x, c.output[0]], mid, f"{node.name}/mul")]
        x = mid
    if shift is not None:
        b = np.asarray(shift, np.float64)
        c = rw.float_constant(b if shift_shape is None else b.reshape(shift_shape), node,
                              "shift", node.input[0])
        out += [c, _op("Add", [x, c.output[0]], y, f"{node.name}/add")]
    return out


def _image_scaler(node, rw):
    a = _attrs(node)
    bias = list(a.get("bias", []))  # per channel of an N, C, H, W image
    return _scale_shift(node, rw, a.get("scale", 1.0), bias or None, (len(bias), 1, 1))


def _affine(node, rw):
    a = _attrs(node)
    return _scale_shift(node, rw, a.get("alpha", 1.0), a.get("beta", 0.0))


def _scale(node, rw):
    return _scale_shift(node, rw, _attrs(node).get("scale", 1.0), None)


def _scaled_activation(inner: str):
    """``alpha * inner(beta * x)``: ScaledTanh, ParametricSoftplus."""
    def rewrite(node, rw):
        a = _attrs(node)
        x = node.input[0]
        beta = rw.float_constant(a.get("beta", 1.0), node, "beta", x)
        alpha = rw.float_constant(a.get("alpha", 1.0), node, "alpha", x)
        t0, t1 = rw.name(node, "in"), rw.name(node, inner.lower())
        return [beta, alpha, _op("Mul", [x, beta.output[0]], t0, f"{node.name}/beta"),
                _op(inner, [t0], t1, f"{node.name}/{inner}"),
                _op("Mul", [t1, alpha.output[0]], node.output[0], f"{node.name}/alpha")]
    return rewrite


def _slice(node, rw, starts, ends, axes):
    cs = [rw.constant(np.asarray(v, np.int64), node, what)
          for v, what in ((starts, "starts"), (ends, "ends"), (axes, "axes"))]
    return cs + [_op("Slice", [node.input[0]] + [c.output[0] for c in cs], node.output[0],
                     node.name)]


def _crop(node, rw):
    a = _attrs(node)
    left, top, right, bottom = (list(a.get("border", [])) + [0, 0, 0, 0])[:4]
    if "scale" in a:
        h, w = list(a["scale"])[:2]
        ends = [top + h, left + w]
    else:
        ends = [-bottom if bottom else _BIG, -right if right else _BIG]
    return _slice(node, rw, [top, left], ends, [2, 3])


def _dynamic_slice(node, rw):
    return [_op("Slice", list(node.input), node.output[0], node.name)]


def _given_tensor_fill(node, rw):
    a = _attrs(node)
    shape = [int(d) for d in a.get("shape", [])]
    values = np.asarray(a.get("values", []), np.float32)
    value = values.reshape(shape) if values.size == int(np.prod(shape)) else \
        np.zeros(shape, np.float32)
    c = rw.constant(value, node, "value")
    return [c, _op("Identity", [c.output[0]], node.output[0], node.name)]


def _constant_fill(node, rw):
    a = _attrs(node)
    dtype = helper.tensor_dtype_to_np_dtype(int(a.get("dtype", TensorProto.FLOAT)))
    fill = numpy_helper.from_array(np.asarray([a.get("value", 0.0)], dtype), "value")
    extra = [int(d) for d in a.get("extra_shape", [])]
    if not node.input or not node.input[0]:
        c = rw.constant(np.full([int(d) for d in a.get("shape", [])] + extra,
                                a.get("value", 0.0), dtype), node, "value")
        return [c, _op("Identity", [c.output[0]], node.output[0], node.name)]
    out, shape = [], node.input[0]
    if not a.get("input_as_shape", 0):
        shape = rw.name(node, "shape")
        out.append(_op("Shape", [node.input[0]], shape, f"{node.name}/shape"))
    if extra:
        c = rw.constant(np.asarray(extra, np.int64), node, "extra")
        full = rw.name(node, "full_shape")
        out += [c, _op("Concat", [shape, c.output[0]], full, f"{node.name}/concat", axis=0)]
        shape = full
    return out + [_op("ConstantOfShape", [shape], node.output[0], node.name, value=fill)]


REMOVED: dict[str, Callable[[NodeProto, "_Rewrite"], list[NodeProto]]] = {
    "ImageScaler": _image_scaler, "Affine": _affine, "Scale": _scale,
    "ScaledTanh": _scaled_activation("Tanh"),
    "ParametricSoftplus": _scaled_activation("Softplus"),
    "Crop": _crop, "DynamicSlice": _dynamic_slice,
    "GivenTensorFill": _given_tensor_fill, "ConstantFill": _constant_fill,
}


# --------------------------------------------------------------------------- converter gaps

def _pad(node, rw):
    a = _attrs(node)
    pads = rw.constant(np.asarray(a.get("paddings", a.get("pads", [])), np.int64), node, "pads")
    ins = [node.input[0], pads.output[0]]
    out = [pads]
    if a.get("value", 0.0):
        v = rw.float_constant(a["value"], node, "value", node.input[0])
        ins.append(v.output[0])
        out.append(v)
    return out + [_same(node, ins, drop=("paddings", "pads", "value"))]


def _lp_pool(node, rw):
    return [_same(node, p=int(round(_attrs(node).get("p", 2.0))))]


def _split(node, rw):
    a = _attrs(node)
    if len(node.input) > 1 and node.input[1]:
        split = [int(v) for v in rw.value(node.input[1], node).reshape(-1)]
    elif "split" in a:
        split = [int(v) for v in a["split"]]
    else:  # equal parts: Split-13 without the input
        return [_same(node, [node.input[0]], drop=("split",))]
    c = rw.constant(np.asarray(split, np.int64), node, "split")
    return [c, _same(node, [node.input[0], c.output[0]], drop=("split",))]


def _cast(node, rw):
    to = _attrs(node)["to"]
    if isinstance(to, bytes):
        to = to.decode()
    if isinstance(to, str):
        try:
            to = TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise NpusimError(f"{rw.where}: Cast node '{node.name}' casts to '{to}', not an "
                              f"ONNX type name (FLOAT, INT32, ...)") from None
    return [_same(node, to=int(to))]


def _tile(node, rw):
    if len(node.input) < 3:  # already the repeats form
        return [_same(node)]
    tiles = int(rw.value(node.input[1], node).reshape(-1)[0])
    axis = int(rw.value(node.input[2], node).reshape(-1)[0])
    r = rw.rank(node.input[0], node)
    repeats = np.ones(r, np.int64)
    repeats[axis % r] = tiles
    c = rw.constant(repeats, node, "repeats")
    return [c, _same(node, [node.input[0], c.output[0]])]


def _recurrent(node, rw):
    return [_same(node, drop=("output_sequence",))]


def _broadcast(node, rw):
    """Legacy broadcasting (``broadcast = 1``: B's dims align with A's from ``axis``, or
    with A's last dims without one) -> numpy's, B unsqueezed at its end to reach A's."""
    a = _attrs(node)
    plain = _same(node, drop=("broadcast", "axis", "consumed_inputs"))
    if not a.get("broadcast") or "axis" not in a:
        return [plain]  # same shapes, or B matching A's last dims: numpy's rule
    ra, rb = rw.rank(node.input[0], node), rw.rank(node.input[1], node)
    trailing = ra - (int(a["axis"]) % ra) - rb
    if trailing <= 0:
        return [plain]
    axes = rw.constant(np.arange(rb, rb + trailing, dtype=np.int64), node, "axes")
    b = rw.name(node, "b")
    return [axes, _op("Unsqueeze", [node.input[1], axes.output[0]], b, f"{node.name}/b"),
            _same(node, [node.input[0], b], drop=("broadcast", "axis", "consumed_inputs"))]


def _batch_norm(node, rw):
    if int(_attrs(node).get("spatial", 1)) != 0:
        return None
    if len(rw.shapes.get(node.input[1], [0, 0])) == 1:  # per channel after all
        return [_same(node, drop=("spatial", "is_test", "consumed_inputs"))]
    scaled = rw.name(node, "scaled")
    return [_op("Mul", [node.input[0], node.input[1]], scaled, f"{node.name}/scale"),
            _op("Add", [scaled, node.input[2]], node.output[0], node.name)]


# op -> (the first opset the converter steps it from, its rewrite into the opset-13 form, or
# None when the node needs none)
GAPS: dict[str, tuple[int, Callable[[NodeProto, _Rewrite], list[NodeProto] | None]]] = {
    "Pad": (2, _pad), "LpPool": (2, _lp_pool), "GlobalLpPool": (2, _lp_pool),
    "Split": (2, _split), "Cast": (6, _cast), "Tile": (6, _tile),
    **dict.fromkeys(["LSTM", "GRU", "RNN"], (7, _recurrent)),
    **dict.fromkeys(["Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Less",
                     "Greater"], (7, _broadcast)),
    "BatchNormalization": (9, _batch_norm),
}


# --------------------------------------------------------------------------- the pass

def default_opset(model: ModelProto) -> int | None:
    """The default domain's opset; None when the model imports none (e.g. ai.onnx.ml only)."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def _rewrite_of(node: NodeProto, opset: int | None):
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type in REMOVED and not defs.has(node.op_type):
        return REMOVED[node.op_type]
    gap = GAPS.get(node.op_type)
    if gap is not None and opset is not None and opset < gap[0]:
        return gap[1]
    return None


def rewrite(model: ModelProto, where: str) -> None:
    """Rewrite, in place, the old forms of ``model`` into their opset-13 form in the hidden
    domain; when the graph will go through the version converter (below opset 13), give
    every tensor whose shape is known a ``value_info``.

    The converter's adapters that change broadcasting need their inputs' shapes, and take
    them only from ``value_info``; ONNX's inference has no rule for many ops at opsets 1-5
    (after a BatchNormalization-1 every shape was unknown, and the converter stopped at the
    next Add of a bias). So, in graph order, each node is rewritten from what is known
    before it (a legacy broadcast needs its inputs' ranks), and each node whose outputs are
    not known is inferred alone: at the graph's opset, else converted alone to opset 13 (a
    rewritten node already is) and inferred there."""
    g = model.graph
    opset = default_opset(model)
    converting = opset is not None and opset < MIN_OPSET
    if not converting and not any(_rewrite_of(n, opset) for n in g.node):
        return
    if converting:
        _infer_whole(model)
    rw = _Rewrite(model, where)
    nodes = []
    for n in g.node:
        fn = _rewrite_of(n, opset)
        new = (fn(n, rw) if fn else None) or [n]
        if converting:
            for m in new:
                rw.learn(m, opset)
        nodes.extend(new)
    del g.node[:]
    g.node.extend(nodes)
    if any(n.domain == HIDDEN for n in nodes):
        model.opset_import.append(helper.make_opsetid(HIDDEN, 1))
    if converting:
        declared = {v.name for v in list(g.input) + list(g.output) + list(g.value_info)}
        g.value_info.extend(helper.make_tensor_value_info(
            o, rw.types.get(o, TensorProto.FLOAT), rw.shapes[o])
            for n in nodes for o in n.output if o in rw.shapes and o not in declared)


def _infer_whole(model: ModelProto) -> None:
    """ONNX's inference over the graph at its opset, into ``value_info``."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - what inference misses, a rewrite asks for by name
        return
    have = {v.name for v in model.graph.value_info}
    model.graph.value_info.extend(v for v in inferred.graph.value_info if v.name not in have)


def _infer_alone(node: NodeProto, rw: _Rewrite, opset: int,
                 convert_to: int | None = None) -> list[onnx.ValueInfoProto]:
    """``node``'s outputs inferred in a graph of its own at ``opset`` (first converted to
    ``convert_to``, when given), its inputs typed as known and small constants given."""
    ins = [i for i in node.input if i]
    if any(i not in rw.shapes or i not in rw.types for i in ins):
        return []
    probe = NodeProto()
    probe.CopyFrom(node)
    probe.domain = ""
    consts = [numpy_helper.from_array(np.asarray(rw.values[i]), i) for i in ins
              if i in rw.values and np.asarray(rw.values[i]).size <= 1024]
    inputs = [helper.make_tensor_value_info(i, rw.types[i], rw.shapes[i]) for i in ins]
    outputs = [helper.make_tensor_value_info(o, 0, None) for o in node.output if o]
    m = helper.make_model(helper.make_graph([probe], "probe", inputs, outputs, consts),
                          opset_imports=[helper.make_opsetid("", opset)], ir_version=3)
    try:
        if convert_to is not None:
            m = onnx.version_converter.convert_version(m, convert_to)
        inferred = onnx.shape_inference.infer_shapes(m, data_prop=True)
    except Exception:  # noqa: BLE001 - unknown: the converter says so if it needs it
        return []
    found = list(inferred.graph.value_info) + list(inferred.graph.output)
    return [v for v in found if v.name in node.output and v.type.tensor_type.HasField("shape")]


def restore(model: ModelProto) -> None:
    """The rewritten nodes back in the ONNX domain (after the version converter)."""
    for n in model.graph.node:
        if n.domain == HIDDEN:
            n.domain = ""
    keep = [o for o in model.opset_import if o.domain != HIDDEN]
    del model.opset_import[:]
    model.opset_import.extend(keep)
