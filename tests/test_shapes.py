"""Static shapes from framework-style graphs (frontend/shapes.py), and the messages when a
graph still cannot be shaped or a dim is missing.

The graphs here are built the way exporters write them: shapes computed at run time from
the inputs (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, Range for positions, a mask
from ConstantOfShape and Where), weights made by ConstantOfShape, an If on a constant.
Expected shapes are worked out by hand from the ops' definitions.
"""

from __future__ import annotations

import re
import shutil
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

import npusim
from npusim.cli import app
from npusim.errors import NpusimError
from npusim.frontend import load_graph, load_model
from npusim.lowering import lower_graph
from npusim.config import load_config
from npusim.paths import models_dir

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def vi(name, shape, dtype=F):
    """A value info; an int for shape: that rank, every dim unnamed-symbolic (as exporters
    declare outputs they cannot size)."""
    if isinstance(shape, int):
        shape = [f"{name}_{i}" for i in range(shape)]
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name, values, dtype=I64, dims=None):
    values = list(np.asarray(values).reshape(-1))
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, dtype, [len(values)] if dims is None else dims, values))


def save(tmp_path, nodes, inputs, outputs, inits=(), name="g", opset=17):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(m, str(path))
    return path


def test_a_reshape_to_another_element_count_is_refused_at_the_node(tmp_path):
    """ONNX's shape rule takes a target without -1 as given; ONNX Runtime refuses the file,
    and so does npusim, at the Reshape (a broken export's error came twelve nodes later)."""
    nodes = [const("target", [1, 32, 2, 32]),
             helper.make_node("Reshape", ["q", "target"], ["y"], name="split"),
             helper.make_node("Relu", ["y"], ["z"])]
    path = save(tmp_path, nodes, [vi("q", [1, 32, 256])], [vi("z", 4)])
    with pytest.raises(NpusimError, match=r"node 'split' \(Reshape\): 8192 elements "
                                          r"\[1, 32, 256\] cannot take the shape "
                                          r"\[1, 32, 2, 32\] \(2048 elements\)"):
        load_graph(path)


def test_a_graph_output_declared_without_a_shape_is_shaped_from_its_producer(tmp_path):
    """tf2onnx writes a batched einsum's output at opset 13 with no shape field: ONNX's
    checker refuses it, ONNX Runtime runs it, and so does npusim (an input needs one)."""
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    y = helper.make_tensor_value_info("y", F, None)
    path = save(tmp_path, nodes, [vi("x", ["batch", 8])], [y])
    assert load_graph(path, {"batch": 3}).shape("y") == (3, 8)
    path = save(tmp_path, nodes, [helper.make_tensor_value_info("x", F, None)], [y], name="h")
    with pytest.raises(NpusimError, match="graph input 'x' has no shape"):
        load_graph(path)


@pytest.mark.parametrize("x, w, attrs, problem", [
    ([1, 3, 16, 16], [8, 3, 3, 3], {"group": 5},
     "group = 5 must divide its 3 input and 8 output channels"),
    ([1, 4, 16, 16], [8, 4, 3, 3], {"group": 2},
     "its weight's 4 input channels x group 2 are not the input's 4 channels"),
    ([1, 3, 4, 4], [8, 3, 9, 9], {},
     "its kernel spans 9 along spatial axis 0, more than the 4 of its padded input"),
    ([1, 3, 4, 4], [8, 3, 3, 3], {"dilations": [3, 1], "pads": [1, 1, 1, 1]},
     "its kernel spans 7 along spatial axis 0, more than the 6 of its padded input"),
    ([1, 0, 8, 8], [8, 0, 3, 3], {"pads": [1, 1, 1, 1]},
     "it reduces over 0 input channels"),
])
def test_a_conv_that_cannot_be_is_refused_at_the_node(tmp_path, x, w, attrs, problem):
    """ONNX's Conv rule lets these pass or gives no shape (then said to depend on values),
    and the tiler found no tile (saying to raise the scratchpad)."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)]
    inits = [numpy_helper.from_array(np.zeros(w, np.float32), "w")]
    path = save(tmp_path, nodes, [vi("x", x)], [vi("y", 4)], inits)
    with pytest.raises(NpusimError, match=re.escape(f"node 'conv' (Conv): {problem}")):
        load_graph(path)


def test_a_product_over_nothing_is_refused_at_the_node(tmp_path):
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")]
    inits = [numpy_helper.from_array(np.zeros((0, 8), np.float32), "b")]
    path = save(tmp_path, nodes, [vi("a", [4, 0])], [vi("y", [4, 8])], inits)
    with pytest.raises(NpusimError, match=r"node 'mm' \(MatMul\): it reduces over 0 elements"):
        load_graph(path)


def test_shape_subgraph_of_a_reshape_is_evaluated(tmp_path):
    """[batch, seq, 64] -> [batch, seq, 4, 16] with the target built from Shape: the
    exporters' multi-head split."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             const("i01", [0, 1]),
             helper.make_node("Gather", ["s", "i01"], ["bs"]),
             const("heads", [4, 16]),
             helper.make_node("Concat", ["bs", "heads"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"], name="split"),
             helper.make_node("Relu", ["y"], ["z"])]
    path = save(tmp_path, nodes, [vi("x", ["batch", "seq", 64])], [vi("z", 4)])
    g = load_graph(path, {"batch": 2, "seq": 7})
    assert g.shape("y") == g.shape("z") == (2, 7, 4, 16)
    assert [n.op_type for n in g.nodes] == ["Reshape", "Relu"]  # the rest folded
    assert g.folded == 5 and list(g.tensor("target").value) == [2, 7, 4, 16]


def test_positions_and_a_causal_mask_from_shapes_alone(tmp_path):
    """Range over the sequence, and a [seq, seq] mask from ConstantOfShape + Trilu: both are
    constants once seq is bound, folded with their exact shapes."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1, end=2),
             helper.make_node("Squeeze", ["s"], ["n"]),
             const("zero", [0], dims=[]), const("one", [1], dims=[]),
             helper.make_node("Range", ["zero", "n", "one"], ["pos"]),
             helper.make_node("Concat", ["s", "s"], ["ss"], axis=0),
             helper.make_node("ConstantOfShape", ["ss"], ["full"],
                              value=helper.make_tensor("v", F, [1], [1.0])),
             helper.make_node("Trilu", ["full"], ["mask"], upper=0),
             helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "mask"], ["y"], name="masked")]
    w = numpy_helper.from_array(np.zeros((64, 300), np.float32), "w")
    path = save(tmp_path, nodes, [vi("x", [1, "seq", 64])], [vi("y", 3), vi("pos", 1, I64)],
                [w])
    g = load_graph(path, {"seq": 300})
    assert g.shape("pos") == (300,) and list(g.tensor("pos").value[:3]) == [0, 1, 2]
    assert g.shape("mask") == (300, 300) and g.tensor("mask").is_initializer
    assert g.tensor("mask").value is None  # 90 000 elements: shape only, never computed
    assert [n.op_type for n in g.nodes] == ["MatMul", "Add"]


def test_constant_of_shape_weights_are_never_materialised(tmp_path):
    """The old zoo files' weights: ConstantOfShape of a shape initializer. A 4 GB weight
    loads in well under a second (no array of that size is ever made)."""
    shape = numpy_helper.from_array(np.array([32768, 32768], np.int64), "w_shape")
    nodes = [helper.make_node("ConstantOfShape", ["w_shape"], ["w"],
                              value=helper.make_tensor("v", F, [1], [0.02])),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    path = save(tmp_path, nodes, [vi("x", [1, 32768])], [vi("y", [1, 32768])], [shape])
    t0 = time.perf_counter()
    g = load_graph(path)
    assert time.perf_counter() - t0 < 5
    assert g.shape("w") == (32768, 32768) and g.tensor("w").is_initializer
    assert g.tensor("w").value is None
    assert lower_graph(g, load_config("server")).layers[0].macs == 32768 * 32768


def test_if_on_a_constant_is_inlined(tmp_path):
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                             [vi("t", [2, 8])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [vi("e", [2, 8])])
    nodes = [const("c", [1], TensorProto.BOOL, dims=[]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    g = load_graph(save(tmp_path, nodes, [vi("x", [2, 8])], [vi("y", [2, 8])]))
    assert [n.op_type for n in g.nodes] == ["Relu", "Identity"]


def test_old_opset_model_is_converted(tmp_path):
    """Opset 9: Upsample with a scales attribute, Dropout with its mask unused."""
    nodes = [helper.make_node("Dropout", ["x"], ["d", "mask"], ratio=0.5),
             helper.make_node("Upsample", ["d", "scales"], ["y"], mode="nearest")]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    g = load_graph(save(tmp_path, nodes, [vi("x", [1, 3, 4, 4])], [vi("y", 4)], [scales],
                        opset=9))
    assert g.shape("y") == (1, 3, 8, 8)
    r = npusim.simulate(g.source_path, "mobile")
    assert [layer["op_type"] for layer in r.layers] == ["Dropout", "Resize"]


def test_absent_external_data_and_huge_weights_load_fast(tmp_path):
    """Graph-only: a 30 GB weight table whose external file does not exist."""
    w = onnx.TensorProto()
    w.name, w.data_type = "emb", F
    w.dims.extend([128256, 61440])  # 7.9 G floats: 31.5 GB
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "absent.bin"), ("offset", "0"), ("length", str(4 * 128256 * 61440))):
        e = w.external_data.add()
        e.key, e.value = k, v
    node = helper.make_node("Gather", ["emb", "ids"], ["y"])
    path = save(tmp_path, [node], [vi("ids", [1, 16], I64)], [vi("y", [1, 16, 61440])], [w])
    t0 = time.perf_counter()
    g = load_graph(path)
    assert time.perf_counter() - t0 < 5 and g.tensor("emb").nbytes == 4 * 128256 * 61440


# --------------------------------------------------------------------------- messages

def test_unshapeable_tensor_is_one_line_with_node_inputs_and_advice(tmp_path):
    """A Reshape whose target comes from an input's values, not its shape."""
    nodes = [helper.make_node("Reshape", ["x", "target"], ["y"], name="view"),
             helper.make_node("Relu", ["y"], ["z"], name="act")]
    path = save(tmp_path, nodes, [vi("x", ["n", 8]), vi("target", [2], I64)], [vi("z", 2)])
    res = CliRunner().invoke(app, ["simulate", str(path), "--dim", "n=4"])
    assert res.exit_code == 2
    lines = [l for l in res.output.splitlines() if l.strip()]
    assert len(lines) == 1, res.output
    line = lines[0]
    assert "tensor 'y' produced by node 'view' (Reshape) has no static shape" in line
    assert "its inputs: x [4, 8], target [2]" in line
    assert "depends on values npusim does not read" in line and "--dim n=4" in line


def test_bundled_model_uses_its_example_dims_and_says_so():
    res = CliRunner().invoke(app, ["simulate", "resnet18", "-c", "server", "--set",
                                   "memory.type=ideal"])
    assert res.exit_code == 0, res.output
    dims_line = next(l for l in res.output.splitlines() if l.startswith("dims"))
    assert "batch=1" in dims_line and "example value" in dims_line
    r = npusim.simulate("gpt2_decode", "server", dims={"batch": 2})
    assert r.extra["assumed_dims"] == {"past": 127}  # batch given, past assumed


def test_users_model_with_an_unbound_dim_stays_an_error(tmp_path):
    copy = tmp_path / "my_resnet.onnx"
    shutil.copy(models_dir() / "resnet18.onnx", copy)
    res = CliRunner().invoke(app, ["simulate", str(copy)])
    assert res.exit_code == 2
    assert "unbound symbolic dimension(s) 'batch'" in res.output and "--dim batch=VALUE" \
        in res.output
    with pytest.raises(NpusimError, match="unbound"):
        load_model(copy)


# --------------------------------------------------------------------------- dim expressions

def _cache_model(tmp_path, total="past_sequence_length + sequence_length", masked=True):
    """A decoder step as PyTorch's TorchScript exporter names it: the attention mask covers
    the cache and the new tokens, its length named by the expression (``masked``: the mask
    multiplies cache and tokens, so its length must agree with theirs)."""
    nodes = [helper.make_node("Concat", ["past", "x"], ["kv"], axis=1),
             helper.make_node("Mul", ["kv", "mask"], ["y"]) if masked
             else helper.make_node("Relu", ["mask"], ["y"])]
    inputs = [vi("x", ["batch_size", "sequence_length"]),
              vi("past", ["batch_size", "past_sequence_length"]),
              vi("mask", ["batch_size", total])]
    return save(tmp_path, nodes, inputs, [vi("y", 2)], name="cache")


def test_a_dim_named_by_an_expression_is_computed_from_the_others(tmp_path):
    path = _cache_model(tmp_path)
    g = load_graph(path, {"batch_size": 2, "sequence_length": 8, "past_sequence_length": 24})
    assert g.shape("mask") == (2, 32) and g.shape("y") == (2, 32)
    # what a user binds: the names, not the expression
    assert npusim.frontend.symbolic_dims(path)[1] == ["batch_size", "sequence_length",
                                                     "past_sequence_length"]


def test_an_explicit_value_wins_over_the_expression(tmp_path):
    path = _cache_model(tmp_path, masked=False)
    dims = {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 24,
            "past_sequence_length + sequence_length": 40}
    g = load_graph(path, dims)
    assert g.shape("mask") == (1, 40) and g.shape("kv") == (1, 32)


@pytest.mark.parametrize("total,value", [("(a + 2) * b // 5", 2), ("a*b - 1", 7),
                                         ("a // 3 + b", 3)])
def test_dim_expressions_follow_integer_arithmetic(tmp_path, total, value):
    x = helper.make_node("Identity", ["m"], ["y"])
    path = save(tmp_path, [x], [vi("a_in", ["a"]), vi("b_in", ["b"]), vi("m", [total])],
                [vi("y", 1)], name="expr")
    assert load_graph(path, {"a": 4, "b": 2}).shape("y") == (value,)


def test_an_expression_with_an_unbound_name_names_the_missing_dim(tmp_path):
    path = _cache_model(tmp_path)
    with pytest.raises(NpusimError) as e:
        load_graph(path, {"batch_size": 1, "past_sequence_length": 24})
    msg = str(e.value)
    assert ("unbound symbolic dimension(s) 'sequence_length' (used by input 'x', "
            "'past_sequence_length + sequence_length' of input 'mask'); "
            "pass --dim sequence_length=VALUE") in msg


def test_a_dim_expression_must_come_out_positive(tmp_path):
    path = _cache_model(tmp_path, total="sequence_length - past_sequence_length")
    with pytest.raises(NpusimError, match=r"dimension 'sequence_length - past_sequence_length' "
                                          r"is -16 with sequence_length=8, past_sequence_length"
                                          r"=24; a dimension must be a positive integer"):
        load_graph(path, {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 24})


@pytest.mark.parametrize("name", ["__import__('os').getpid() + 1", "n ** 2", "n / 2", "-n"])
def test_a_name_that_is_not_dim_arithmetic_is_a_plain_name(tmp_path, name):
    # parsed with ast and never run: a call, a power, true division or a lone sign is not
    # an expression npusim evaluates, so the dim is an ordinary name to bind
    path = save(tmp_path, [helper.make_node("Identity", ["x"], ["y"])],
                [vi("x", [name])], [vi("y", 1)], name="plain")
    with pytest.raises(NpusimError, match="unbound symbolic dimension"):
        load_graph(path, {})
    assert load_graph(path, {name: 3}).shape("y") == (3,)
