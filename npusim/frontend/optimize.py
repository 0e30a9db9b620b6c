"""``--optimize none|basic|extended``: ONNX Runtime's offline graph optimizer as a front-end pass.

This is the flow of ONNXim's front end: the model goes through ONNX Runtime's own graph
optimizer first (constant folding, Conv+BatchNormalization folding, Conv/Gemm + activation
fusion into ``FusedConv``/``FusedGemm``, and for transformers attention, layer-norm and GELU
fusion into ``Attention``, ``SkipLayerNormalization``, ``BiasGelu``, ...), and npusim lowers
the optimized graph. No home-made stand-in: the fusions are ONNX Runtime's.

npusim models usually carry their weights as *absent* external data (shapes only), but ONNX
Runtime needs real tensors to build a session. So the model is first copied into a working
directory with every data-less initializer pointing at a zero-filled external data file of
the right size. The file is sparse (created with ``truncate``), so it costs neither memory
nor disk, whatever the model's size. Small initializers with data (shape tensors, axes,
scales) keep their values, so shape computations fold correctly.

The loader shapes the contrib ops of the optimized model (``com.microsoft``) by asking ONNX
Runtime per node (:mod:`npusim.frontend.ort_shapes`).

Public API::

    optimize_model(path, level, dims=..., out_dir=...) -> Path   # the optimized model file
    with prepared_model(path, optimize, dims) as (load_path, load_dims): load_graph(...)
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import onnx
from onnx import TensorProto, helper

from npusim.errors import NpusimError
from npusim.frontend.legacy import has_inline_data
from npusim.frontend.quantized import STORED_BITS

LEVELS = ("none", "basic", "extended")
_ORT_LEVEL = {"none": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
              "extended": "ORT_ENABLE_EXTENDED"}
_TRANSFORMER_TYPES = ("bert", "gpt2")
ZEROS_FILE = "zeros.bin"
_SMALL = 1024  # elements: external initializers at most this big are read (if present)
_ALIGN = 4096

def _ort():
    try:
        import onnxruntime
    except ImportError as e:  # pragma: no cover - onnxruntime is a dependency
        raise NpusimError(f"--optimize needs the onnxruntime package ({e}); "
                          "install it with `pip install onnxruntime`") from None
    return onnxruntime


def check_level(level: str) -> str:
    if level not in LEVELS:
        raise NpusimError(f"--optimize {level!r}: expected one of {', '.join(LEVELS)}")
    return level


# --------------------------------------------------------------------------- zero weights


def _numel(t: TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= int(d)
    return n


def _itemsize(data_type: int) -> int:
    try:
        return int(helper.tensor_dtype_to_np_dtype(data_type).itemsize)
    except (KeyError, ValueError, TypeError):
        return 0


def _nbytes(data_type: int, n: int, size: int) -> int:
    """Bytes of ``n`` elements as ONNX stores them: sub-byte types (int4, int2, ...) packed."""
    bits = STORED_BITS.get(data_type, 8)
    return -(-n * bits // 8) if bits < 8 else n * size


def _external_info(t: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def _set_external(t: TensorProto, location: str, offset: int, length: int) -> None:
    del t.external_data[:]
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    t.data_location = TensorProto.EXTERNAL
    t.ClearField("raw_data")


def fill_zero_weights(model: onnx.ModelProto, src_dir: Path, out_dir: Path) -> int:
    """Point every data-less initializer at a sparse zero file in ``out_dir``; return its size.

    External initializers of at most ``_SMALL`` elements whose data file exists are read and
    inlined (they may be shape tensors whose values matter); all others become zeros.
    """
    offset = 0
    for t in model.graph.initializer:
        external = t.data_location == TensorProto.EXTERNAL
        if not external and has_inline_data(t):
            continue
        size = _itemsize(t.data_type)
        n = _numel(t)
        nbytes = _nbytes(t.data_type, n, size)
        if size == 0:
            raise NpusimError(f"initializer '{t.name}' has element type {t.data_type}, which "
                              "cannot be zero-filled for ONNX Runtime")
        if external and n <= _SMALL:
            info = _external_info(t)
            f = src_dir / info.get("location", "")
            if info.get("location") and f.is_file():
                with open(f, "rb") as fh:
                    fh.seek(int(info.get("offset", 0)))
                    data = fh.read(int(info.get("length", nbytes)))
                if len(data) == nbytes:
                    del t.external_data[:]
                    t.data_location = TensorProto.DEFAULT
                    t.raw_data = data
                    continue
        if n == 0:
            del t.external_data[:]
            t.data_location = TensorProto.DEFAULT
            t.raw_data = b""
            continue
        _set_external(t, ZEROS_FILE, offset, nbytes)
        offset += -(-nbytes // _ALIGN) * _ALIGN
    with open(out_dir / ZEROS_FILE, "wb") as fh:
        fh.truncate(offset)  # sparse: reads as zeros, takes no disk blocks
    return offset


# --------------------------------------------------------------------------- optimizing


def _transformer_type(model: onnx.ModelProto) -> str | None:
    """``bert`` or ``gpt2`` for graphs shaped like them (attention, layer norm, GELU from Erf
    or, as GPT-2 writes it, Tanh), else None (e.g. CNNs, or Llama-like models with RMSNorm
    and SiLU, for which the transformer fusions do not apply)."""
    ops = {n.op_type for n in model.graph.node}
    if "Softmax" not in ops or not ops & {"MatMul", "Gemm"} \
            or not ops & {"LayerNormalization", "ReduceMean"}:
        return None
    if "Tanh" in ops or "FastGelu" in ops:
        return "gpt2"
    if ops & {"Erf", "Gelu", "BiasGelu"}:
        return "bert"
    return None


# What onnxruntime.transformers.optimizer disables in its ONNX Runtime pass before its own
# fusions (they would hide the patterns the Python fusions look for).
_TRANSFORMER_DISABLED = ["ConstantSharing", "MatMulScaleFusion", "MatMulAddFusion",
                         "MatmulTransposeFusion", "GemmActivationFusion", "BiasSoftmaxFusion"]


def _session_optimize(src: Path, dst: Path, level: str, where: str,
                      disabled: list[str] | None = None) -> None:
    ort = _ort()
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _ORT_LEVEL[level])
    so.optimized_model_filepath = str(dst)
    so.log_severity_level = 3
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                dst.name + ".data")
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes",
                                str(_SMALL))
    try:
        ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"],
                             disabled_optimizers=disabled or [])
    except Exception as e:  # noqa: BLE001 - any ORT failure is reported with its message
        raise NpusimError(f"ONNX Runtime could not optimize {where} (--optimize {level}): "
                          f"{_first_line(e)}") from None


def transformer_fusions_available() -> bool:
    """Whether onnxruntime.transformers' Python fusions can run (they need sympy)."""
    try:
        import sympy  # noqa: F401
        from onnxruntime.transformers import optimizer  # noqa: F401
    except ImportError:
        return False
    return True


def _transformer_fusions(src: Path, dst: Path, model_type: str, num_heads: int,
                         hidden_size: int, where: str) -> None:
    """onnxruntime.transformers' Python fusions (attention, layer norm, GELU, embedding) on a
    model ONNX Runtime has already optimized: its ``optimize_model`` flow, run in two steps
    because its own ONNX Runtime step imports torch."""
    import logging

    from onnxruntime.transformers.optimizer import optimize_model as ort_transformers

    for name in ("onnxruntime.transformers", "onnx_model", "fusion_base", "optimizer"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        opt = ort_transformers(str(src), model_type=model_type, num_heads=num_heads,
                               hidden_size=hidden_size, opt_level=0, use_gpu=False)
        opt.save_model_to_file(str(dst), use_external_data_format=True,
                               all_tensors_to_one_file=True)
    except Exception as e:  # noqa: BLE001
        raise NpusimError(f"ONNX Runtime's transformer optimizer (model_type={model_type}) "
                          f"failed on {where}: {_first_line(e)}") from None


def keep_node_order(path: Path, original: list[str]) -> None:
    """Reorder the optimized graph's nodes to follow the original model's order.

    ONNX Runtime saves its own topological order; npusim's scheduler starts ready layers in
    graph order, so a different order alone can change the cycles. Nodes keep their names
    through ONNX Runtime's fusions (a FusedConv is named after its Conv); a node with a new
    name goes right after the latest of its producers. Still a topological order (Kahn's
    algorithm, lowest original position first)."""
    import heapq

    model = onnx.load(str(path), format="protobuf", load_external_data=False)
    nodes = list(model.graph.node)
    rank = {name: i for i, name in enumerate(original) if name}
    producer = {t: i for i, n in enumerate(nodes) for t in n.output if t}
    preds = [sorted({producer[t] for t in n.input if t in producer and producer[t] != i})
             for i, n in enumerate(nodes)]
    key: list[float] = []
    for i, n in enumerate(nodes):  # nodes are in a topological order already
        if n.name in rank:
            key.append(float(rank[n.name]))
        else:
            key.append(max((key[p] for p in preds[i] if p < i), default=-1.0) + 0.5)
    users: list[list[int]] = [[] for _ in nodes]
    missing = [len(p) for p in preds]
    for i, ps in enumerate(preds):
        for p in ps:
            users[p].append(i)
    ready = [(key[i], i) for i, m in enumerate(missing) if m == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, (key[u], u))
    if len(order) != len(nodes) or order == list(range(len(nodes))):
        return
    copies = [onnx.NodeProto() for _ in nodes]
    for c, i in zip(copies, order):
        c.CopyFrom(nodes[i])
    del model.graph.node[:]
    model.graph.node.extend(copies)
    onnx.save(model, str(path))


def optimize_model(path: str | Path, level: str = "extended", *, dims: dict[str, int] | None = None,
                   out_dir: str | Path | None = None, model_type: str | None = None,
                   num_heads: int = 0, hidden_size: int = 0) -> Path:
    """Run ONNX Runtime's offline graph optimizer on ``path``; return the optimized model file.

    ``level``: ``none`` (the graph unchanged, as ORT_DISABLE_ALL leaves it; ONNX Runtime
    only supplies the output shapes of contrib ops, without reading weights), ``basic``
    (constant folding, Conv+BatchNormalization, redundant-node elimination) or ``extended``
    (plus FusedConv/FusedGemm and the transformer fusions). ``dims`` binds symbolic input
    dimensions before optimizing (more shape computations fold). At ``extended``,
    BERT- and GPT-2-like graphs (or any with an explicit ``model_type`` of ``bert``/``gpt2``)
    also go through the Python fusions of ``onnxruntime.transformers.optimizer`` with
    ``num_heads``/``hidden_size`` (0: detect) when that package can run (it needs sympy).
    The result lives in ``out_dir`` (a new temporary directory if None; the caller removes
    it) next to its zero-weight data files.
    """
    check_level(level)
    src = Path(path)
    where = f"model '{src}'"
    if model_type is not None and model_type not in _TRANSFORMER_TYPES:
        raise NpusimError(f"model_type {model_type!r}: expected one of "
                          f"{', '.join(_TRANSFORMER_TYPES)} (or None to detect)")
    if not src.is_file():
        raise NpusimError(f"ONNX model file not found: '{src}'")
    try:
        model = onnx.load(str(src), format="protobuf", load_external_data=False)
    except Exception as e:  # noqa: BLE001
        raise NpusimError(f"'{src}' is not a valid ONNX model: {_first_line(e)}") from None
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="npusim-ort-"))
    out.mkdir(parents=True, exist_ok=True)

    fill_zero_weights(model, src.parent, out)
    if dims is not None:  # (given, if empty, every dim must be bound: said of this file)
        from npusim.frontend.onnx_loader import _bind_dims

        _bind_dims(model.graph, dict(dims), f"ONNX model '{src}'")
    prepared = out / "input.onnx"
    onnx.save(model, str(prepared))

    result = out / "optimized.onnx"
    mtype = model_type
    if mtype is None and level == "extended":
        mtype = _transformer_type(model)
    original = [n.name for n in model.graph.node]
    del model
    if level == "none":
        # ORT_DISABLE_ALL would change nothing but would read every (zero) weight: the
        # graph goes on as it is, only its shapes come from ONNX Runtime (no weight data)
        prepared.replace(result)
    elif mtype is not None and level == "extended" and transformer_fusions_available():
        stage = out / "ort.onnx"
        _session_optimize(prepared, stage, level, where, _TRANSFORMER_DISABLED)
        _transformer_fusions(stage, result, mtype, num_heads, hidden_size, where)
    else:
        _session_optimize(prepared, result, level, where)
    keep_node_order(result, original)
    return result


@contextlib.contextmanager
def prepared_model(path: str | Path, optimize: str = "none", dims: dict[str, int] | None = None,
                   **kwargs) -> Iterator[tuple[Path, dict | None]]:
    """The file (and the dims still to bind) the loader should read for ``--optimize``.

    ``none`` is the file itself. Otherwise the model goes through :func:`optimize_model` in
    a temporary directory (removed on exit); dims are bound before optimizing, so the
    caller gets ``None`` back for them.
    """
    check_level(optimize)
    path = Path(path)
    if optimize == "none":
        yield path, dims
        return
    tmp = tempfile.mkdtemp(prefix="npusim-ort-")
    try:
        # dims bound here, so that an unbound one is said of the user's file, not of the
        # optimizer's temporary copy
        yield optimize_model(path, optimize, dims=dims or {}, out_dir=tmp, **kwargs), None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


__all__ = ["LEVELS", "optimize_model", "prepared_model", "fill_zero_weights", "check_level"]
