"""Old ONNX forms (npusim/frontend/legacy.py): every graph here is written twice by hand, once
in the old form an early exporter wrote and once in today's spelling, and both must load to
the same ops, the same shapes and the same cycles."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, defs, helper, numpy_helper, version_converter

from npusim.config import load_config
from npusim.errors import NpusimError
from npusim.frontend import legacy
from npusim.frontend.onnx_loader import load_graph
from npusim.lowering import lower_graph
from tests.helpers import cycles

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def vi(name, shape, t=FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(values, dtype), name)


def model(path, opset, nodes, inputs, outputs, inits=()):
    """A graph-only model at ``opset``; below IR 4 (opsets < 8) initializers are inputs too,
    as the exporters of that time wrote them."""
    inits = list(inits)
    ir = 3 if opset < 8 else 7
    if ir < 4:
        inputs = inputs + [vi(i.name, list(i.dims), i.data_type) for i in inits]
    g = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)
    onnx.save(m, str(path))
    return path


def loaded(path):
    g = load_graph(path)
    return [(n.op_type, [g.shape(o) for o in n.outputs if o]) for n in g.nodes], g


def same_as_modern(tmp_path, old, new):
    """``old`` and ``new`` (paths) load to the same ops and shapes and simulate alike."""
    ops_old, g_old = loaded(old)
    ops_new, g_new = loaded(new)
    assert ops_old == ops_new
    cfg = load_config("mobile", [])
    assert cycles(lower_graph(g_old, cfg), cfg) == cycles(lower_graph(g_new, cfg), cfg)
    return ops_old


def test_every_adapter_the_converter_lacks_below_opset_13_is_rewritten():
    # the converter steps a graph one opset at a time; where it has no adapter for an op
    # that changed, it stops. Each such op must be in legacy.GAPS for the opsets below it.
    history: dict[str, set[int]] = {}
    for s in defs.get_all_schemas_with_history():
        if s.domain == "":
            history.setdefault(s.name, set()).add(s.since_version)
    lacking = []
    for op, versions in history.items():
        for v in versions:
            if 1 < v <= legacy.MIN_OPSET and any(u < v for u in versions):
                n = helper.make_node(op, ["x"], ["y"])
                g = helper.make_graph([n], "g", [vi("x", [2])], [vi("y", None)])
                m = helper.make_model(g, opset_imports=[helper.make_opsetid("", v - 1)],
                                      ir_version=3)
                try:
                    version_converter.convert_version(m, v)
                except Exception as e:  # noqa: BLE001
                    if "No Adapter" in str(e):
                        lacking.append((op, v))
    assert lacking, "the probe found no gap at all: it no longer sees the converter's errors"
    for op, v in lacking:
        assert op in legacy.GAPS and legacy.GAPS[op][0] >= v, (op, v)


def test_caffe2_bias_add_broadcasts_over_channels_not_batch(tmp_path):
    # Add-1 with broadcast=1, axis=1: B (C) lines up with A's axis 1. ONNX's adapter
    # unsqueezed B to (C, 1, 1, 1), which broadcasts over the batch: a batch-1 graph came
    # out with a batch of C, a batch-2 graph failed inference.
    for n in (1, 2):
        old = model(tmp_path / f"old{n}.onnx", 1,
                    [helper.make_node("Add", ["x", "b"], ["y"], broadcast=1, axis=1,
                                      consumed_inputs=[0, 0])],
                    [vi("x", [n, 8, 6, 6])], [vi("y", [n, 8, 6, 6])], [const("b", [0] * 8,
                                                                               np.float32)])
        new = model(tmp_path / f"new{n}.onnx", 13,
                    [helper.make_node("Unsqueeze", ["b", "axes"], ["b3"]),
                     helper.make_node("Add", ["x", "b3"], ["y"])],
                    [vi("x", [n, 8, 6, 6])], [vi("y", [n, 8, 6, 6])],
                    [const("b", [0] * 8, np.float32), const("axes", [1, 2])])
        ops = same_as_modern(tmp_path, old, new)
        assert ops[-1] == ("Add", [(n, 8, 6, 6)])


def test_opset_1_chain_converts_with_shapes_inference_lacks(tmp_path):
    # ONNX has no shape rule for BatchNormalization-1: every shape after it was unknown and
    # the converter stopped at the bias Add ("Shape of input 0 is not available"); the Pad
    # of opset 1 ("paddings") had no adapter at all
    w = [const("w", np.zeros((8, 3, 3, 3)), np.float32)] + [
        const(k, np.zeros(8), np.float32) for k in ("s", "bb", "m", "v", "bias")]
    old = model(tmp_path / "old.onnx", 1, [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], is_test=1,
                         consumed_inputs=[0, 0, 0, 1, 1]),
        helper.make_node("Relu", ["n"], ["r"], consumed_inputs=[1]),
        helper.make_node("Add", ["r", "bias"], ["a"], broadcast=1, axis=1),
        helper.make_node("Pad", ["a"], ["p"], paddings=[0, 0, 1, 2, 0, 0, 3, 4]),
        helper.make_node("Sum", ["p", "p"], ["y"], consumed_inputs=[0, 0])],
        [vi("x", [1, 3, 16, 16])], [vi("y", [1, 8, 20, 22])], w)
    new = model(tmp_path / "new.onnx", 13, [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("Unsqueeze", ["bias", "axes"], ["b3"]),
        helper.make_node("Add", ["r", "b3"], ["a"]),
        helper.make_node("Pad", ["a", "pads"], ["p"]),
        helper.make_node("Sum", ["p", "p"], ["y"])],
        [vi("x", [1, 3, 16, 16])], [vi("y", [1, 8, 20, 22])],
        w + [const("axes", [1, 2]), const("pads", [0, 0, 1, 2, 0, 0, 3, 4])])
    ops = same_as_modern(tmp_path, old, new)
    assert ops[-1] == ("Sum", [(1, 8, 20, 22)])


@pytest.mark.parametrize("case", ["split", "cast", "tile", "lp_pool", "greater", "lstm"])
def test_ops_the_converter_has_no_adapter_for(tmp_path, case):
    x = [vi("x", [1, 4, 8, 8])]
    rnn_w = [const("w", np.zeros((1, 12, 4)), np.float32),
             const("r", np.zeros((1, 12, 3)), np.float32)]
    old_nodes, new_nodes, ins, outs, old_w, new_w, opset = {
        "split": ([helper.make_node("Split", ["x"], ["y", "z"], axis=1, split=[1, 3])],
                  [helper.make_node("Split", ["x", "sp"], ["y", "z"], axis=1)],
                  x, [vi("y", [1, 1, 8, 8]), vi("z", [1, 3, 8, 8])], [], [const("sp", [1, 3])],
                  1),
        "cast": ([helper.make_node("Cast", ["x"], ["y"], to="INT32")],
                 [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT32)],
                 x, [vi("y", [1, 4, 8, 8], TensorProto.INT32)], [], [], 5),
        "tile": ([helper.make_node("Tile", ["x", "t", "a"], ["y"])],
                 [helper.make_node("Tile", ["x", "rep"], ["y"])],
                 x, [vi("y", [1, 4, 24, 8])], [const("t", [3]), const("a", [2])],
                 [const("rep", [1, 1, 3, 1])], 5),
        "lp_pool": ([helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2],
                                      strides=[2, 2], p=2.0)],
                    [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2],
                                      strides=[2, 2], p=2)],
                    x, [vi("y", [1, 4, 4, 4])], [], [], 1),
        "greater": ([helper.make_node("Greater", ["x", "b"], ["y"], broadcast=1, axis=1)],
                    [helper.make_node("Unsqueeze", ["b", "axes"], ["b3"]),
                     helper.make_node("Greater", ["x", "b3"], ["y"])],
                    x + [vi("b", [4])], [vi("y", [1, 4, 8, 8], TensorProto.BOOL)], [],
                    [const("axes", [1, 2])], 6),
        "lstm": ([helper.make_node("LSTM", ["s", "w", "r"], ["y"], hidden_size=3,
                                   output_sequence=1)],
                 [helper.make_node("LSTM", ["s", "w", "r"], ["y"], hidden_size=3)],
                 [vi("s", [5, 1, 4])], [vi("y", [5, 1, 1, 3])], [], [], 1),
    }[case]
    old = model(tmp_path / "old.onnx", opset, old_nodes, ins, outs,
                old_w + (rnn_w if case == "lstm" else []))
    new = model(tmp_path / "new.onnx", 13, new_nodes, ins, outs,
                new_w + (rnn_w if case == "lstm" else []))
    same_as_modern(tmp_path, old, new)


def test_batch_norm_per_activation_is_its_mul_and_add(tmp_path):
    # spatial=0 (MXNet): the converter's 8 -> 9 adapter refuses it
    p = [const(k, np.zeros((4, 8, 8)), np.float32) for k in ("s", "bb", "m", "v")]
    old = model(tmp_path / "old.onnx", 8, [helper.make_node(
        "BatchNormalization", ["x", "s", "bb", "m", "v"], ["y"], spatial=0)],
        [vi("x", [2, 4, 8, 8])], [vi("y", [2, 4, 8, 8])], p)
    new = model(tmp_path / "new.onnx", 13, [helper.make_node("Mul", ["x", "s"], ["t"]),
                                            helper.make_node("Add", ["t", "bb"], ["y"])],
                [vi("x", [2, 4, 8, 8])], [vi("y", [2, 4, 8, 8])], p[:2])
    assert same_as_modern(tmp_path, old, new) == [("Mul", [(2, 4, 8, 8)]),
                                                  ("Add", [(2, 4, 8, 8)])]


def test_removed_experimental_ops_are_their_replacements(tmp_path):
    # ONNX's table of replacements: ImageScaler = Add(Mul(x, scale), bias per channel),
    # Crop = Slice, ScaledTanh = alpha * tanh(beta * x), ParametricSoftplus = alpha *
    # softplus(beta * x), Affine = alpha * x + beta, Scale = Mul; ONNX Runtime still runs them
    old = model(tmp_path / "old.onnx", 8, [
        helper.make_node("ImageScaler", ["x"], ["i"], scale=0.5, bias=[1.0, 2.0, 3.0]),
        helper.make_node("Crop", ["i"], ["c"], border=[1, 2, 3, 4]),
        helper.make_node("ScaledTanh", ["c"], ["t"], alpha=2.0, beta=0.5),
        helper.make_node("ParametricSoftplus", ["t"], ["s"], alpha=2.0, beta=0.5),
        helper.make_node("Affine", ["s"], ["a"], alpha=2.0, beta=1.0),
        helper.make_node("Scale", ["a"], ["y"], scale=3.0)],
        [vi("x", [1, 3, 16, 16])], [vi("y", [1, 3, 10, 12])])
    k = [const(n, v, np.float32) for n, v in (("half", 0.5), ("two", 2.0), ("one", 1.0),
                                                ("three", 3.0))]
    new = model(tmp_path / "new.onnx", 13, [
        helper.make_node("Mul", ["x", "half"], ["i0"]),
        helper.make_node("Add", ["i0", "bias"], ["i"]),
        helper.make_node("Slice", ["i", "st", "en", "ax"], ["c"]),
        helper.make_node("Mul", ["c", "half"], ["t0"]), helper.make_node("Tanh", ["t0"], ["t1"]),
        helper.make_node("Mul", ["t1", "two"], ["t"]),
        helper.make_node("Mul", ["t", "half"], ["s0"]),
        helper.make_node("Softplus", ["s0"], ["s1"]),
        helper.make_node("Mul", ["s1", "two"], ["s"]),
        helper.make_node("Mul", ["s", "two"], ["a0"]), helper.make_node("Add", ["a0", "one"], ["a"]),
        helper.make_node("Mul", ["a", "three"], ["y"])],
        [vi("x", [1, 3, 16, 16])], [vi("y", [1, 3, 10, 12])],
        k + [const("bias", np.zeros((3, 1, 1)), np.float32), const("st", [2, 1]),
             const("en", [-4, -3]), const("ax", [2, 3])])
    ops = same_as_modern(tmp_path, old, new)
    assert ops[2] == ("Slice", [(1, 3, 10, 12)])


def test_crop_with_scale_and_dynamic_slice(tmp_path):
    x = [vi("x", [1, 8, 16, 16])]
    crop = model(tmp_path / "crop.onnx", 8, [helper.make_node(
        "Crop", ["x"], ["y"], border=[1, 2, 0, 0], scale=[5, 6])], x, [vi("y", [1, 8, 5, 6])])
    dyn = model(tmp_path / "dyn.onnx", 8, [helper.make_node(
        "DynamicSlice", ["x", "st", "en", "ax"], ["y"])], x, [vi("y", [1, 8, 5, 6])],
        [const("st", [2, 1]), const("en", [7, 7]), const("ax", [2, 3])])
    new = model(tmp_path / "new.onnx", 13, [helper.make_node(
        "Slice", ["x", "st", "en", "ax"], ["y"])], x, [vi("y", [1, 8, 5, 6])],
        [const("st", [2, 1]), const("en", [7, 7]), const("ax", [2, 3])])
    assert same_as_modern(tmp_path, crop, new) == [("Slice", [(1, 8, 5, 6)])]
    same_as_modern(tmp_path, dyn, new)


def test_tile_on_data_is_a_clear_error(tmp_path):
    path = model(tmp_path / "tile.onnx", 5, [helper.make_node("Tile", ["x", "t", "a"], ["y"])],
                 [vi("x", [2, 3]), vi("t", [1], INT64), vi("a", [1], INT64)],
                 [vi("y", [2, 3])])
    with pytest.raises(NpusimError, match=r"Tile node '.*' in its old form takes 't' as data, "
                                          r"not as a constant"):
        load_graph(path)
