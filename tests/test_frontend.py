"""Front end: bundled models load with the right nodes and shapes, never touching weights."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from npusim.errors import NpusimError
from npusim.frontend import (
    Graph,
    list_bundled_models,
    load_graph,
    load_model,
    resolve_model_path,
)
from npusim.frontend.onnx_loader import symbolic_dims
from npusim.paths import models_dir

REPO = Path(__file__).resolve().parents[1]
FLOAT = TensorProto.FLOAT


def conv_out(size: int, k: int, stride: int, pad: int) -> int:
    """Output size of a convolution along one axis (the textbook formula)."""
    return (size + 2 * pad - k) // stride + 1


def summary(g: Graph) -> list[tuple]:
    """(name, op, input shapes, output shapes) per node."""
    return [
        (n.name, n.op_type, [g.shape(t) for t in n.inputs if t], [g.shape(t) for t in n.outputs])
        for n in g.nodes
    ]


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def make_model(nodes, inputs, outputs, initializers=(), value_info=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "t", inputs, outputs, list(initializers), value_info=list(value_info))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


# --------------------------------------------------------------------------- bundled models

SMALL_MODELS = ["bert_ffn", "conv_resnet18_layer1", "matmul_1024", "matmul_512x768x768", "mlp",
                "tiny_cnn"]


def test_bundled_model_list():
    names = [p.stem for p in list_bundled_models()]
    assert names == sorted(SMALL_MODELS + [
        "bert_base", "bert_base_layer", "bert_base_layer_decomp", "gpt2_decode",
        "gpt2_prompt", "llama3_8b_layer", "llama3_8b_layer_decode", "mobilenetv2", "resnet18",
        "resnet50",
    ])  # the model set is tested in test_bundled_models.py


def test_tiny_cnn_nodes_and_shapes():
    g = load_model("tiny_cnn")
    layers = [(3, 16, 3, 1, 1), (16, 32, 3, 2, 1), (32, 32, 3, 1, 1), (32, 64, 1, 1, 0)]
    expected, h = [], 32
    for i, (cin, cout, k, s, p) in enumerate(layers, start=1):
        oh = conv_out(h, k, s, p)
        expected.append((f"conv{i}", "Conv", [(1, cin, h, h), (cout, cin, k, k), (cout,)],
                         [(1, cout, oh, oh)]))
        h = oh
    assert h == 16
    flat = 64 * h * h
    expected.append(("flatten", "Flatten", [(1, 64, h, h)], [(1, flat)]))
    expected.append(("fc", "Gemm", [(1, flat), (10, flat), (10,)], [(1, 10)]))
    assert summary(g) == expected
    assert g.inputs == ["input"] and g.outputs == ["logits"]
    assert g.nodes[1].attrs == {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                "group": 1}
    assert g.nodes[5].attrs == {"transB": 1}
    assert g.tensor("conv2.weight").is_initializer and not g.tensor("input").is_initializer
    assert g.tensor("fc.weight").nbytes == 10 * flat * 4
    assert "Tiny CNN" in g.doc_string


def test_mlp_nodes_and_shapes():
    g = load_model("mlp")
    assert summary(g) == [
        ("fc1", "MatMul", [(64, 256), (256, 512)], [(64, 512)]),
        ("fc2", "MatMul", [(64, 512), (512, 512)], [(64, 512)]),
        ("fc3", "Gemm", [(64, 512), (128, 512), (128,)], [(64, 128)]),
    ]


@pytest.mark.parametrize("name,m,k,n", [("matmul_512x768x768", 512, 768, 768),
                                        ("matmul_1024", 1024, 1024, 1024)])
def test_single_matmul_models(name, m, k, n):
    g = load_model(name)
    assert summary(g) == [("matmul", "MatMul", [(m, k), (k, n)], [(m, n)])]
    assert g.initializers == ["B"]


def test_conv_resnet18_layer1():
    g = load_model("conv_resnet18_layer1")
    o = conv_out(56, 3, 1, 1)
    assert o == 56
    assert summary(g) == [("conv", "Conv", [(1, 64, 56, 56), (64, 64, 3, 3)], [(1, 64, o, o)])]


def test_bert_ffn_binds_seq():
    g = load_model("bert_ffn", {"seq": 128})
    assert summary(g) == [
        ("ffn_up", "MatMul", [(128, 768), (768, 3072)], [(128, 3072)]),
        ("ffn_down", "MatMul", [(128, 3072), (3072, 768)], [(128, 768)]),
    ]
    assert load_model("bert_ffn", {"seq": 7}).shape("output") == (7, 768)


def test_bert_ffn_unbound_dim_names_it():
    with pytest.raises(NpusimError, match=r"'seq'.*input 'input'.*--dim seq=VALUE"):
        load_model("bert_ffn")


def test_unknown_dim_name_lists_model_dims():
    with pytest.raises(NpusimError, match=r"'batch'.*symbolic dims are: seq"):
        load_model("bert_ffn", {"seq": 8, "batch": 2})
    with pytest.raises(NpusimError, match=r"no dimension named 'seq'.*none"):
        load_model("tiny_cnn", {"seq": 8})


def test_dim_must_be_positive():
    with pytest.raises(NpusimError, match=r"seq=0.*positive integer"):
        load_model("bert_ffn", {"seq": 0})


def test_weights_are_external_and_absent():
    for path in list_bundled_models():
        model = onnx.load(str(path), load_external_data=False)
        assert model.graph.initializer, path
        for t in model.graph.initializer:
            if path.stem not in SMALL_MODELS and t.data_location != TensorProto.EXTERNAL:
                assert len(t.dims) <= 1 and sum(t.dims) <= 8, (path, t.name)  # shapes, scalars
                continue
            assert t.data_location == TensorProto.EXTERNAL and not t.raw_data
            location = dict((e.key, e.value) for e in t.external_data)["location"]
            assert location == f"{path.stem}.weights.bin"
            assert not (path.parent / location).exists()
        assert path.stat().st_size < (4096 if path.stem in SMALL_MODELS else 1_000_000)


def test_existing_external_file_is_never_read(tmp_path):
    # An empty weights file: reading it would fail on offset/length, so loading proves no read.
    src = models_dir() / "mlp.onnx"
    dst = tmp_path / "mlp.onnx"
    dst.write_bytes(src.read_bytes())
    (tmp_path / "mlp.weights.bin").write_bytes(b"")
    with pytest.raises(Exception):
        onnx.load(str(dst))  # onnx itself would try to read the data
    assert load_graph(dst).shape("output") == (64, 128)


def test_build_models_is_deterministic(tmp_path):
    subprocess.run([sys.executable, str(REPO / "models" / "build_models.py"), "--out",
                    str(tmp_path)], check=True, capture_output=True)
    built = sorted(p.name for p in tmp_path.glob("*.onnx"))
    assert built == [p.name for p in list_bundled_models()]
    for name in built:
        assert (tmp_path / name).read_bytes() == (REPO / "models" / name).read_bytes(), name


# --------------------------------------------------------------------------- model lookup


def test_resolve_model_path():
    bundled = models_dir() / "tiny_cnn.onnx"
    assert resolve_model_path("tiny_cnn") == bundled
    assert resolve_model_path("tiny_cnn.onnx") == bundled
    assert resolve_model_path(bundled) == bundled
    with pytest.raises(NpusimError, match=r"'resnet152' not found.*bundled models are: bert_base, "
                                          r"bert_base_layer, .*tiny_cnn"):
        resolve_model_path("resnet152")
    with pytest.raises(NpusimError, match="not found"):
        resolve_model_path("some/dir/tiny_cnn.onnx")


# --------------------------------------------------------------------------- errors


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.onnx"
    with pytest.raises(NpusimError, match=r"not found: '.*nope\.onnx'"):
        load_graph(missing)


def test_directory_is_not_a_model(tmp_path):
    with pytest.raises(NpusimError, match="is not a file"):
        load_graph(tmp_path)


@pytest.mark.parametrize("content", [b"this is not an onnx model\n", bytes(range(256)) * 4, b""])
def test_not_onnx(tmp_path, content):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(content)
    with pytest.raises(NpusimError, match=r"'.*bad\.onnx' is not a valid ONNX model"):
        load_graph(bad)


def test_checker_failure_is_reported(tmp_path):
    # A node reading a tensor nobody produces.
    m = make_model([helper.make_node("Relu", ["ghost"], ["y"], name="r")],
                   [helper.make_tensor_value_info("x", FLOAT, [2])],
                   [helper.make_tensor_value_info("y", FLOAT, [2])])
    with pytest.raises(NpusimError, match=r"node 'r' \(Relu\) reads 'ghost', which no graph "
                                          r"input, initializer or node defines"):
        load_graph(save(m, tmp_path / "m.onnx"))


def test_tensor_without_shape_names_tensor_and_node(tmp_path):
    m = make_model([helper.make_node("Mystery", ["x"], ["y"], name="odd", domain="example.custom")],
                   [helper.make_tensor_value_info("x", FLOAT, [2, 3])],
                   [helper.make_tensor_value_info("y", FLOAT, ["d0", "d1"])])
    m.opset_import.append(helper.make_opsetid("example.custom", 1))
    g = load_graph(save(m, tmp_path / "m.onnx"))
    with pytest.raises(NpusimError, match=r"tensor 'y' produced by node 'odd' \(Mystery\) has "
                                          r"no static shape; its inputs: x \[2, 3\]"):
        g.check_shapes()


def test_opset_newer_than_onnx_knows_is_refused(tmp_path):
    # a future opset's ops may mean something shape inference here does not know; the
    # newest opset onnx defines still loads
    newest = onnx.defs.onnx_opset_version()
    m = make_model([helper.make_node("Relu", ["x"], ["y"])],
                   [helper.make_tensor_value_info("x", FLOAT, [2])],
                   [helper.make_tensor_value_info("y", FLOAT, [2])])
    m.opset_import[0].version = newest
    assert load_graph(save(m, tmp_path / "ok.onnx")).shape("y") == (2,)
    m.opset_import[0].version = newest + 1
    with pytest.raises(NpusimError, match=rf"opset {newest + 1}, newer than the installed onnx "
                                          rf"package knows \(opsets up to {newest}\)"):
        load_graph(save(m, tmp_path / "new.onnx"))


@pytest.mark.parametrize("dim", [None, -1])
def test_a_dim_without_name_or_size_is_bound_as_input_dot_axis(tmp_path, dim):
    # spox writes dims with neither a size nor a name (silero-vad), older paddle2onnx -1
    m = make_model([helper.make_node("Relu", ["x"], ["y"])],
                   [helper.make_tensor_value_info("x", FLOAT, [dim, 4])],
                   [helper.make_tensor_value_info("y", FLOAT, [dim, 4])])
    path = save(m, tmp_path / "m.onnx")
    with pytest.raises(NpusimError, match=r"unbound symbolic dimension\(s\) 'x\.0' \(used by "
                                          r"input 'x'\); pass --dim x\.0=VALUE \(a dim the file "
                                          r"gives no name, or size -1, is named INPUT\.AXIS\)"):
        load_graph(path)
    assert load_graph(path, {"x.0": 6}).shape("y") == (6, 4)
    assert symbolic_dims(path) == (1, ["x.0"])


def _branch_on_rate(tmp_path, rate_type=TensorProto.INT64) -> Path:
    """silero-vad's shape: y = x * 2 when sr == 16000, else x + 1 (the branches differ in
    op, so which one was inlined shows)."""
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"])], "then", [],
                              [helper.make_tensor_value_info("t", FLOAT, [1, 8])])
    else_g = helper.make_graph([helper.make_node("Add", ["x", "two"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", FLOAT, [1, 8])])
    nodes = [helper.make_node("Constant", [], ["two"], value=helper.make_tensor(
                 "two", FLOAT, [], [2.0])),
             helper.make_node("Constant", [], ["rate"], value=helper.make_tensor(
                 "rate", rate_type, [], [16000])),
             helper.make_node("Equal", ["sr", "rate"], ["is16k"]),
             helper.make_node("If", ["is16k"], ["y"], then_branch=then_g, else_branch=else_g)]
    m = make_model(nodes, [helper.make_tensor_value_info("x", FLOAT, [1, 8]),
                           helper.make_tensor_value_info("sr", rate_type, [])],
                   [helper.make_tensor_value_info("y", FLOAT, [1, 8])])
    return save(m, tmp_path / "vad.onnx")


def test_an_input_holding_one_integer_takes_a_value_from_dim(tmp_path):
    path = _branch_on_rate(tmp_path)
    ops = {rate: [n.op_type for n in load_graph(path, {"sr": rate}).nodes
                  if n.op_type != "Identity"] for rate in (16000, 8000)}
    assert ops == {16000: ["Mul"], 8000: ["Add"]}
    with pytest.raises(NpusimError, match=r"no dimension named 'rate'; its symbolic dims are: "
                                          r"none .*; its scalar integer inputs \(a value for "
                                          r"--dim\): sr"):
        load_graph(path, {"rate": 3})
    from npusim.lowering import lower_graph
    from npusim.config import load_config
    with pytest.raises(NpusimError, match=r"If: .* \(a branch on data .* fixed with --dim "
                                          r"NAME=VALUE\)"):
        lower_graph(load_graph(path), load_config("mobile", []))


def test_an_integer_input_value_out_of_its_type_is_refused(tmp_path):
    path = _branch_on_rate(tmp_path, TensorProto.INT16)
    with pytest.raises(NpusimError, match=r"--dim sr=70000: out of range for input 'sr' "
                                          r"\(INT16: -32768 to 32767\)"):
        load_graph(path, {"sr": 70000})


def test_classical_ml_ops_are_named_as_such(tmp_path):
    m = make_model([helper.make_node("Normalizer", ["x"], ["y"], domain="ai.onnx.ml")],
                   [helper.make_tensor_value_info("x", FLOAT, [2, 4])],
                   [helper.make_tensor_value_info("y", FLOAT, [2, 4])])
    m.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    from npusim.lowering import lower_graph
    from npusim.config import load_config
    with pytest.raises(NpusimError, match=r"Normalizer: Normalizer_0 \(classical machine "
                                          r"learning \(ai\.onnx\.ml"):
        lower_graph(load_graph(save(m, tmp_path / "ml.onnx")), load_config("mobile", []))


def test_classical_ml_ops_are_refused_as_soon_as_the_file_is_read(tmp_path):
    # an opset-9 scikit-learn style graph with an unbound batch: the refusal comes before
    # the dims are asked for and before the version converter (a 194 MB tree ensemble took
    # 55 s to reach lowering's refusal); with zero-cost the same file loads on
    m = make_model([helper.make_node("Scaler", ["x"], ["s"], domain="ai.onnx.ml",
                                     offset=[0.0] * 4, scale=[1.0] * 4),
                    helper.make_node("Relu", ["s"], ["y"])],
                   [helper.make_tensor_value_info("x", FLOAT, ["n", 4])],
                   [helper.make_tensor_value_info("y", FLOAT, ["n", 4])])
    m.opset_import[0].version = 9
    m.opset_import.append(helper.make_opsetid("ai.onnx.ml", 1))
    path = save(m, tmp_path / "scaler.onnx")
    import npusim
    with pytest.raises(NpusimError, match=r"^model '.*scaler\.onnx' uses op types npusim "
                                          r"cannot lower:\n  Scaler: Scaler_0 \(classical"):
        npusim.simulate(path, "mobile")
    with pytest.raises(NpusimError, match=r"unbound symbolic dimension"):
        npusim.simulate(path, "mobile", unsupported="zero-cost")


def test_a_function_op_without_a_shape_rule_is_shaped_through_its_body(tmp_path):
    # GreaterOrEqual-12 is a function in onnx 1.23 with no shape rule of its own: its
    # output had the element type only, and the Cast after it no shape
    nodes = [helper.make_node("GreaterOrEqual", ["x", "k"], ["ge"]),
             helper.make_node("Cast", ["ge"], ["y"], to=FLOAT)]
    m = make_model(nodes, [helper.make_tensor_value_info("x", FLOAT, [1, 4])],
                   [helper.make_tensor_value_info("y", FLOAT, [1, 4])],
                   [helper.make_tensor("k", FLOAT, [], [0.5])])
    m.opset_import[0].version = 13
    g = load_graph(save(m, tmp_path / "ge.onnx"))
    assert g.shape("ge") == (1, 4) and g.shape("y") == (1, 4)


# --------------------------------------------------------------------------- IR details


def test_node_names_synthesized_and_unique(tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"], name="act"),
        helper.make_node("Relu", ["b"], ["c"], name="act"),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    m = make_model(nodes, [helper.make_tensor_value_info("x", FLOAT, [4])],
                   [helper.make_tensor_value_info("y", FLOAT, [4])])
    g = load_graph(save(m, tmp_path / "m.onnx"))
    assert [n.name for n in g.nodes] == ["Relu_0", "act", "act_1", "Relu_3"]
    assert g.shape("b") == (4,)


def test_unsorted_graph_is_sorted(tmp_path):
    nodes = [
        helper.make_node("Relu", ["a"], ["y"], name="second"),
        helper.make_node("Relu", ["x"], ["a"], name="first"),
    ]
    m = make_model(nodes, [helper.make_tensor_value_info("x", FLOAT, [3])],
                   [helper.make_tensor_value_info("y", FLOAT, [3])])
    g = load_graph(save(m, tmp_path / "m.onnx"))
    assert [n.name for n in g.nodes] == ["first", "second"]
    assert g.producer("a").name == "first"
    assert [n.name for n in g.consumers("a")] == ["second"]
    assert g.producer("x") is None and g.consumers("y") == []


def test_data_propagation_and_inline_constants(tmp_path):
    # Reshape whose target shape is computed from the (bound) input shape: needs data_prop.
    # The big weight is inline here (no external data) and must still load as shape only.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Concat", ["n", "minus1"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("MatMul", ["flat", "w"], ["y"], name="mm"),
    ]
    inits = [
        helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
        helper.make_tensor("minus1", TensorProto.INT64, [1], [-1]),
        helper.make_tensor("w", FLOAT, [48, 40], [0.5] * (48 * 40)),
    ]
    m = make_model(nodes, [helper.make_tensor_value_info("x", FLOAT, ["batch", 3, 4, 4])],
                   [helper.make_tensor_value_info("y", FLOAT, ["batch", 40])], inits)
    g = load_graph(save(m, tmp_path / "m.onnx"), {"batch": 5})
    assert g.shape("flat") == (5, 48)
    assert g.shape("y") == (5, 40)
    assert g.shape("w") == (48, 40) and g.tensor("w").is_initializer
    assert g.inputs == ["x"]


def test_attrs_are_python_values(tmp_path):
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c", auto_pad="SAME_UPPER",
                            kernel_shape=[3, 3], strides=[2, 2])
    w = helper.make_tensor_value_info("w", FLOAT, [8, 4, 3, 3])
    m = make_model([node], [helper.make_tensor_value_info("x", FLOAT, [1, 4, 9, 9]), w],
                   [helper.make_tensor_value_info("y", FLOAT, ["n", "c", "h", "w"])])
    g = load_graph(save(m, tmp_path / "m.onnx"))
    assert g.nodes[0].attrs == {"auto_pad": "SAME_UPPER", "kernel_shape": [3, 3],
                                "strides": [2, 2]}
    assert isinstance(g.nodes[0].attrs["auto_pad"], str)
    assert g.shape("y") == (1, 8, 5, 5)  # SAME_UPPER: ceil(9 / 2)
    assert g.inputs == ["x", "w"]  # a weight given as a graph input is an input


def test_optional_inputs_kept_as_empty_strings(tmp_path):
    node = helper.make_node("Clip", ["x", "", "hi"], ["y"], name="clip")
    m = make_model([node], [helper.make_tensor_value_info("x", FLOAT, [6])],
                   [helper.make_tensor_value_info("y", FLOAT, [6])],
                   [helper.make_tensor("hi", FLOAT, [], [6.0])])
    g = load_graph(save(m, tmp_path / "m.onnx"))
    assert g.nodes[0].inputs == ["x", "", "hi"]
    assert g.shape("hi") == () and g.tensor("hi").numel == 1


# --------------------------------------------------------------------------- Loop unrolling


def _loop_model(tmp_path, trips, cond_from: str):
    """h <- tanh(h . W) in a Loop; the body's condition: ``pass`` (its input), ``count``
    (iteration + 1 < 3, a constant once unrolled) or ``data`` (sum(h) > 0)."""
    import numpy as np
    from onnx import numpy_helper

    i, c_in, h = (helper.make_tensor_value_info(n, t, s) for n, t, s in (
        ("i", TensorProto.INT64, []), ("c_in", TensorProto.BOOL, []),
        ("h", TensorProto.FLOAT, [1, 8])))
    body_nodes = [helper.make_node("MatMul", ["h", "W"], ["hw"]),
                  helper.make_node("Tanh", ["hw"], ["h2"]),
                  helper.make_node("Identity", ["h2"], ["scan"])]
    if cond_from == "pass":
        body_nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    elif cond_from == "count":
        body_nodes += [helper.make_node("Add", ["i", "one"], ["i1"]),
                       helper.make_node("Less", ["i1", "three"], ["c_out"])]
    else:
        body_nodes += [helper.make_node("ReduceSum", ["h2"], ["s"], keepdims=0),
                       helper.make_node("Greater", ["s", "zero"], ["c_out"])]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(3, np.int64), "three"),
             numpy_helper.from_array(np.array(0, np.float32), "zero")]
    body = helper.make_graph(body_nodes, "body", [i, c_in, h], [
        helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
        helper.make_tensor_value_info("h2", TensorProto.FLOAT, [1, 8]),
        helper.make_tensor_value_info("scan", TensorProto.FLOAT, [1, 8])], inits)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    outer = [numpy_helper.from_array(np.zeros((8, 8), np.float32), "W"),
             numpy_helper.from_array(np.array(True), "cond")]
    if trips is not None:
        outer.append(numpy_helper.from_array(np.array(trips, np.int64), "M"))
    loop = helper.make_node("Loop", ["M" if trips is not None else "", "cond", "x"],
                            ["h_last", "hs"], name="rnn_loop", body=body)
    graph = helper.make_graph([loop], "loop", [x], [
        helper.make_tensor_value_info("h_last", TensorProto.FLOAT, [1, 8]),
        helper.make_tensor_value_info("hs", TensorProto.FLOAT, ["steps", 1, 8])], outer)
    path = tmp_path / f"loop_{cond_from}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("trips,cond_from,steps", [(4, "pass", 4), (None, "count", 3),
                                                   (5, "count", 3)])
def test_a_loop_with_known_iterations_is_unrolled(tmp_path, trips, cond_from, steps):
    """tf2onnx writes a Keras RNN as a Loop over the time steps: with the trip count and
    the condition constant (iteration by iteration), each iteration's body becomes nodes
    of its own, the carried state flowing from one to the next, the scan outputs stacked."""
    from npusim.config import load_config
    from npusim.lowering import lower_graph

    g = load_graph(_loop_model(tmp_path, trips, cond_from))
    ops = [n.op_type for n in g.nodes]
    assert "Loop" not in ops and ops.count("MatMul") == steps
    assert g.shape("hs") == (steps, 1, 8) and g.shape("h_last") == (1, 8)
    prog = lower_graph(g, load_config("mobile", []))
    assert sum(int(info.macs) for info in prog.layers) == steps * 8 * 8


def test_a_loop_on_data_stays_a_loop_and_is_named(tmp_path):
    """A condition computed from data cannot be unrolled: the Loop is the clear
    unsupported-op error, and nothing of the attempt is left in the graph."""
    from npusim.config import load_config
    from npusim.lowering import lower_graph

    g = load_graph(_loop_model(tmp_path, 4, "data"))
    assert [n.op_type for n in g.nodes] == ["Loop"]
    assert not any("iter0" in t for t in g.tensors)
    with pytest.raises(NpusimError, match=r"Loop: rnn_loop \(data-dependent control flow"):
        lower_graph(g, load_config("mobile", []))
