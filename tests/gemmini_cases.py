"""Build the single-layer models of the Gemmini RTL reference files.

``../shared/validation/gemmini_rtl_{public,conv}.json`` are the shared references;
``tests/data/gemmini_rtl_onnxim_tests.json`` is the check set: every other GEMM and conv
layer whose RTL cycle count ONNXim's operator tests publish. Shared by the accuracy test
and the benchmark script: each case becomes a one-node ONNX model (weights as absent
external data), its ONNXim mapping line, and the matching config.
"""

from __future__ import annotations

import json
from math import prod
from pathlib import Path

import onnx
from onnx import TensorProto, helper

# the shared validation folder beside the checkout; a copy travels with the repo for
# checkouts that have no shared/ next to them
SHARED = Path(__file__).resolve().parents[2] / "shared" / "validation"
COPY = Path(__file__).resolve().parent / "data"
FILES = ("gemmini_rtl_public.json", "gemmini_rtl_conv.json")
CHECK_SET = "gemmini_rtl_onnxim_tests.json"  # only in tests/data


def load_reference() -> dict:
    """Every case of the reference files and the check set (same core), each tagged with
    its ``file``."""
    merged: dict = {}
    for name in FILES + (CHECK_SET,):
        path = SHARED / name if (SHARED / name).exists() else COPY / name
        ref = json.loads(path.read_text())
        if merged and ref["core"] != merged["core"]:
            raise ValueError(f"{path}: its core differs from {FILES[0]}'s")
        merged.setdefault("core", ref["core"])
        merged.setdefault("cases", []).extend(dict(c, file=name) for c in ref["cases"])
    return merged


def _weight(name: str, shape: list[int]) -> onnx.TensorProto:
    """A weight with a shape but no bytes (external data that is never written)."""
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(shape)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "absent.bin"), ("offset", "0"), ("length", str(4 * prod(shape)))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def case_model(case: dict) -> onnx.ModelProto:
    if case["op"] == "gemm":
        n, c, m = case["n"], case["c"], case["m"]
        node = helper.make_node("MatMul", ["x", "w"], ["y"], name=case["name"])
        graph = helper.make_graph([node], case["name"],
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, m])],
                                  initializer=[_weight("w", [c, m])])
    else:
        n, h, w, c = case["input_nhwc"]
        m, _, kh, kw = case["weight_mchw"]
        _, p, q, _ = case["output_nhwc"]
        s, pad = case["stride"], case["pad"]
        node = helper.make_node("Conv", ["x", "w"], ["y"], name=case["name"],
                                kernel_shape=[kh, kw], strides=[s, s], pads=[pad] * 4)
        graph = helper.make_graph([node], case["name"],
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, m, p, q])],
                                  initializer=[_weight("w", [m, c, kh, kw])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def write_case(case: dict, folder: Path) -> tuple[Path, Path]:
    """Write the case's model and mapping file into ``folder``; return their paths."""
    model_path = folder / f"{case['name']}.onnx"
    onnx.save(case_model(case), str(model_path))
    mapping_path = folder / f"{case['name']}.mapping"
    mapping_path.write_text(case["mapping"] + "\n")
    return model_path, mapping_path


def case_overrides(ref: dict, case: dict) -> list[str]:
    """Overrides of the gemmini_validation preset this case was measured with."""
    h, w = ref["core"]["array"]
    return [f"core.systolic.height={h}", f"core.systolic.width={w}",
            f"precision={ref['core']['precision_bytes']}",
            f"dma.request_bytes={ref['core']['dma_request_bytes']}",
            f"core.spad_kib={case['spad_kib']}", f"core.accum_kib={case['accum_kib']}",
            "memory.type=ideal", "num_cores=1"]
