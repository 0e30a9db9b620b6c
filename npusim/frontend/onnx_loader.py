"""Load an ONNX file into the graph IR — structure and shapes only, never weight data.

npusim only needs shapes: weights are read from the protobuf as name/shape/dtype, external
data files are never opened (a model whose ``.bin`` is missing still loads), and large inline
weights are dropped from the in-memory proto before checking and shape inference. Symbolic
input dims are bound from ``dims`` (the CLI's ``--dim NAME=VALUE``) and ONNX shape inference
then gives every intermediate tensor a concrete static shape.
"""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Any

import onnx
from google.protobuf.message import DecodeError
from onnx import AttributeProto, ModelProto, TensorProto, helper, numpy_helper

from npusim.errors import NpusimError
from npusim.frontend.graph import Graph, Node, TensorInfo
from npusim.paths import models_dir

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
    p = Path(name_or_path)
    if p.is_file():
        return p
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


def symbolic_dims(path: str | Path) -> tuple[int, list[str]]:
    """Node count and the names of the model's symbolic input dims, read straight from the
    protobuf (no shape inference), e.g. to know which ``--dim`` values a model takes."""
    proto = _read_model(Path(path))
    weights = {t.name for t in proto.graph.initializer}
    names: list[str] = []
    for vi in proto.graph.input:
        if vi.name in weights or not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param not in names:
                names.append(d.dim_param)
    return len(proto.graph.node), names


def default_dims(path: str | Path) -> dict[str, int]:
    """Example values of a model's symbolic dims, from its ``npusim.default_dims`` metadata
    (``batch=1,seq=128``); bundled models carry them so listings can show their MACs."""
    proto = _read_model(Path(path))
    for prop in proto.metadata_props:
        if prop.key == "npusim.default_dims":
            pairs = (item.split("=", 1) for item in prop.value.split(",") if "=" in item)
            return {k.strip(): int(v) for k, v in pairs}
    return {}


def load_model(name_or_path: str | Path, dims: dict[str, int] | None = None) -> Graph:
    """:func:`load_graph` on a file path or a bundled model name."""
    return load_graph(resolve_model_path(name_or_path), dims)


# --------------------------------------------------------------------------- loading


def load_graph(path: str | Path, dims: dict[str, int] | None = None) -> Graph:
    """Read ``path`` into a :class:`Graph` with every tensor's static shape.

    ``dims`` binds the model's symbolic input dimensions by name, e.g. ``{"seq": 128}``.
    """
    path = Path(path)
    model = _read_model(path)
    where = f"ONNX model '{path}'"

    weights = _strip_weights(model)
    _topo_sort(model.graph, where)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise NpusimError(f"{where} is not a valid ONNX model: {_first_line(e)}") from None

    _bind_dims(model.graph, dict(dims or {}), where)
    inferred, strict_error = _infer_shapes(model, where)
    return _build_graph(inferred, weights, path, strict_error)


def _read_model(path: Path) -> ModelProto:
    if not path.exists():
        raise NpusimError(f"ONNX model file not found: '{path}'")
    if not path.is_file():
        raise NpusimError(f"ONNX model path '{path}' is not a file")
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


def _bind_dims(g: onnx.GraphProto, dims: dict[str, int], where: str) -> None:
    """Replace symbolic input dims by the values in ``dims``; unknown or missing names fail."""
    for name, value in dims.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise NpusimError(f"--dim {name}={value!r}: a dimension must be a positive integer")

    graph_dims: dict[str, list[str]] = {}  # dim name -> inputs using it
    unnamed: list[str] = []
    for vi in g.input:
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            raise NpusimError(f"{where}: input '{vi.name}' has no shape (not even a rank)")
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_param"):
                graph_dims.setdefault(d.dim_param, []).append(vi.name)
            elif not d.HasField("dim_value"):
                unnamed.append(f"'{vi.name}' axis {axis}")

    if unnamed:
        raise NpusimError(
            f"{where}: input dimension(s) {', '.join(unnamed)} have neither a size nor a name, "
            "so they cannot be bound; give the model static or named input dims"
        )
    unknown = sorted(set(dims) - set(graph_dims))
    if unknown:
        names = ", ".join(sorted(graph_dims)) or "none (all input dims are static)"
        raise NpusimError(
            f"{where} has no dimension named {', '.join(repr(u) for u in unknown)}; "
            f"its symbolic dims are: {names}"
        )
    unbound = sorted(set(graph_dims) - set(dims))
    if unbound:
        parts = [f"'{d}' (used by input {', '.join(repr(i) for i in graph_dims[d])})" for d in unbound]
        flags = " ".join(f"--dim {d}=VALUE" for d in unbound)
        raise NpusimError(
            f"{where} has unbound symbolic dimension(s) {', '.join(parts)}; pass {flags}"
        )

    # Substitute everywhere the names appear, so declared outputs/value_info agree.
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in dims:
                d.dim_value = dims[d.dim_param]


def _infer_shapes(model: ModelProto, where: str) -> tuple[ModelProto, str]:
    """Strict shape inference with data propagation; lenient retry if strict mode fails.

    Returns the inferred model and the strict-mode error text (empty if strict succeeded),
    which is quoted later if a tensor ends up without a shape.
    """
    try:
        return onnx.shape_inference.infer_shapes(
            model, check_type=True, strict_mode=True, data_prop=True
        ), ""
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError) as e:
        strict_error = _first_line(e)
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True), strict_error
    except (onnx.shape_inference.InferenceError, RuntimeError) as e:
        raise NpusimError(f"{where}: shape inference failed: {_first_line(e)}") from None


def _concrete_shape(vi: onnx.ValueInfoProto) -> tuple[int, ...] | None:
    """The static shape of a tensor value, or None if its rank or any dim is unknown."""
    if not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    shape = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        shape.append(int(d.dim_value))
    return tuple(shape)


def _build_graph(
    model: ModelProto, weights: dict[str, TensorInfo], path: Path, strict_error: str
) -> Graph:
    g = model.graph
    tensors: dict[str, TensorInfo] = dict(weights)
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.name in tensors:
            continue
        shape = _concrete_shape(vi)
        if shape is not None:
            tensors[vi.name] = TensorInfo(vi.name, shape, vi.type.tensor_type.elem_type, False)

    nodes = _convert_nodes(g)
    for node in nodes:
        for t in node.outputs:
            if t and t not in tensors:
                hint = f" (strict shape inference reported: {strict_error})" if strict_error else ""
                raise NpusimError(
                    f"ONNX model '{path}': tensor '{t}' produced by node '{node.name}' "
                    f"({node.op_type}) has no static shape after shape inference{hint}; "
                    "npusim needs every tensor shape to be known"
                )

    return Graph(
        name=g.name,
        nodes=nodes,
        tensors=tensors,
        inputs=[vi.name for vi in g.input if vi.name not in weights],
        outputs=[vi.name for vi in g.output],
        source_path=str(path),
        doc_string=g.doc_string,
    )


def _convert_nodes(g: onnx.GraphProto) -> list[Node]:
    """Graph nodes as IR nodes with unique names (``<op_type>_<index>`` when unnamed)."""
    taken = {n.name for n in g.node if n.name}
    seen: set[str] = set()
    nodes = []
    for i, n in enumerate(g.node):
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
