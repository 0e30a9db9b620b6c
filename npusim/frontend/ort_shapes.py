"""Output types of ops ONNX does not define, from ONNX Runtime's own inference.

ONNX Runtime's optimizer writes ops of its ``com.microsoft`` domain (FusedMatMul,
SkipLayerNormalization, RotaryEmbedding, QLinear ops, ...) and a few of its own in the ONNX
domain (SimplifiedLayerNormalization). ONNX's shape inference knows none of them; ONNX
Runtime registers a type and shape function for each. So the node is put alone in a small
model (its inputs typed with their static shapes, constant inputs with their values), a
session is created without running anything, and the session reports the output types.
No weight data is involved: a weight is just a typed input.
"""

from __future__ import annotations

import functools

import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"

# ONNX Runtime type strings -> TensorProto element types
ORT_TYPES = {
    "tensor(float)": TensorProto.FLOAT, "tensor(float16)": TensorProto.FLOAT16,
    "tensor(bfloat16)": TensorProto.BFLOAT16, "tensor(double)": TensorProto.DOUBLE,
    "tensor(int8)": TensorProto.INT8, "tensor(uint8)": TensorProto.UINT8,
    "tensor(int16)": TensorProto.INT16, "tensor(uint16)": TensorProto.UINT16,
    "tensor(int32)": TensorProto.INT32, "tensor(uint32)": TensorProto.UINT32,
    "tensor(int64)": TensorProto.INT64, "tensor(uint64)": TensorProto.UINT64,
    "tensor(bool)": TensorProto.BOOL,
}


@functools.lru_cache(maxsize=1)
def ort_onnx_domain_ops() -> frozenset[str]:
    """Op types ONNX Runtime registers only in the ONNX domain although ONNX has no such op
    (e.g. SimplifiedLayerNormalization): npusim files them under com.microsoft."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as capi

        domains: dict[str, set[str]] = {}
        for schema in capi.get_all_operator_schema():
            domains.setdefault(schema.name, set()).add(schema.domain)
        return frozenset(n for n, d in domains.items()
                         if "" in d and MS not in d and not onnx.defs.has(n))
    except Exception:  # noqa: BLE001 - a build without the schema list
        return frozenset({"SimplifiedLayerNormalization"})


def node_output_types(node: onnx.NodeProto, known: dict, opsets: dict[str, int]) -> dict:
    """Output index -> (elem_type, shape or None) as ONNX Runtime infers them for ``node``
    with inputs ``known`` (name -> :class:`npusim.frontend.shapes.Tensor`); empty when ONNX
    Runtime does not know the op (or has no CPU kernel for it)."""
    try:
        import onnxruntime as ort
    except ImportError:  # pragma: no cover - onnxruntime is a dependency
        return {}
    probe = onnx.NodeProto()
    probe.CopyFrom(node)
    if probe.domain == MS and probe.op_type in ort_onnx_domain_ops():
        probe.domain = ""  # back where ONNX Runtime registers it
    inputs, inits = [], []
    for name in dict.fromkeys(i for i in node.input if i):
        t = known.get(name)
        if t is None:
            return {}
        if t.value is not None:
            inits.append(numpy_helper.from_array(t.value, name))
        else:
            inputs.append(helper.make_tensor_value_info(
                name, t.elem_type, list(t.shape) if t.shape is not None else None))
    outs = [onnx.ValueInfoProto(name=o) for o in node.output if o]
    graph = helper.make_graph([probe], "probe", inputs, outs, initializer=inits)
    imports = dict(opsets)
    if probe.domain and probe.domain not in imports:
        imports[probe.domain] = 1
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                    for d, v in imports.items()])
    model.ir_version = min(model.ir_version, 10)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - unknown op or no kernel: no answer
        return {}
    found = {o.name: o for o in sess.get_outputs()}
    out = {}
    for i, o in enumerate(node.output):
        if o in found and found[o].type in ORT_TYPES:
            dims = found[o].shape
            # an unknown shape reads as [] too, so a scalar is not taken from ONNX Runtime
            static = bool(dims) and all(isinstance(d, int) and d >= 0 for d in dims)
            out[i] = (ORT_TYPES[found[o].type], tuple(dims) if static else None)
    return out


__all__ = ["MS", "ORT_TYPES", "node_output_types", "ort_onnx_domain_ops"]
