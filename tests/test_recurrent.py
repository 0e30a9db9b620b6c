"""LSTM, GRU and RNN lowered step by step (``npusim/lowering/recurrent.py``): MACs, the
layers of each step, the order of a reverse direction, the cell's cost from the
element-wise table, and a clear error for an activation npusim does not know."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import npusim
from npusim.config import load_config
from npusim.errors import NpusimError
from npusim.frontend import load_graph
from npusim.lowering import lower_graph
from npusim.lowering.recurrent import cell_steps
from npusim.lowering.vector import ELEMENTWISE

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def recurrent_model(tmp_path, op, S=5, B=2, I=24, H=16, direction="forward", bias=True,
                    outputs=("Y",), **attrs):
    D = 2 if direction == "bidirectional" else 1
    G = GATES[op]
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [S, B, I])
    inits = [numpy_helper.from_array(np.zeros((D, G * H, I), np.float32), "W"),
             numpy_helper.from_array(np.zeros((D, G * H, H), np.float32), "R")]
    ins = ["X", "W", "R"]
    if bias:
        inits.append(numpy_helper.from_array(np.zeros((D, 2 * G * H), np.float32), "B"))
        ins.append("B")
    names = {"Y": "Y", "Y_h": "Y_h", "Y_c": "Y_c"}
    node_outs = [names[o] if o in outputs else "" for o in ("Y", "Y_h", "Y_c")[:3 if op ==
                                                                             "LSTM" else 2]]
    while node_outs and not node_outs[-1]:
        node_outs.pop()
    shapes = {"Y": [S, D, B, H], "Y_h": [D, B, H], "Y_c": [D, B, H]}
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs]
    node = helper.make_node(op, ins, node_outs, name="rnn", hidden_size=H,
                            direction=direction, **attrs)
    graph = helper.make_graph([node], "rnn_net", [x], outs, inits)
    path = tmp_path / f"{op}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def lowered(path):
    return lower_graph(load_graph(path), load_config("mobile", []))


@pytest.mark.parametrize("op,attrs,per_step", [
    ("LSTM", {}, 2), ("RNN", {}, 2), ("GRU", {"linear_before_reset": 1}, 2),
    ("GRU", {}, 4),  # without linear_before_reset: a second GEMM and a second vector layer
])
def test_macs_and_layers_per_step(tmp_path, op, attrs, per_step):
    """MACs are S*B*G*H*(I+H) per direction (the unrolled graph's count); each direction
    is one input projection, then the same layers every step, then one join layer."""
    S, B, I, H = 5, 2, 24, 16
    for direction, D in (("forward", 1), ("bidirectional", 2)):
        prog = lowered(recurrent_model(tmp_path, op, S, B, I, H, direction, **attrs))
        G = GATES[op]
        assert sum(int(info.macs) for info in prog.layers) == D * S * B * G * H * (I + H)
        names = [info.name for info in prog.layers]
        assert len(names) == D * (1 + per_step * S) + 1
        assert names[-1] == "rnn"  # the join: Y is complete after it


def test_reverse_direction_walks_the_steps_backwards(tmp_path):
    prog = lowered(recurrent_model(tmp_path, "LSTM", S=4, direction="bidirectional"))
    names = [info.name for info in prog.layers]
    forward = [n for n in names if n.startswith("rnn/forward/t") and n.endswith("/cell")]
    reverse = [n for n in names if n.startswith("rnn/reverse/t") and n.endswith("/cell")]
    assert forward == [f"rnn/forward/t{t}/cell" for t in range(4)]
    assert reverse == [f"rnn/reverse/t{t}/cell" for t in (3, 2, 1, 0)]


def test_state_outputs_are_copied_only_when_read(tmp_path):
    """Y_h and Y_c are graph outputs here: each gets a copy layer; without them, none."""
    with_states = lowered(recurrent_model(tmp_path, "LSTM", outputs=("Y", "Y_h", "Y_c")))
    plain = lowered(recurrent_model(tmp_path, "LSTM", outputs=("Y",)))
    assert len(with_states.layers) == len(plain.layers) + 2
    assert [i.name for i in with_states.layers[-2:]] == ["rnn/Y_h", "rnn/Y_c"]


def test_cell_costs_come_from_the_element_wise_table():
    """An LSTM cell is 3 sigmoids (i, o, f), 2 tanh (candidate, c), 3 multiplies and one
    add per hidden element; a GRU cell with linear_before_reset 2 adds and 2 sigmoids (z,
    r), then r*HR_n, + XW_n, tanh, and h = n + z*(h_prev - n)."""
    from npusim.frontend.graph import Node

    def passes(steps):
        out = {}
        for op, p in steps:
            out[op] = out.get(op, 0) + p
        return out

    lstm = Node("l", "LSTM", inputs=["X", "W", "R"])
    assert passes(cell_steps(lstm, 16)[0]) == {"sigmoid": 3, "tanh": 2, "mul": 3, "add": 1}
    gru = Node("g", "GRU", inputs=["X", "W", "R"], attrs={"linear_before_reset": 1})
    assert passes(cell_steps(gru, 16)[0]) == {"add": 4, "sigmoid": 2, "mul": 2, "tanh": 1,
                                              "sub": 1}
    relu_rnn = Node("r", "RNN", inputs=["X", "W", "R"], attrs={"activations": ["Relu"]})
    assert cell_steps(relu_rnn, 16) == [ELEMENTWISE["Relu"]]


def test_steps_run_one_after_another(tmp_path):
    """Each step waits for the one before: doubling the sequence adds the same time per
    step (a cell that did not wait would overlap the steps)."""
    short = npusim.simulate(str(recurrent_model(tmp_path, "GRU", S=3, linear_before_reset=1)),
                            "mobile")
    long = npusim.simulate(str(recurrent_model(tmp_path, "GRU", S=6, linear_before_reset=1)),
                           "mobile")
    steps = {r["name"]: r for r in long.layers}
    for t in range(1, 6):
        assert steps[f"rnn/t{t}/gemm"]["start_cycle"] >= steps[f"rnn/t{t - 1}/cell"][
            "end_cycle"]
    assert long.total_cycles > short.total_cycles


def test_an_unknown_activation_is_a_clear_error(tmp_path):
    path = recurrent_model(tmp_path, "RNN", activations=["Sin"])
    with pytest.raises(NpusimError, match=r"RNN 'rnn': activation 'Sin'.*supported: Affine"):
        lowered(path)


def test_dynamic_quantize_lstm_runs_its_gemms_in_int8(tmp_path):
    """ONNX Runtime's DynamicQuantizeLSTM (int8 W [D, I, 4H] and R [D, H, 4H], scales and
    zero points after the LSTM's inputs) on server (2 bytes): the LSTM's layers and MACs;
    its GEMMs move what they move when the whole config is 1 byte wide (they compute in
    int8), its cells what the float LSTM's cells move on server (they stay float)."""
    S, B, I, H = 5, 2, 24, 16
    I8, U8, F = TensorProto.INT8, TensorProto.UINT8, TensorProto.FLOAT
    scalars = ["W_scale", "W_zero_point", "R_scale", "R_zero_point"]
    node = helper.make_node("DynamicQuantizeLSTM", ["X", "W", "R", "B", "", "", "", ""]
                            + scalars, ["Y"], name="rnn", domain="com.microsoft", hidden_size=H)
    ins = [helper.make_tensor_value_info("X", F, [S, B, I]),
           helper.make_tensor_value_info("W", I8, [1, I, 4 * H]),
           helper.make_tensor_value_info("R", I8, [1, H, 4 * H]),
           helper.make_tensor_value_info("B", F, [1, 8 * H])] + \
        [helper.make_tensor_value_info(n, I8 if "zero" in n else F, [1]) for n in scalars]
    graph = helper.make_graph([node], "q", ins,
                              [helper.make_tensor_value_info("Y", F, [S, 1, B, H])])
    path = tmp_path / "q.onnx"
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("com.microsoft", 1)])
    onnx.save(m, str(path))
    ideal = ["memory.type=ideal"]
    q2 = npusim.simulate(str(path), "server", overrides=ideal)
    q1 = npusim.simulate(str(path), "server", overrides=ideal + ["precision=1"])
    f2 = npusim.simulate(str(recurrent_model(tmp_path, "LSTM", S, B, I, H)), "server",
                         overrides=ideal)
    assert [l["macs"] for l in q2.layers] == [l["macs"] for l in f2.layers]
    assert {l["op_type"] for l in q2.layers} == {"DynamicQuantizeLSTM"}

    def moved(layer):
        return layer["bytes_loaded"], layer["bytes_stored"], layer["vector_cycles"]

    gemms = 0
    for a, a1, b in zip(q2.layers, q1.layers, f2.layers):
        if a["macs"]:  # in int8 on a 2-byte config: as on a 1-byte one
            gemms += 1
            assert a["precision"] == 1 and moved(a) == moved(a1)
        elif a["name"] != "rnn":  # the cells in float: as the float LSTM's
            assert moved(a) == moved(b)
    assert gemms == S + 1
