"""``--optimize``: ONNX Runtime's offline graph optimizer in front of npusim
(npusim/frontend/optimize.py)."""

from math import prod
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npusim
from helpers import weight
from npusim.errors import NpusimError
from npusim.frontend import load_graph
from npusim.frontend.optimize import optimize_model, prepared_model

F = TensorProto.FLOAT



def cbr_model(tmp_path, batch="batch") -> Path:
    """Two Conv (with bias) + BatchNormalization + Relu blocks; weights absent."""
    nodes, weights, x, c = [], [], "x", 8
    for i, m in enumerate((16, 16)):
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}",
                                   kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  helper.make_node("BatchNormalization", [f"c{i}", f"s{i}", f"o{i}", f"m{i}",
                                                          f"v{i}"], [f"n{i}"], name=f"bn{i}"),
                  helper.make_node("Relu", [f"n{i}"], [f"r{i}"], name=f"relu{i}")]
        weights += [weight(f"w{i}", [m, c, 3, 3]), weight(f"b{i}", [m])]
        weights += [weight(f"{k}{i}", [m]) for k in "somv"]
        x, c = f"r{i}", m
    g = helper.make_graph(nodes, "cbr", [helper.make_tensor_value_info("x", F, [batch, 8, 16, 16])],
                          [helper.make_tensor_value_info(x, F, [batch, 16, 16, 16])],
                          initializer=weights)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "cbr.onnx"
    onnx.save(model, str(path))
    return path


def ops(path) -> list[str]:
    return [n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node]


def test_levels_fold_and_fuse_and_the_result_simulates(tmp_path):
    src = cbr_model(tmp_path)
    dims = {"batch": 1}
    raw = npusim.simulate(str(src), "mobile", dims=dims)
    assert len(ops(src)) == 6

    none = optimize_model(src, "none", dims=dims, out_dir=tmp_path / "none")
    assert ops(none) == ops(src)  # nothing changes, not even the node count

    basic = optimize_model(src, "basic", dims=dims, out_dir=tmp_path / "basic")
    assert ops(basic) == ["Conv", "Relu", "Conv", "Relu"]  # BatchNormalization folded

    ext = optimize_model(src, "extended", dims=dims, out_dir=tmp_path / "ext")
    assert ops(ext) == ["FusedConv", "FusedConv"]  # and the Relu fused too
    model = onnx.load(str(ext), load_external_data=False)
    assert {n.domain for n in model.graph.node} == {"com.microsoft"}
    assert [a.s for n in model.graph.node for a in n.attribute if a.name == "activation"] \
        == [b"Relu", b"Relu"]

    for path in (none, basic, ext):
        r = npusim.simulate(str(path), "mobile")  # dims were bound before optimizing
        assert r.total_cycles <= raw.total_cycles
        assert r.total_cycles >= 0.95 * raw.total_cycles
    r = npusim.simulate(str(ext), "mobile")
    assert [l["op_type"] for l in r.layers] == ["FusedConv", "FusedConv"]
    assert all(any("Relu" in f for f in l["fused"]) for l in r.layers)


def test_macs_survive_optimization(tmp_path):
    src = cbr_model(tmp_path)
    expected = 16 * 16 * 16 * 8 * 9 + 16 * 16 * 16 * 16 * 9
    for level in ("none", "basic", "extended"):
        out = optimize_model(src, level, dims={"batch": 2}, out_dir=tmp_path / level)
        r = npusim.simulate(str(out), "mobile", overrides=["memory.type=ideal"])
        assert sum(c["macs"] for c in r.cores) == 2 * expected


def test_absent_external_weights_become_sparse_zeros(tmp_path):
    src = cbr_model(tmp_path)
    assert not (tmp_path / "absent.bin").exists()
    out = optimize_model(src, "basic", out_dir=tmp_path / "o")
    zeros = tmp_path / "o" / "zeros.bin"
    weights = sum(4 * prod(t.dims) for t in onnx.load(str(src), load_external_data=False)
                  .graph.initializer)
    assert zeros.stat().st_size >= weights
    graph = load_graph(out, {"batch": 3})  # symbolic dims survive when none were bound
    assert graph.shape(graph.nodes[-1].outputs[0]) == (3, 16, 16, 16)


def test_small_external_tensors_that_exist_keep_their_values(tmp_path):
    # a Reshape whose target shape lives in an external file: optimizing must read it
    shape = numpy_helper.from_array(np.array([4, 4], dtype=np.int64), "shape")
    (tmp_path / "shape.bin").write_bytes(shape.raw_data)
    shape.ClearField("raw_data")
    shape.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "shape.bin"), ("offset", "0"), ("length", "16")):
        e = shape.external_data.add()
        e.key, e.value = k, v
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="mm")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 8])],
                          [helper.make_tensor_value_info("y", F, [4, 3])],
                          initializer=[shape, weight("w", [4, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    src = tmp_path / "reshape.onnx"
    onnx.save(m, str(src))
    out = optimize_model(src, "basic", out_dir=tmp_path / "o")
    graph = load_graph(out)
    assert graph.shape("y") == (4, 3)
    assert [n.op_type for n in graph.nodes] == ["Reshape", "MatMul"]


def test_prepared_model_passes_standard_models_through_and_cleans_up(tmp_path):
    src = cbr_model(tmp_path)
    with prepared_model(src, "none", {"batch": 1}) as (path, dims):
        assert path == src and dims == {"batch": 1}
    with prepared_model(src, "extended", {"batch": 1}) as (path, dims):
        assert dims is None and path.is_file() and path != src
        workdir = path.parent
    assert not workdir.exists()


def test_unknown_level_and_onnx_runtime_failures_are_clear_errors(tmp_path):
    src = cbr_model(tmp_path)
    with pytest.raises(NpusimError, match="--optimize 'all'.*none, basic, extended"):
        optimize_model(src, "all")
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="odd", domain="example.custom")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [2])],
                          [helper.make_tensor_value_info("y", F, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("example.custom", 1)])
    m.ir_version = 8
    bad = tmp_path / "custom.onnx"
    onnx.save(m, str(bad))
    with pytest.raises(NpusimError) as e:
        optimize_model(bad, "basic", out_dir=tmp_path / "o")
    assert "custom.onnx" in str(e.value) and "Frobnicate" in str(e.value)


def test_an_unbound_dim_is_said_of_the_users_file_not_the_optimizers_copy(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])])
    path = tmp_path / "sym.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(NpusimError) as info:
        npusim.simulate(str(path), optimize="basic")
    assert f"'{path}' has unbound symbolic dimension(s) 'batch'" in str(info.value)
    assert "optimized.onnx" not in str(info.value)


def test_rms_norm_fusion_gives_a_loadable_contrib_op(tmp_path):
    # x / sqrt(mean(x^2) + eps) * g: ONNX Runtime fuses it into SimplifiedLayerNormalization,
    # an op it files under the ONNX domain; npusim moves it to com.microsoft so it loads
    consts = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
              numpy_helper.from_array(np.array([-1], np.int64), "axes"),
              numpy_helper.from_array(np.array(1e-5, np.float32), "eps")]
    nodes = [helper.make_node("Pow", ["x", "two"], ["p"], name="pow"),
             helper.make_node("ReduceMean", ["p", "axes"], ["m"], name="mean", keepdims=1),
             helper.make_node("Add", ["m", "eps"], ["a"], name="add"),
             helper.make_node("Sqrt", ["a"], ["s"], name="sqrt"),
             helper.make_node("Div", ["x", "s"], ["d"], name="div"),
             helper.make_node("Mul", ["d", "g"], ["y"], name="scale")]
    g = helper.make_graph(nodes, "rms", [helper.make_tensor_value_info("x", F, [1, 8, 32])],
                          [helper.make_tensor_value_info("y", F, [1, 8, 32])],
                          initializer=consts + [weight("g", [32])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    src = tmp_path / "rms.onnx"
    onnx.save(m, str(src))
    out = optimize_model(src, "extended", out_dir=tmp_path / "o")
    graph = load_graph(out)
    assert [(n.op_type, n.domain) for n in graph.nodes] == \
        [("SimplifiedLayerNormalization", "com.microsoft")]
    r = npusim.simulate(str(out), "mobile")
    assert r.layers[0]["op_type"] == "SimplifiedLayerNormalization"


def test_contrib_outputs_get_their_shapes_from_onnx_runtime(tmp_path):
    nodes = [helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["h"], name="rms",
                              domain="com.microsoft"),
             helper.make_node("QuickGelu", ["h"], ["q"], name="act", domain="com.microsoft"),
             helper.make_node("Relu", ["q"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 32])],
                          [helper.make_tensor_value_info("y", F, ["n", 32])],
                          initializer=[weight("g", [32])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    src = tmp_path / "contrib.onnx"
    onnx.save(m, str(src))
    with prepared_model(src, "none", {"n": 4}) as (path, dims):
        assert path == src  # nothing to prepare: the loader asks ONNX Runtime per node
    graph = load_graph(src, {"n": 4})
    assert [n.op_type for n in graph.nodes] == ["SimplifiedLayerNormalization", "QuickGelu",
                                                "Relu"]
    assert graph.shape("h") == graph.shape("q") == (4, 32)


def test_resnet18_raw_and_optimized_agree_within_five_percent_and_optimized_is_not_slower():
    import npusim

    raw = npusim.simulate("resnet18", "server", dims={"batch": 1})
    opt = npusim.simulate("resnet18", "server", dims={"batch": 1}, optimize="extended")
    assert opt.total_cycles <= raw.total_cycles
    assert abs(opt.total_cycles - raw.total_cycles) <= 0.05 * raw.total_cycles
    assert sum(l["macs"] for l in opt.layers) == sum(l["macs"] for l in raw.layers)
