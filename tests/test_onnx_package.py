"""The onnx package's own test models, and the whole standard operator set.

The installed ``onnx`` package ships graph files (``backend/test/data/{light,simple,
pytorch-converted,pytorch-operator}``) and, as generator code, one or more single-node
models for every op (``onnx.backend.test.case.node``). Every one of them either simulates
or stops with an NpusimError (an unsupported op from the up-front list, an unbound dim, a
tensor whose shape depends on input values); none may end in any other exception.
MACs are checked against counts derived here from ONNX's own shape inference and the
conv/GEMM definitions, never from npusim's lowering.
"""

from __future__ import annotations

import os
import warnings
from collections import defaultdict
from math import prod
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import defs, shape_inference

import npusim
from npusim.config import load_config
from npusim.errors import NpusimError
from npusim.frontend import load_graph
from npusim.frontend.quantized import QUANTIZED
from npusim.frontend.shapes import ALWAYS_FOLDED
from npusim.lowering import CANNOT_LOWER, LIMITS, LOWERINGS, lower_graph, unsupported_ops

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
LIGHT = sorted((DATA / "light").glob("*.onnx"))
PACKAGE = sorted(p / "model.onnx" for sub in ("simple", "pytorch-converted", "pytorch-operator")
                 for p in (DATA / sub).iterdir() if (p / "model.onnx").is_file())
# the server preset with its memory answering at once: the light CNNs (up to 20 GMACs)
# simulate in well under a second each; their DRAM behaviour is not what is checked here
FAST = ["memory.type=ideal"]


def analytic_macs(path: Path) -> int:
    """Multiply-accumulates of every Conv, ConvTranspose, Gemm and MatMul of the model, from
    the shapes ONNX's own shape inference gives (weights included: the light models make
    them with ConstantOfShape, whose shapes data propagation resolves)."""
    model = shape_inference.infer_shapes(onnx.load(str(path), load_external_data=False),
                                         data_prop=True)
    g = model.graph
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(g.input) + list(g.value_info) + list(g.output)}
    shapes.update({t.name: list(t.dims) for t in g.initializer})
    macs = 0
    for n in g.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type == "Conv":  # every output element: C_in / group x kernel products
            macs += prod(shapes[n.output[0]]) * prod(shapes[n.input[1]][1:])
        elif n.op_type == "ConvTranspose":  # every input element through the kernel
            w = shapes[n.input[1]]
            macs += prod(shapes[n.input[0]]) * prod(w[1:])
        elif n.op_type == "Gemm":
            a, b = shapes[n.input[0]], shapes[n.input[1]]
            rows, k = (a[1], a[0]) if attrs.get("transA") else (a[0], a[1])
            macs += rows * k * (b[0] if attrs.get("transB") else b[1])
        elif n.op_type == "MatMul":
            a, b = shapes[n.input[0]], shapes[n.input[1]]
            a2, b2 = ([1] + a if len(a) == 1 else a), (b + [1] if len(b) == 1 else b)
            batch = prod(np.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2])))
            macs += batch * a2[-2] * a2[-1] * b2[-1]
    return macs


def _standard_ops(path: Path) -> set[str]:
    m = onnx.load(str(path), load_external_data=False)
    return {n.op_type for n in m.graph.node if n.domain in ("", "ai.onnx")}


def check_clear_error(path: Path, err: NpusimError) -> None:
    """An error must be one of the kinds a user can act on; an unsupported op must be in
    the up-front list with its reason (or outside the standard domain)."""
    text = str(err)
    assert "Traceback" not in text and text.strip()
    if "cannot lower" in text:
        missing = unsupported_ops(load_graph(path, _dims(path)))
        standard = _standard_ops(path)
        assert all(op in CANNOT_LOWER or op in ALWAYS_FOLDED or op in LIMITS
                   or op not in standard for op in missing), missing


def _dims(path: Path) -> dict[str, int]:
    """Every symbolic input dim bound to 2 (the package's models are tiny)."""
    from npusim.frontend import symbolic_dims

    return {d: 2 for d in symbolic_dims(path)[1]}


# --------------------------------------------------------------------------- the op set

def test_every_standard_op_is_lowered_folded_mapped_or_listed():
    """Each op of the standard set (domain "") is lowered with a cost, folded by the front
    end, mapped to a float op (quantized), or in the up-front cannot-lower list with a
    reason, and in only one of them; a new ONNX release's ops land here first."""
    standard = {s.name for s in defs.get_all_schemas() if s.domain == ""}
    homes = {"lowered": set(LOWERINGS), "folded": ALWAYS_FOLDED, "quantized": set(QUANTIZED),
             "cannot lower": set(CANNOT_LOWER)}
    unplaced = sorted(op for op in standard if not any(op in h for h in homes.values()))
    assert not unplaced, f"standard ops with no home: {unplaced}"
    for a, ha in homes.items():
        for b, hb in homes.items():
            if a < b:
                assert not ha & hb & standard, (a, b, sorted(ha & hb & standard))
    assert all(CANNOT_LOWER[op].strip() for op in CANNOT_LOWER)


@pytest.fixture(scope="module")
def node_cases(tmp_path_factory):
    """The single-node models of onnx.backend.test.case.node, written to files."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = [c for c in collect_testcases() if c.model is not None]
    folder = tmp_path_factory.mktemp("node_cases")
    out = []
    for c in cases:
        path = folder / f"{c.name}.onnx"
        onnx.save(c.model, str(path))
        out.append((c.name, path))
    return out


def test_every_node_model_lowers_or_stops_with_a_clear_error(node_cases):
    """All of the onnx package's node models (about 1900, every op of the standard set
    but a few with no model) load and lower on mobile or raise an NpusimError; a lowered op
    lowers in at least one of its models (except those whose models all give their axis
    as a graph input: CumSum, CumProd; or their block shape: Col2Im, whose exports hold it
    as a constant), and one lowered model per op simulates."""
    cfg = load_config("mobile")
    crashed, lowered, seen, first = [], defaultdict(int), defaultdict(int), {}
    for name, path in node_cases:
        ops = _standard_ops(path)
        for op in ops:
            seen[op] += 1
        try:
            lower_graph(load_graph(path, _dims(path)), cfg)
        except NpusimError as e:
            check_clear_error(path, e)
            continue
        except Exception as e:  # noqa: BLE001 - that is the failure
            crashed.append(f"{name}: {type(e).__name__}: {e}")
            continue
        for op in ops:
            lowered[op] += 1
            first.setdefault(op, path)
    assert not crashed, "\n".join(crashed[:20])
    never = sorted(op for op in seen if op in LOWERINGS and not lowered[op])
    assert never == ["Col2Im", "CumProd", "CumSum"], never
    for op, path in sorted(first.items()):
        if op not in LOWERINGS:
            continue
        r = npusim.simulate(str(path), "gemmini_validation", dims=_dims(path))
        assert r.total_cycles >= 0 and any(layer["name"] for layer in r.layers), op


# --------------------------------------------------------------------------- model files

@pytest.mark.parametrize("path", PACKAGE, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_package_model_simulates_or_stops_clearly(path):
    try:
        r = npusim.simulate(str(path), "mobile", dims=_dims(path) or None)
    except NpusimError as e:
        check_clear_error(path, e)
        return
    assert sum(layer["macs"] for layer in r.layers) == analytic_macs(path)
    assert r.total_cycles >= 0


@pytest.mark.parametrize("name", ["test_operator_flatten", "test_operator_view"])
def test_reshape_only_models_simulate_with_no_work(name):
    """Graphs of relabelling ops only (these two once ended in a bare AssertionError)."""
    r = npusim.simulate(str(DATA / "pytorch-operator" / name / "model.onnx"), "mobile")
    assert r.total_cycles == 0 and r.layers and all(layer["cycles"] == 0 for layer in r.layers)


@pytest.mark.parametrize("path", LIGHT, ids=lambda p: p.stem)
def test_light_zoo_cnn_simulates_with_its_analytic_macs(path):
    """AlexNet, VGG-19, ZFNet-512, Inception v1/v2, ResNet-50, DenseNet-121, ShuffleNet,
    SqueezeNet: their weights are ConstantOfShape nodes (folded, never materialised), old
    opset 9 (converted), Dropout and LRN on the way."""
    graph = load_graph(path)
    assert not unsupported_ops(graph) and not graph.unshaped
    assert not any(n.op_type in ("ConstantOfShape", "Constant") for n in graph.nodes)
    r = npusim.simulate(str(path), "server", overrides=FAST)
    assert sum(layer["macs"] for layer in r.layers) == analytic_macs(path)
    assert r.total_cycles > 0


def test_light_zoo_macs_match_published_counts():
    """The analytic counts above against the architectures' published multiply-accumulate
    counts (a check of the counting itself): ResNet-50 4.09 G, VGG-19 19.6 G, AlexNet
    (BVLC, grouped) 0.65-0.72 G."""
    by_name = {p.stem: analytic_macs(p) for p in LIGHT}
    assert 4.0e9 < by_name["light_resnet50"] < 4.2e9
    assert 19.5e9 < by_name["light_vgg19"] < 19.7e9
    assert 0.65e9 < by_name["light_bvlc_alexnet"] < 0.73e9


def test_onnx_package_is_the_one_tested():
    assert LIGHT and len(LIGHT) == 9 and len(PACKAGE) > 100, (os.fspath(DATA), len(PACKAGE))
