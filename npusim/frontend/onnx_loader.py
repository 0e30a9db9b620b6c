"""Load an ONNX file into the graph IR — structure and shapes only, never weight data.

npusim only needs shapes: weights are read from the protobuf as name/shape/dtype, external
data files are never opened (a model whose ``.bin`` is missing still loads), and large inline
weights are dropped from the in-memory proto before checking and shape inference. Symbolic
input dims are bound from ``dims`` (the CLI's ``--dim NAME=VALUE``) and ONNX shape inference
then gives every intermediate tensor a concrete static shape.
"""

from __future__ import annotations

import ast
import copy
import heapq
import operator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import AttributeProto, ModelProto, TensorProto, helper, numpy_helper, version_converter

from npusim.errors import NpusimError
from npusim.frontend import legacy
from npusim.frontend.legacy import MIN_OPSET
from npusim.frontend.data_sized import (EVERY, count_names, is_count_name, is_data_sized,
                                        missing_message)
from npusim.frontend.graph import Graph, Node, TensorInfo
from npusim.frontend.ort_shapes import MS
from npusim.frontend.quantized import as_float_ops, fold_qdq
from npusim.frontend.shapes import NOT_FOLDED, infer_static
from npusim.paths import models_dir, note_input

# Initializers with inline data and at most this many elements stay in the proto during shape
# inference: shape-driving constants (Reshape shapes, Slice starts, Resize scales) are tiny and
# data propagation needs their values. Everything else is turned into a plain graph input.
_KEEP_INLINE_MAX = 1024


# --------------------------------------------------------------------------- model lookup


def list_bundled_models() -> list[Path]:
    """The .onnx files shipped in ``models/``, sorted by name."""
    return sorted(models_dir().glob("*.onnx"))


def resolve_model_path(name_or_path: str | Path) -> Path:
    """An existing file path as given, else the bundled model ``models/<name>.onnx``."""
    if not str(name_or_path).strip():  # (Path('') is '.', which is a directory)
        raise NpusimError("model '': give an ONNX file or a bundled model name "
                          "(npusim models lists them)")
    p = Path(name_or_path)
    if p.is_file():
        return p
    if p.is_dir():
        raise NpusimError(f"model '{name_or_path}' is a directory, not an ONNX file")
    if p.exists():  # a device or a pipe (/dev/null)
        raise NpusimError(f"model '{name_or_path}' is not a regular file; give an ONNX file")
    name = p.name[:-5] if p.name.endswith(".onnx") else p.name
    if len(p.parts) == 1 and name:  # a bare name like "tiny_cnn", not a path with folders
        bundled = models_dir() / f"{name}.onnx"
        if bundled.is_file():
            return bundled
    names = ", ".join(m.stem for m in list_bundled_models()) or "(none)"
    raise NpusimError(
        f"model '{name_or_path}' not found: it is not an existing file and not a bundled "
        f"model name; bundled models are: {names}"
    )


def data_sized_dims(path: str | Path) -> list[str]:
    """The dims a model's data-sized nodes (NonZero, NonMaxSuppression, ...: see
    :mod:`.data_sized`) take, and ``EVERY`` if there are any: ``--dim`` may bind them, and
    must where such a node runs."""
    names = list(count_names(_read_model(Path(path)).graph.node))
    return names + [EVERY] if names else names


def value_inputs(path: str | Path) -> list[str]:
    """The model's inputs holding one integer (a sample rate, a flag): ``--dim NAME=VALUE``
    may give one its value (:func:`_bind_value`)."""
    return list(_scalar_int_inputs(_read_model(Path(path)).graph))


def symbolic_dims(path: str | Path) -> tuple[int, list[str]]:
    """Node count and the names of the model's symbolic input dims, read straight from the
    protobuf (no shape inference), e.g. to know which ``--dim`` values a model takes. A dim
    named by an expression of others (:func:`dim_expression`) is computed from them: it
    contributes their names, not its own."""
    proto = _read_model(Path(path))
    weights = {t.name for t in proto.graph.initializer}
    _name_anonymous_dims(proto.graph)
    names: list[str] = []
    for vi in proto.graph.input:
        if vi.name in weights or not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                expr = dim_expression(d.dim_param)
                for name in [d.dim_param] if expr is None else _names_in(expr):
                    if name not in names:
                        names.append(name)
    return len(proto.graph.node), names


# + - * // on dims (what exporters write in a dim's name, e.g. PyTorch's
# "past_sequence_length + sequence_length" for a cache plus the new tokens)
_DIM_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
            ast.FloorDiv: operator.floordiv}


def dim_expression(name: str) -> ast.expr | None:
    """A symbolic dim whose name is arithmetic on other dims' names, parsed (never run as
    Python): names and integers joined by ``+ - * //`` (with parentheses). None for a plain
    name, or a name that is not such an expression."""
    try:
        tree = ast.parse(name, mode="eval").body
    except SyntaxError:
        return None

    def arithmetic(n) -> bool:
        if isinstance(n, ast.BinOp):
            return type(n.op) in _DIM_OPS and arithmetic(n.left) and arithmetic(n.right)
        return isinstance(n, ast.Name) or (isinstance(n, ast.Constant) and type(n.value) is int)

    return tree if isinstance(tree, ast.BinOp) and arithmetic(tree) else None


def _names_in(expr: ast.expr) -> list[str]:
    """The dim names an expression reads, in the order they are written."""
    names = sorted((n for n in ast.walk(expr) if isinstance(n, ast.Name)),
                   key=lambda n: n.col_offset)
    return list(dict.fromkeys(n.id for n in names))


def _eval_dim(where: str, name: str, expr: ast.expr, values: dict[str, int]) -> int:
    """The value of the dim ``name`` (parsed as ``expr``) from the dims in ``values``."""
    def value(e) -> int:
        if isinstance(e, ast.BinOp):
            left, right = value(e.left), value(e.right)
            if isinstance(e.op, ast.FloorDiv) and right == 0:
                return 0
            return _DIM_OPS[type(e.op)](left, right)
        return values[e.id] if isinstance(e, ast.Name) else e.value

    result = value(expr)
    if result < 1:
        bound = ", ".join(f"{n}={values[n]}" for n in _names_in(expr))
        raise NpusimError(f"{where}: dimension '{name}' is {result} with {bound}; a dimension "
                          f"must be a positive integer")
    return result


def default_dims(path: str | Path) -> dict[str, int]:
    """Example values of a model's symbolic dims, from its ``npusim.default_dims`` metadata
    (``batch=1,seq=128``); bundled models carry them so listings can show their MACs."""
    proto = _read_model(Path(path))
    for prop in proto.metadata_props:
        if prop.key == "npusim.default_dims":
            pairs = (item.split("=", 1) for item in prop.value.split(",") if "=" in item)
            return {k.strip(): int(v) for k, v in pairs}
    return {}


def with_example_dims(path: str | Path, dims: dict[str, int] | None
                      ) -> tuple[dict[str, int] | None, dict[str, int]]:
    """``dims`` completed with a bundled model's example dims (``npusim.default_dims``) for
    the symbolic dims not given, and the ones so assumed. A model that is not bundled is
    left alone: its unbound dims stay an error naming them."""
    path = Path(path).resolve()
    if path.parent != models_dir().resolve():
        return dims, {}
    given = dict(dims or {})
    example = default_dims(path)
    assumed = {d: example[d] for d in symbolic_dims(path)[1] if d not in given and d in example}
    return ({**given, **assumed} or None), assumed


def load_model(name_or_path: str | Path, dims: dict[str, int] | None = None,
               check=None) -> Graph:
    """:func:`load_graph` on a file path or a bundled model name."""
    return load_graph(resolve_model_path(name_or_path), dims, check)


# --------------------------------------------------------------------------- loading


def load_graph(path: str | Path, dims: dict[str, int] | None = None, check=None) -> Graph:
    """Read ``path`` into a :class:`Graph` with every tensor's static shape.

    ``dims`` binds the model's symbolic input dimensions by name, e.g. ``{"seq": 128}``.
    Subgraphs that depend only on constants (shape arithmetic, weights made by
    ConstantOfShape, a weight's Transpose or Cast) are folded away (:mod:`.shapes`). A tensor
    that still has no static shape is listed in ``Graph.unshaped`` with the reason;
    lowering stops on it (after listing any ops it cannot lower), as does
    ``Graph.check_shapes()``. ``check`` is called with the ModelProto as soon as it is read
    (a refusal that needs nothing of the loading).
    """
    path = Path(path)
    model = _read_model(path)
    if check is not None:
        check(model)
    where = f"ONNX model '{path}'"
    if not model.graph.node:
        raise NpusimError(f"{where} has no nodes: nothing to simulate")

    weights = _strip_weights(model)
    moved = {vi.name for vi in model.graph.input if vi.name in weights}
    _topo_sort(model.graph, where)
    _check_defined(model.graph, where)
    legacy.rewrite(model, where)
    _ort_internal_ops_to_contrib(model)
    _checked(model, where)
    model = _upgrade_opset(model, where)

    bound = dict(dims or {})
    sized = count_names(model.graph.node)
    counts = {k: v for k, v in bound.items() if is_count_name(k, sized)}
    _bind_dims(model.graph, {k: v for k, v in bound.items() if k not in counts}, where,
               list(sized))
    for name, value in counts.items():
        _check_dim_value(name, value)
    shaped = infer_static(model, moved, where, counts)
    return _build_graph(model, shaped, weights, path, bound)


def _shapeless(vi) -> bool:
    return vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")


def _checked(model: ModelProto, where: str) -> None:
    """ONNX's checker, with graph outputs declared without a shape left out of it (tf2onnx
    writes one for a batched einsum at opset 13; the checker refuses it, ONNX Runtime and
    npusim's own inference shape it from its producer). A graph input needs a shape."""
    for vi in model.graph.input:  # (the checker says a shape is missing, not whose)
        if _shapeless(vi):
            raise NpusimError(f"{where} is not a valid ONNX model: graph input '{vi.name}' "
                              f"has no shape (not even a rank)")
    if any(_shapeless(vi) for vi in model.graph.output):
        model = copy.copy(model)
        kept = [vi for vi in model.graph.output if not _shapeless(vi)]
        del model.graph.output[:]
        model.graph.output.extend(kept)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise NpusimError(f"{where} is not a valid ONNX model: {_first_line(e)}") from None


def _read_model(path: Path) -> ModelProto:
    if not path.exists():
        raise NpusimError(f"ONNX model file not found: '{path}'")
    if not path.is_file():
        raise NpusimError(f"ONNX model path '{path}' is not a file")
    note_input(path, "an ONNX model")
    try:
        # format fixed: onnx otherwise picks a text parser from a .json/.textproto suffix
        model = onnx.load(str(path), format="protobuf", load_external_data=False)
    except (DecodeError, ValueError, RuntimeError, UnicodeDecodeError) as e:
        raise NpusimError(
            f"'{path}' is not a valid ONNX model (the protobuf could not be parsed: {e})"
        ) from None
    # Arbitrary bytes sometimes parse as a protobuf full of unknown fields; a real model
    # always names its IR version and has a graph.
    if model.ir_version == 0 or not model.HasField("graph"):
        raise NpusimError(
            f"'{path}' is not a valid ONNX model (no IR version or no graph in the file)"
        )
    return model


def _strip_weights(model: ModelProto) -> dict[str, TensorInfo]:
    """Record every initializer's shape, then turn the big or external ones into inputs.

    The checker insists that external data files exist and shape inference never needs weight
    values, so a weight becomes a typed graph input: same name, shape and dtype, no bytes.
    """
    g = model.graph
    weights: dict[str, TensorInfo] = {}
    input_names = {vi.name for vi in g.input}
    keep = []
    moved: list[tuple[str, int, list[int]]] = []

    for t in g.initializer:
        weights[t.name] = TensorInfo(t.name, tuple(int(d) for d in t.dims), t.data_type, True)
        external = t.data_location == TensorProto.EXTERNAL
        numel = 1
        for d in t.dims:
            numel *= d
        if external or numel > _KEEP_INLINE_MAX:
            moved.append((t.name, t.data_type, list(t.dims)))
        else:
            keep.append(t)
    for st in g.sparse_initializer:
        name = st.values.name
        weights[name] = TensorInfo(name, tuple(int(d) for d in st.dims), st.values.data_type, True)
        moved.append((name, st.values.data_type, list(st.dims)))

    if moved:
        del g.initializer[:]
        g.initializer.extend(keep)
        del g.sparse_initializer[:]
        for name, dtype, shape in moved:
            if name not in input_names:
                g.input.append(helper.make_tensor_value_info(name, dtype, shape))
    return weights


def _check_defined(g: onnx.GraphProto, where: str) -> None:
    """Every tensor a node of the main graph reads is an input, a weight or another node's
    output (the checker says so in a message cut off before the node's name)."""
    known = ({vi.name for vi in g.input} | {t.name for t in g.initializer}
             | {o for n in g.node for o in n.output})
    for n in g.node:
        for t in n.input:
            if t and t not in known:
                raise NpusimError(f"{where}: node '{n.name or n.op_type}' ({n.op_type}) reads "
                                  f"'{t}', which no graph input, initializer or node defines")


def _subgraph_names(node: onnx.NodeProto) -> set[str]:
    """Tensor names read inside a node's subgraphs (If/Loop/Scan bodies use outer tensors)."""
    names: set[str] = set()
    for a in node.attribute:
        graphs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)
        for sg in graphs:
            for n in sg.node:
                names.update(n.input)
                names |= _subgraph_names(n)
    return names


def _topo_sort(g: onnx.GraphProto, where: str) -> None:
    """Reorder nodes so producers come first (stable: a sorted graph is left untouched)."""
    producer = {}
    for i, n in enumerate(g.node):
        for t in n.output:
            if t:
                producer[t] = i
    deps = []
    for i, n in enumerate(g.node):
        reads = set(n.input) | (_subgraph_names(n) if n.attribute else set())
        deps.append({producer[t] for t in reads if t in producer and producer[t] != i})
    if all(d < i for i, ds in enumerate(deps) for d in ds):
        return

    # Kahn's algorithm, always taking the lowest original index that is ready.
    users: list[list[int]] = [[] for _ in deps]
    missing = [len(ds) for ds in deps]
    for i, ds in enumerate(deps):
        for d in ds:
            users[d].append(i)
    ready = [i for i, m in enumerate(missing) if m == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, u)
    if len(order) < len(deps):
        stuck = [i for i, m in enumerate(missing) if m > 0]
        names = ", ".join(g.node[i].name or g.node[i].op_type for i in stuck[:5])
        raise NpusimError(f"{where} has a cycle among nodes: {names}")
    nodes = [g.node[i] for i in order]
    copies = [onnx.NodeProto() for _ in nodes]
    for c, n in zip(copies, nodes):
        c.CopyFrom(n)
    del g.node[:]
    g.node.extend(copies)


MAX_DIM = 2**31 - 1  # larger is no NPU workload (lowering refuses tensors beyond a TiB)


def _check_dim_value(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_DIM:
        raise NpusimError(f"--dim {name}={value!r}: a dimension must be a positive integer "
                          f"(at most {MAX_DIM})")


def _anonymous_dim(vi: onnx.ValueInfoProto, axis: int) -> str:
    return f"{vi.name}.{axis}"


def _name_anonymous_dims(g: onnx.GraphProto) -> None:
    """Input dims with neither a size nor a name, or size -1 (older paddle2onnx's and
    tf2onnx's "any"), take the name ``INPUT.AXIS``: ``--dim`` binds them like named ones."""
    weights = {t.name for t in g.initializer}
    for vi in g.input:
        if vi.name in weights or not vi.type.HasField("tensor_type") \
                or not vi.type.tensor_type.HasField("shape"):
            continue
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if not (d.HasField("dim_param") or d.HasField("dim_value")) or (
                    d.HasField("dim_value") and d.dim_value == -1):
                d.dim_param = _anonymous_dim(vi, axis)


def _is_anonymous_name(g: onnx.GraphProto, name: str) -> bool:
    return any(name == _anonymous_dim(vi, axis) for vi in g.input
               for axis in range(len(vi.type.tensor_type.shape.dim)))


_INTEGER_TYPES = (TensorProto.INT64, TensorProto.INT32, TensorProto.INT16, TensorProto.INT8,
                  TensorProto.UINT64, TensorProto.UINT32, TensorProto.UINT16, TensorProto.UINT8)


def _scalar_int_inputs(g: onnx.GraphProto) -> dict[str, onnx.ValueInfoProto]:
    """Inputs holding one integer (a sample rate, a flag): ``--dim NAME=VALUE`` makes one a
    constant, so an ``If`` on it (silero-vad's ``sr == 16000``) is inlined."""
    weights = {t.name for t in g.initializer}
    out = {}
    for vi in g.input:
        tt = vi.type.tensor_type
        if vi.name in weights or not vi.type.HasField("tensor_type") \
                or tt.elem_type not in _INTEGER_TYPES or not tt.HasField("shape"):
            continue
        if all(d.HasField("dim_value") and d.dim_value == 1 for d in tt.shape.dim):
            out[vi.name] = vi
    return out


def _bind_value(g: onnx.GraphProto, vi: onnx.ValueInfoProto, value, where: str) -> None:
    """The input ``vi`` (one integer) becomes a constant of ``value``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise NpusimError(f"--dim {vi.name}={value!r}: input '{vi.name}' holds one integer; "
                          f"give it an integer value")
    tt = vi.type.tensor_type
    dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
    info = np.iinfo(dtype)
    if not info.min <= value <= info.max:
        raise NpusimError(f"--dim {vi.name}={value}: out of range for input '{vi.name}' "
                          f"({TensorProto.DataType.Name(tt.elem_type)}: {info.min} to "
                          f"{info.max})")
    shape = [d.dim_value for d in tt.shape.dim]
    g.initializer.append(numpy_helper.from_array(np.full(shape, value, dtype), vi.name))
    keep = [v for v in g.input if v.name != vi.name]
    del g.input[:]
    g.input.extend(keep)


def _bind_dims(g: onnx.GraphProto, dims: dict[str, int], where: str,
               counts: list[str] = ()) -> None:
    """Replace symbolic input dims by the values in ``dims``; unknown or missing names fail
    (``counts``, the data-sized nodes' dims, are named in that error too). A name in
    ``dims`` that is an input holding one integer makes that input a constant. A dim named by an
    expression of other dims (:func:`dim_expression`) takes its value from theirs unless
    ``dims`` gives it explicitly."""
    _name_anonymous_dims(g)
    scalars = _scalar_int_inputs(g)
    dims = dict(dims)
    for name in [n for n in dims if n in scalars]:
        _bind_value(g, scalars[name], dims.pop(name), where)
    for name, value in dims.items():
        _check_dim_value(name, value)

    graph_dims: dict[str, list[str]] = {}  # dim name -> inputs using it
    for vi in g.input:
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            raise NpusimError(f"{where}: input '{vi.name}' has no shape (not even a rank)")
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_param"):
                graph_dims.setdefault(d.dim_param, []).append(vi.name)
            elif d.dim_value < 0:
                raise NpusimError(f"{where}: input '{vi.name}' axis {axis} has size "
                                  f"{d.dim_value}; a size is 0 or more, -1 or no size (a "
                                  f"dim bound with --dim), or a name to bind with --dim")

    exprs = {d: e for d in graph_dims if (e := dim_expression(d)) is not None}
    free = list(dict.fromkeys(n for d in graph_dims
                              for n in (_names_in(exprs[d]) if d in exprs else [d])))
    unknown = sorted(set(dims) - set(graph_dims) - set(free))
    if unknown:
        names = ", ".join(sorted(free)) or "none (all input dims are static)"
        sized = f"; the sizes of its data-sized nodes: {', '.join(counts)}" if counts else ""
        valued = (f"; its scalar integer inputs (a value for --dim): "
                  f"{', '.join(sorted(scalars))}" if scalars else "")
        raise NpusimError(
            f"{where} has no dimension named {', '.join(repr(u) for u in unknown)}; "
            f"its symbolic dims are: {names}{sized}{valued}"
        )
    values = dict(dims)
    uses: dict[str, list[str]] = {}  # unbound name -> where it is used
    for d, inputs in graph_dims.items():
        if d in values:  # given (an explicit value wins over an expression's)
            continue
        if d not in exprs:
            uses.setdefault(d, []).extend(f"input {i!r}" for i in inputs)
            continue
        missing = [n for n in _names_in(exprs[d]) if n not in values]
        for n in missing:
            uses.setdefault(n, []).extend(f"'{d}' of input {i!r}" for i in inputs)
        if not missing:
            values[d] = _eval_dim(where, d, exprs[d], values)
    if uses:
        unbound = sorted(uses)
        parts = [f"'{n}' (used by {', '.join(dict.fromkeys(uses[n]))})" for n in unbound]
        flags = " ".join(f"--dim {n}=VALUE" for n in unbound)
        anonymous = (f" (a dim the file gives no name, or size -1, is named INPUT.AXIS)"
                     if any(_is_anonymous_name(g, n) for n in unbound) else "")
        raise NpusimError(
            f"{where} has unbound symbolic dimension(s) {', '.join(parts)}; pass "
            f"{flags}{anonymous}"
        )

    # Substitute everywhere the names appear, so declared outputs/value_info agree.
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in values:
                d.dim_value = values[d.dim_param]


# ONNX Runtime's CPU layout ops (``com.microsoft.nchwc``, MLAS's blocks of channels, in
# graphs optimized at its "all" level, as ONNXim's CNNs are) -> the op each computes: a Conv
# with an activation and a Sum input (a residual) is a FusedConv; the pools are ONNX's.
# ReorderInput/ReorderOutput stay, lowered as relabels (npusim lays tensors out itself).
NCHWC = "com.microsoft.nchwc"
NCHWC_OPS = {"Conv": (MS, "FusedConv"), "MaxPool": ("", "MaxPool"),
             "AveragePool": ("", "AveragePool"), "GlobalAveragePool": ("", "GlobalAveragePool"),
             "GlobalMaxPool": ("", "GlobalMaxPool")}


def _ort_internal_ops_to_contrib(model: ModelProto) -> bool:
    """ONNX Runtime registers a few of its own ops in the ONNX domain (e.g.
    SimplifiedLayerNormalization); the ONNX checker rejects them there, so they move to
    ``com.microsoft`` (npusim lowers by op type); its NCHWc ops become the ops they compute
    (``NCHWC_OPS``). Returns whether anything changed."""
    changed = False
    for n in model.graph.node:
        if n.domain in ("", "ai.onnx") and not onnx.defs.has(n.op_type):
            n.domain = MS
            changed = True
        elif n.domain == NCHWC and n.op_type in NCHWC_OPS:
            n.domain, n.op_type = NCHWC_OPS[n.op_type]
            changed = True
    if changed and not any(o.domain == MS for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS, 1))
    return changed


def _upgrade_opset(model: ModelProto, where: str) -> ModelProto:
    """Graphs below opset ``MIN_OPSET`` go through ONNX's version converter, so lowering sees
    one form of each op (Softmax over one axis, Resize instead of Upsample, Pad, Split, Slice
    and Squeeze taking their parameters as inputs); the old forms it has no adapter for were
    rewritten before (:mod:`.legacy`), and return to the ONNX domain here. A graph in an
    opset newer than the installed onnx package defines is refused: its ops may mean
    something this onnx's shape inference does not know (ONNX Runtime refuses such a model
    too)."""
    version = legacy.default_opset(model)
    newest = onnx.defs.onnx_opset_version()
    if version is not None and version > newest:
        raise NpusimError(f"{where} uses ONNX opset {version}, newer than the installed onnx "
                          f"package knows (opsets up to {newest}): export it with an opset "
                          f"<= {newest}, or upgrade onnx")
    if version is None or version >= MIN_OPSET:
        legacy.restore(model)
        return model
    try:
        model = version_converter.convert_version(model, MIN_OPSET)
    except Exception as e:  # noqa: BLE001 - the converter raises assorted C++ errors
        raise NpusimError(f"{where} uses ONNX opset {version}; converting it to opset "
                          f"{MIN_OPSET} failed: {_first_line(e)}") from None
    legacy.restore(model)
    return model


def _build_graph(model: ModelProto, shaped, weights: dict[str, TensorInfo], path: Path,
                 dims: dict[str, int]) -> Graph:
    g = model.graph
    where = f"ONNX model '{path}'"
    unshaped = {t: _unshaped_message(where, t, node, shaped, dims)
                for t, node in shaped.unshaped.items()}
    tensors: dict[str, TensorInfo] = {}
    for name, t in shaped.tensors.items():
        if name in weights:
            tensors[name] = weights[name]
            continue
        tensors[name] = TensorInfo(name, t.shape, t.elem_type, t.constant, t.value, t.stored)
    for name, info in weights.items():
        tensors.setdefault(name, info)
    for name, t in tensors.items():  # initializers kept inline carry their value too
        if name in weights and shaped.tensors.get(name) is not None:
            t.value = shaped.tensors[name].value
    outputs = [vi.name for vi in g.output]
    nodes = fold_qdq(as_float_ops(_convert_nodes(shaped.nodes)), tensors, outputs)
    return Graph(
        name=g.name,
        nodes=nodes,
        tensors=tensors,
        inputs=[vi.name for vi in g.input if vi.name not in weights],
        outputs=outputs,
        source_path=str(path),
        doc_string=g.doc_string,
        folded=shaped.folded,
        unshaped=unshaped,
    )


def _unshaped_message(where: str, tensor: str, node, shaped, dims: dict[str, int]) -> str:
    """One line: the first tensor without a static shape, its node, the shapes of the node's
    inputs, and what would help."""
    seen = []
    for i in node.input:
        if not i:
            continue
        t = shaped.tensors.get(i)
        if t is None or t.shape is None:
            seen.append(f"{i} unknown")
        else:
            seen.append(f"{i} {list(t.shape)}")
    name = node.name or node.op_type
    bound = " ".join(f"--dim {k}={v}" for k, v in dims.items())
    if is_data_sized(node) and node.output[0] in shaped.bounds:
        why = missing_message(node.op_type, node.output[0], shaped.bounds[node.output[0]])
    elif node.op_type in NOT_FOLDED and node.domain in ("", "ai.onnx"):
        why = (f"npusim shapes only tensors, not the sequences or loops of {node.op_type}; "
               "export the model without them (e.g. unrolled)")
    elif any(shaped.tensors.get(i) is not None for i in node.input if i):
        why = ("its shape depends on values npusim does not read (input data or a weight); "
               "export the model with static shapes for this part"
               + (f" (dims bound: {bound})" if bound else ", or with named dims to pass as "
                  "--dim NAME=VALUE"))
    else:
        why = "its inputs have no shape either"
    return (f"{where}: tensor '{tensor}' produced by node '{name}' ({node.op_type}) has no "
            f"static shape; its inputs: {', '.join(seen) or 'none'}; {why}")


def _convert_nodes(protos: list[onnx.NodeProto]) -> list[Node]:
    """Graph nodes as IR nodes with unique names (``<op_type>_<index>`` when unnamed)."""
    taken = {n.name for n in protos if n.name}
    seen: set[str] = set()
    nodes = []
    for i, n in enumerate(protos):
        name = n.name
        if not name or name in seen:
            base = n.name or f"{n.op_type}_{i}"
            name, k = base, 1
            while name in taken or name in seen:
                name = f"{base}_{k}"
                k += 1
        seen.add(name)
        nodes.append(
            Node(
                name=name,
                op_type=n.op_type,
                domain=n.domain,
                inputs=list(n.input),
                outputs=list(n.output),
                attrs={a.name: _attr_value(a) for a in n.attribute},
            )
        )
    return nodes


def _attr_value(a: AttributeProto) -> Any:
    """An attribute as a plain Python value: strings decoded, tensors as numpy arrays."""
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    if a.type == AttributeProto.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in v]
    if a.type in (AttributeProto.INTS, AttributeProto.FLOATS):
        return list(v)
    if a.type == AttributeProto.TENSOR and v.data_location != TensorProto.EXTERNAL:
        return numpy_helper.to_array(v)
    return v  # graphs, sparse tensors and external tensors stay as protos


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
