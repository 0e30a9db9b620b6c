"""Lowering mechanisms the framework-export audit (``models/zoo_audit.py``,
``results/validation/framework_exports.md``) found wrong, on hand-built graphs of the
patterns the exporters write."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npusim
from npusim.config import load_config
from npusim.frontend import load_graph
from npusim.lowering import lower_graph
from npusim.lowering.tiling import Budget, ConvShape, choose_conv_tile, conv_occupancy


def _save(path, nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("bias_first", [False, True], ids=["dynamo-order", "torchscript-order"])
def test_a_linear_bias_is_fused_whichever_side_of_the_add_it_is(tmp_path, bias_first):
    """TorchScript writes ``Add(bias, MatMul(x, W))``, dynamo ``Add(MatMul(x, W), bias)``:
    both are one layer, the bias loaded by the GEMM, with the same cycles."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 512])
    w = numpy_helper.from_array(np.zeros((256, 512), np.float32), "W")
    b = numpy_helper.from_array(np.zeros((512,), np.float32), "bias")
    add_in = ["bias", "mm"] if bias_first else ["mm", "bias"]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="linear"),
             helper.make_node("Add", add_in, ["y"], name="linear_bias")]
    path = _save(tmp_path / f"lin{bias_first}.onnx", nodes, [x], [y], [w, b])
    prog = lower_graph(load_graph(path), load_config("mobile", []))
    assert [info.name for info in prog.layers] == ["linear"]
    assert prog.layers[0].fused == ["linear_bias"]
    cycles = npusim.simulate(str(path), "mobile").total_cycles
    other = tmp_path / f"lin{not bias_first}.onnx"
    nodes[1] = helper.make_node("Add", add_in[::-1], ["y"], name="linear_bias")
    _save(other, nodes, [x], [y], [w, b])
    assert npusim.simulate(str(other), "mobile").total_cycles == cycles


def test_a_dilated_window_wider_than_the_map_holds_only_the_map():
    """DeepLab's atrous pyramid: a 3x3 conv of dilation 36 (padding 36) on a 4x4 map. One
    output's window spans 73 positions per dim, all padding but the 4 of the map; a tile
    holds (and loads) only those, so a tile fits the mobile scratchpad."""
    b = Budget.of(load_config("mobile", []))
    s = ConvShape(N=1, C=960, M=256, groups=1, out=(4, 4), kernel=(3, 3), strides=(1, 1),
                  dilations=(36, 36), inputs=(4, 4))
    assert s.span(0, 1) == 73 and s.window(0, 1) == 4
    tile = choose_conv_tile(b, s)
    pixels, spad, acc = conv_occupancy(b, s, tile)
    assert pixels <= 16 and spad <= b.spad_half and acc <= b.acc_half
    unbounded = ConvShape(**{**s.__dict__, "inputs": ()})
    assert unbounded.window(0, 1) == 73  # what the chooser counted before: no tile fitted


def test_atrous_conv_on_a_small_map_lowers_with_its_macs(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 4, 4])
    w = numpy_helper.from_array(np.zeros((32, 64, 3, 3), np.float32), "W")
    node = helper.make_node("Conv", ["x", "W"], ["y"], name="aspp", dilations=[36, 36],
                            pads=[36, 36, 36, 36], kernel_shape=[3, 3])
    path = _save(tmp_path / "aspp.onnx", [node], [x], [y], [w])
    r = npusim.simulate(str(path), "mobile")
    assert sum(layer["macs"] for layer in r.layers) == 16 * 32 * 64 * 9
