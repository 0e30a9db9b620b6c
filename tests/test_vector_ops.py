"""Vector-unit ops (npusim/lowering/vector.py): every op's vector cycles against its step
list, derived by hand here from the config's lanes*alus and latency table.

A VECTOR instruction of e elements and p passes takes ceil(e / (lanes*alus)) * latency * p
cycles. The gemmini_validation preset has one core and a vector unit of 8 x 1 elements per
pass; the latencies are set to distinct primes so a wrong op in a step list shows.
Shapes are small enough for one tile unless a test says otherwise.
"""

from math import ceil, prod

import onnx
import pytest
from onnx import TensorProto, helper

import npusim
from helpers import weight
from npusim.errors import NpusimError

F, I64, BOOL, F16 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL, TensorProto.FLOAT16

LAT = dict(add=1, sub=2, mul=3, div=5, max=7, min=11, exp=13, log=17, sqrt=19, rsqrt=23,
           recip=29, tanh=31, sigmoid=37, erf=41, gelu=43, pow=47, cast=53, reduce=59)
OVERRIDES = ["memory.type=ideal"] + [f"core.vector.latency.{k}={v}" for k, v in LAT.items()]
R = 32  # dma.request_bytes of gemmini_validation; precision is 1 byte



def _vi(spec):
    name, shape, *dtype = spec
    return helper.make_tensor_value_info(name, dtype[0] if dtype else F, shape)


def model(tmp_path, nodes, inputs, outputs, weights=(), opset=17, domains=(), name="m"):
    g = helper.make_graph(nodes, name, [_vi(s) for s in inputs], [_vi(s) for s in outputs],
                          initializer=[weight(*w) for w in weights])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]
                          + [helper.make_opsetid(d, 1) for d in domains])
    m.ir_version = 9 if opset >= 20 else 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(m, str(path))
    return path


def const(name, value, dtype=I64):
    values = value if isinstance(value, list) else [value]
    dims = [len(values)] if isinstance(value, list) else []
    return helper.make_node("Constant", [], [name], name=f"const_{name}",
                            value=helper.make_tensor(name, dtype, dims, values))


def sim(path, preset="gemmini_validation", extra=()):
    return npusim.simulate(str(path), preset, overrides=OVERRIDES + list(extra))


def busy(r):
    return sum(c["vector_busy_cycles"] for c in r.cores)


def loaded(r):
    return sum(c["bytes_loaded"] for c in r.cores)


def stored(r):
    return sum(c["bytes_stored"] for c in r.cores)


def cost(r, steps):
    """Cycles of (op, elements, passes) steps on r's vector unit, one tile."""
    v = r.config.core.vector
    w = v.lanes * v.alus
    assert v.latency == {**v.latency, **LAT}
    return sum(ceil(e / w) * v.latency[op] * p for op, e, p in steps)


def levels(n):  # ceil(log2 n)
    return (n - 1).bit_length()


def requests(nbytes):
    return ceil(nbytes / R) * R


X = (4, 8, 16)  # 512 elements, 64 passes of 8
E = prod(X)


# --------------------------------------------------------------------------- element-wise

@pytest.mark.parametrize("op,attrs,steps", [
    ("Relu", {}, [("max", 1)]),
    ("Sigmoid", {}, [("sigmoid", 1)]),
    ("Tanh", {}, [("tanh", 1)]),
    ("Erf", {}, [("erf", 1)]),
    ("Sqrt", {}, [("sqrt", 1)]),
    ("Reciprocal", {}, [("recip", 1)]),
    ("Exp", {}, [("exp", 1)]),
    ("Log", {}, [("log", 1)]),
    ("Neg", {}, [("sub", 1)]),
    ("Abs", {}, [("sub", 1), ("max", 1)]),
    ("LeakyRelu", {"alpha": 0.1}, [("mul", 1), ("max", 1)]),
    ("HardSigmoid", {}, [("mul", 1), ("add", 1), ("max", 1), ("min", 1)]),
    ("HardSwish", {}, [("mul", 1), ("add", 1), ("max", 1), ("min", 1), ("mul", 1)]),
    ("IsNaN", {}, [("sub", 1)]),
    ("Floor", {}, [("cast", 1)]),
    ("Sign", {}, [("max", 1)]),
])
def test_unary_op_costs_its_steps_over_every_element(tmp_path, op, attrs, steps):
    path = model(tmp_path, [helper.make_node(op, ["x"], ["y"], name="act", **attrs)],
                 [("x", X)], [("y", X)])
    r = sim(path)
    assert busy(r) == cost(r, [(o, E, p) for o, p in steps])
    assert loaded(r) == E and stored(r) == E  # 512 B: 16 whole requests each way
    assert r.layers[0]["macs"] == 0 and sum(c["macs"] for c in r.cores) == 0
    assert r.layers[0]["cycles"] >= busy(r)


def test_gelu_opset20(tmp_path):
    path = model(tmp_path, [helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")],
                 [("x", X)], [("y", X)], opset=20)
    r = sim(path)
    assert busy(r) == (E // 8) * LAT["gelu"]


@pytest.mark.parametrize("op", ["Silu", "Swish"])
def test_silu_and_swish_op_types(tmp_path, op):
    # not ONNX ops: exporters emit Sigmoid + Mul; custom domains may carry them fused
    path = model(tmp_path, [helper.make_node(op, ["x"], ["y"], domain="com.example")],
                 [("x", X)], [("y", X)], domains=["com.example"])
    r = sim(path)
    assert busy(r) == (E // 8) * (LAT["sigmoid"] + LAT["mul"])


def test_sigmoid_mul_graph_is_one_pass_as_silu_is(tmp_path):
    # an exporter's SiLU (Sigmoid, then Mul by the same x) is one pass of the vector unit
    # (fusion.vector_groups): x loaded once, s never stored, the cost of the fused op
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
             helper.make_node("Mul", ["x", "s"], ["y"], name="mul")]
    r = sim(model(tmp_path, nodes, [("x", X)], [("y", X)]))
    silu = sim(model(tmp_path, [helper.make_node("Silu", ["x"], ["y"], domain="com.example")],
                     [("x", X)], [("y", X)], domains=["com.example"], name="silu"))
    assert busy(r) == busy(silu) == (E // 8) * (LAT["sigmoid"] + LAT["mul"])
    assert [(l["name"], l["fused"]) for l in r.layers] == [("sig", ["mul"])]
    assert loaded(r) == loaded(silu) == E and stored(r) == stored(silu) == E
    assert r.total_cycles == silu.total_cycles


def test_a_gelu_spelled_out_is_one_pass_over_its_input(tmp_path):
    # x * 0.5 * (1 + erf(x / sqrt 2)) as an exporter writes it: five element-wise nodes,
    # one vector pass (fusion.vector_groups): x loaded once, y stored once, every node's
    # steps charged per element; the constants are immediates
    nodes = [const("half", 0.5, F), const("r2", 1.4142135, F), const("one", 1.0, F),
             helper.make_node("Mul", ["x", "half"], ["h"], name="half_x"),
             helper.make_node("Div", ["x", "r2"], ["d"], name="div"),
             helper.make_node("Erf", ["d"], ["e"], name="erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="add"),
             helper.make_node("Mul", ["h", "a"], ["y"], name="mul")]
    r = sim(model(tmp_path, nodes, [("x", X)], [("y", X)]))
    assert [(l["name"], l["fused"]) for l in r.layers] == [
        ("half_x", ["div", "erf", "add", "mul"])]
    assert busy(r) == cost(r, [(o, E, 1) for o in ("mul", "div", "erf", "add", "mul")])
    assert loaded(r) == E and stored(r) == E


def test_a_pass_never_swallows_a_path_that_leaves_it(tmp_path):
    # a -> softmax -> b and a -> b: b reads what the Softmax makes after a, so b cannot run
    # in a's pass (the two would wait for each other); a's output, read by the Softmax, is
    # stored; c = relu(b) does join b's pass
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="a"),
             helper.make_node("Softmax", ["a"], ["s"], axis=-1, name="softmax"),
             helper.make_node("Mul", ["a", "s"], ["b"], name="b"),
             helper.make_node("Relu", ["b"], ["y"], name="c")]
    r = sim(model(tmp_path, nodes, [("x", X)], [("y", X)]))
    assert [(l["name"], l["fused"]) for l in r.layers] == [
        ("a", []), ("softmax", []), ("b", ["c"])]
    for prev, nxt in zip(r.layers, r.layers[1:]):
        assert nxt["start_cycle"] >= prev["end_cycle"]
    assert [l["bytes_stored"] for l in r.layers] == [E, E, E]


def test_a_tensor_read_outside_the_pass_is_stored_by_it(tmp_path):
    # s = sigmoid(x) is read by the Mul in its pass and by a Softmax outside: the pass
    # stores both s and y (a second destination), and loads x once
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
             helper.make_node("Mul", ["x", "s"], ["y"], name="mul"),
             helper.make_node("Softmax", ["s"], ["z"], axis=-1, name="softmax")]
    r = sim(model(tmp_path, nodes, [("x", X)], [("y", X), ("z", X)]))
    assert [(l["name"], l["fused"]) for l in r.layers] == [("sig", ["mul"]), ("softmax", [])]
    assert r.layers[0]["bytes_loaded"] == E and r.layers[0]["bytes_stored"] == 2 * E


def test_cast(tmp_path):
    path = model(tmp_path, [helper.make_node("Cast", ["x"], ["y"], to=F16)],
                 [("x", X)], [("y", X, F16)])
    r = sim(path)
    assert busy(r) == (E // 8) * LAT["cast"]
    assert stored(r) == E


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_op_with_a_bias_loads_the_bias_once_per_tile(tmp_path, op):
    path = model(tmp_path, [helper.make_node(op, ["x", "b"], ["y"], name="bin")],
                 [("x", X)], [("y", X)], [("b", [16])])
    r = sim(path)
    assert busy(r) == (E // 8) * LAT[op.lower()]
    assert loaded(r) == E + R  # x, plus the 16-byte bias in one request
    assert stored(r) == E


def test_binary_broadcast_over_a_middle_axis(tmp_path):
    path = model(tmp_path, [helper.make_node("Mul", ["x", "s"], ["y"])],
                 [("x", X), ("s", [4, 1, 16])], [("y", X)])
    r = sim(path)
    assert busy(r) == (E // 8) * LAT["mul"]
    assert loaded(r) == E + 64  # s is 64 bytes, loaded once


def test_same_operand_twice_is_loaded_once(tmp_path):
    path = model(tmp_path, [helper.make_node("Mul", ["x", "x"], ["y"])], [("x", X)], [("y", X)])
    r = sim(path)
    assert busy(r) == (E // 8) * LAT["mul"] and loaded(r) == E


@pytest.mark.parametrize("exponent,steps,extra_load", [
    (2.0, [("mul", 1)], 0),      # x * x: the exponent is never loaded
    (0.5, [("sqrt", 1)], 0),
    (3.0, [("pow", 1)], 0),      # a general power: the constant exponent is an immediate
])
def test_pow_with_a_constant_exponent(tmp_path, exponent, steps, extra_load):
    nodes = [const("e", exponent, F), helper.make_node("Pow", ["x", "e"], ["y"], name="pow")]
    r = sim(model(tmp_path, nodes, [("x", X)], [("y", X)]))
    assert busy(r) == cost(r, [(o, E, p) for o, p in steps])
    assert loaded(r) == E + extra_load


def test_pow_with_an_unknown_exponent_is_a_pow(tmp_path):
    path = model(tmp_path, [helper.make_node("Pow", ["x", "e"], ["y"])], [("x", X)], [("y", X)],
                 [("e", [])])
    r = sim(path)
    # a constant of one element is an immediate of the instruction: not loaded
    assert busy(r) == (E // 8) * LAT["pow"] and loaded(r) == E


def test_clip_takes_constant_bounds_as_immediates_and_loads_runtime_ones(tmp_path):
    path = model(tmp_path, [helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="relu6")],
                 [("x", X)], [("y", X)], [("lo", []), ("hi", [])])
    r = sim(path)
    assert busy(r) == (E // 8) * (LAT["max"] + LAT["min"])
    assert loaded(r) == E
    path = model(tmp_path, [helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="relu6")],
                 [("x", X), ("lo", ()), ("hi", ())], [("y", X)], name="runtime")
    r = sim(path)
    assert busy(r) == (E // 8) * (LAT["max"] + LAT["min"])
    assert loaded(r) == E + 2 * R  # one request each


def test_where_selects_with_one_pass(tmp_path):
    path = model(tmp_path, [helper.make_node("Where", ["c", "a", "b"], ["y"], name="sel")],
                 [("c", X, BOOL), ("a", X)], [("y", X)], [("b", [16])])
    r = sim(path)
    # three operands for one step: a zero-element join (no cycles) gathers the loads
    assert busy(r) == (E // 8) * LAT["max"]
    assert loaded(r) == 2 * E + R and stored(r) == E


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_variadic_max_min_takes_n_minus_one_passes(tmp_path, op):
    path = model(tmp_path, [helper.make_node(op, ["a", "b", "c"], ["y"])],
                 [("a", X), ("b", X), ("c", X)], [("y", X)])
    r = sim(path)
    assert busy(r) == (E // 8) * LAT[op.lower()] * 2


def test_expand_replicates_with_one_move_pass(tmp_path):
    nodes = [const("shape", [4, 8, 16]), helper.make_node("Expand", ["v", "shape"], ["y"])]
    r = sim(model(tmp_path, nodes, [("v", [8, 1])], [("y", X)]))
    assert busy(r) == (E // 8) * LAT["cast"]
    assert loaded(r) == R and stored(r) == E  # the 8-element input once


def test_batchnorm_is_scale_and_shift(tmp_path):
    shape = (2, 16, 4, 4)
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn")
    path = model(tmp_path, [node], [("x", shape)], [("y", shape)],
                 [("s", [16]), ("b", [16]), ("m", [16]), ("v", [16])])
    r = sim(path)
    assert busy(r) == (512 // 8) * (LAT["mul"] + LAT["add"])
    assert loaded(r) == 512 + 2 * R  # x, and the folded scale and shift vectors
    assert stored(r) == 512


# --------------------------------------------------------------------------- reductions

def reduce_steps(op, rows, L, *row_after):
    """One element pass of the combining op, ceil(log2 L) reduce levels per row, ..."""
    return [(op, rows * L, 1), ("reduce", rows, levels(L))] + [(o, rows, 1) for o in row_after]


@pytest.mark.parametrize("op,combine,after", [
    ("ReduceMean", "add", ["mul"]), ("ReduceMax", "max", []), ("ReduceMin", "min", []),
])
def test_reduce_last_axis(tmp_path, op, combine, after):
    path = model(tmp_path, [helper.make_node(op, ["x"], ["y"], axes=[2], keepdims=1)],
                 [("x", X)], [("y", (4, 8, 1))])
    r = sim(path)
    assert busy(r) == cost(r, reduce_steps(combine, 32, 16, *after))
    assert stored(r) >= 32 and loaded(r) == E


def test_reduce_sum_middle_axis_from_a_constant(tmp_path):
    nodes = [const("axes", [1]), helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)]
    r = sim(model(tmp_path, nodes, [("x", X)], [("y", (4, 16))]))
    # [O, L, I] = [4, 8, 16]: 64 row results, each reducing 8 values
    assert busy(r) == cost(r, reduce_steps("add", 64, 8))
    assert stored(r) >= 64


def test_reduce_axes_inferred_from_shapes_when_unknown(tmp_path):
    path = model(tmp_path, [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)],
                 [("x", (2, 4, 8, 16))], [("y", (2, 1, 1, 16))], [("axes", [2], I64)])
    r = sim(path)
    assert busy(r) == cost(r, reduce_steps("add", 32, 32))


def test_reduce_over_non_adjacent_axes(tmp_path):
    """tf2onnx writes Keras's GroupNormalization as a reduction over [1, 2, 4] of
    [N, H, W, G, C/G] (refused before): a row per kept index of all its reduced values,
    the passes those of the same reduction transposed together."""
    path = model(tmp_path, [helper.make_node("ReduceMax", ["x"], ["y"], axes=[0, 2],
                                             keepdims=0, name="rmax")],
                 [("x", X)], [("y", (8,))])
    r = sim(path)
    assert busy(r) == cost(r, reduce_steps("max", 8, 4 * 16))
    assert loaded(r) == E and stored(r) >= 8
    path = model(tmp_path, [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1, 2, 4],
                                             keepdims=1)],
                 [("x", (1, 6, 6, 4, 2))], [("y", (1, 1, 1, 4, 1))], name="gn")
    r = sim(path)
    assert busy(r) == cost(r, reduce_steps("add", 4, 6 * 6 * 2, "mul"))


def test_global_average_pool(tmp_path):
    shape = (2, 16, 4, 4)
    path = model(tmp_path, [helper.make_node("GlobalAveragePool", ["x"], ["y"])],
                 [("x", shape)], [("y", (2, 16, 1, 1))])
    r = sim(path)
    assert busy(r) == cost(r, reduce_steps("add", 32, 16, "mul"))
    assert loaded(r) == 512 and stored(r) >= 32


def softmax_steps(rows, L):
    T = levels(L)
    return [("max", rows * L, 1), ("reduce", rows, T), ("sub", rows * L, 1),
            ("exp", rows * L, 1), ("add", rows * L, 1), ("reduce", rows, T),
            ("div", rows * L, 1)]


def test_softmax_last_axis(tmp_path):
    path = model(tmp_path, [helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
                 [("x", (16, 64))], [("y", (16, 64))])
    r = sim(path)
    assert busy(r) == cost(r, softmax_steps(16, 64))
    assert loaded(r) == 1024 and stored(r) == 1024


def test_softmax_inner_axis(tmp_path):
    path = model(tmp_path, [helper.make_node("Softmax", ["x"], ["y"], axis=1)],
                 [("x", (2, 8, 4, 4))], [("y", (2, 8, 4, 4))])
    r = sim(path)
    assert busy(r) == cost(r, softmax_steps(2 * 16, 8))


def test_softmax_row_longer_than_the_scratchpad_streams_three_passes(tmp_path):
    # 40000 values per row do not fit half of the 64 KiB scratchpad next to their output
    path = model(tmp_path, [helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
                 [("x", (2, 40000))], [("y", (2, 40000))])
    r = sim(path)
    # same vector work as one tile per row; each row result is one value per group
    assert busy(r) == 2 * cost(r, softmax_steps(1, 40000))
    # statistics pass, exp pass (written out), normalizing pass (read back)
    assert loaded(r) == 3 * 80000 and stored(r) == 2 * 80000


def test_long_reduction_accumulates_in_chunks(tmp_path):
    path = model(tmp_path, [helper.make_node("ReduceSum", ["x"], ["y"], keepdims=1)],
                 [("x", (2, 40000))], [("y", (1, 1))], opset=11)
    r = sim(path)
    # axes absent: all axes; one row of 80000 values, streamed in chunks of whole requests
    assert busy(r) == cost(r, reduce_steps("add", 1, 80000))
    assert loaded(r) == 80000


def test_a_row_op_that_keeps_values_takes_no_prefix():
    """A streamed row's prefix result is written by the first pass and read back by the
    next; a reduction stores only its kept values, so there is nowhere to read it from."""
    from types import SimpleNamespace as NS
    from npusim.lowering.vector import emit_row_layer
    ctx = NS(precision=1, budget=NS(spad_half=1 << 16),
             config=NS(num_cores=1, dma=NS(request_bytes=64)))
    with pytest.raises(ValueError, match="no prefix"):
        emit_row_layer(NS(ctx=ctx), O=1, L=80000, x=0, y=1 << 20, keep=1,
                       prefix=("relu",), op="ReduceSum")


@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_normalization(tmp_path, with_bias):
    ins = ["x", "g", "b"] if with_bias else ["x", "g"]
    node = helper.make_node("LayerNormalization", ins, ["y"], axis=-1, epsilon=1e-5)
    ws = [("g", [64])] + ([("b", [64])] if with_bias else [])
    r = sim(model(tmp_path, [node], [("x", (8, 64))], [("y", (8, 64))], ws))
    rows, L = 8, 64
    el, T = rows * L, levels(L)
    steps = [("add", el, 1), ("reduce", rows, T), ("mul", rows, 1),       # mean
             ("sub", el, 1), ("mul", el, 1), ("add", el, 1),              # (x - mean)^2 summed
             ("reduce", rows, T), ("mul", rows, 1), ("add", rows, 1), ("rsqrt", rows, 1),
             ("mul", el, 1), ("mul", el, 1)] + ([("add", el, 1)] if with_bias else [])
    assert busy(r) == cost(r, steps)
    assert loaded(r) == 512 + 64 * len(ws) and stored(r) == 512


def test_layer_normalization_of_rows_longer_than_the_scratchpad(tmp_path):
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)
    r = sim(model(tmp_path, [node], [("x", (2, 20000))], [("y", (2, 20000))],
                  [("g", [20000]), ("b", [20000])]))
    L, T = 20000, levels(20000)
    per_row = [("add", L, 1), ("reduce", 1, T), ("mul", 1, 1),
               ("sub", L, 1), ("mul", L, 1), ("add", L, 1),
               ("reduce", 1, T), ("mul", 1, 1), ("add", 1, 1), ("rsqrt", 1, 1),
               ("mul", L, 1), ("mul", L, 1), ("add", L, 1)]
    assert busy(r) == 2 * cost(r, per_row)  # the same work as whole rows in one tile
    # mean pass and variance pass read x, the last pass reads (x - mean) back with gamma
    # and beta; the variance pass and the last pass write
    assert loaded(r) == 3 * 40000 + 2 * 2 * 20000 and stored(r) == 2 * 40000


def test_reduction_of_few_rows_splits_the_columns_across_cores(tmp_path):
    path = model(tmp_path, [helper.make_node("ReduceMean", ["x"], ["y"], axes=[0],
                                             keepdims=0)],
                 [("x", (1000, 256))], [("y", (256,))])
    r = sim(path, "mobile")
    # [O, L, I] = [1, 1000, 256]: four groups of 64 columns (a 64-byte request: whole rows
    # split over the cores would leave 64 of them, but a request wide the rows stream in
    # two chunks of half the scratchpad), one group per core
    assert [c["tiles"] for c in r.cores] == [2, 2, 2, 2]
    # rows of 64 one-byte columns a chunk: half the scratchpad less the 64 kept sums
    l = (r.config.core.spad_kib * 1024 // 2 - 64) // 64
    chunks = [(0, l), (l, 1000 - l)]
    assert busy(r) == 4 * sum(cost(r, [("add", 64 * n, 1)]) for _, n in chunks) + 4 * cost(
        r, [("reduce", 64, levels(1000)), ("mul", 64, 1)])
    assert stored(r) >= 256 and loaded(r) == 256000  # every run a whole request


def test_decomposed_layer_norm_costs_each_op(tmp_path):
    """ReduceMean / Sub / Pow / ReduceMean / Add / Sqrt / Div / Mul / Add, as exporters
    write LayerNorm when it is not fused."""
    s = (8, 64)
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1], keepdims=1),
             helper.make_node("Sub", ["x", "m"], ["d"]),
             const("two", 2.0, F), helper.make_node("Pow", ["d", "two"], ["d2"]),
             helper.make_node("ReduceMean", ["d2"], ["v"], axes=[-1], keepdims=1),
             const("eps", 1e-5, F), helper.make_node("Add", ["v", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["n"]),
             helper.make_node("Mul", ["n", "g"], ["ng"]),
             helper.make_node("Add", ["ng", "b"], ["y"])]
    r = sim(model(tmp_path, nodes, [("x", s)], [("y", s)], [("g", [64]), ("b", [64])]))
    el = 512
    steps = (reduce_steps("add", 8, 64, "mul") + [("sub", el, 1), ("mul", el, 1)]
             + reduce_steps("add", 8, 64, "mul") + [("add", 8, 1), ("sqrt", 8, 1)]
             + [("div", el, 1), ("mul", el, 1), ("add", el, 1)])
    assert busy(r) == cost(r, steps)
    vec = [l for l in r.layers if l["op_type"] != "Constant"]
    for prev, nxt in zip(vec, vec[1:]):
        assert nxt["start_cycle"] >= prev["end_cycle"]


# --------------------------------------------------------------------------- pooling

@pytest.mark.parametrize("op,steps", [
    ("MaxPool", [("max", 9)]), ("AveragePool", [("add", 9), ("mul", 1)]),
])
def test_pooling_compares_every_window(tmp_path, op, steps):
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 1, 1], name="pool")
    r = sim(model(tmp_path, [node], [("x", (1, 8, 8, 8))], [("y", (1, 8, 4, 4))]))
    out = 8 * 4 * 4
    assert busy(r) == cost(r, [(o, out, p) for o, p in steps])
    assert loaded(r) == 512 and stored(r) == out  # every input row is in some window


def test_pooling_tiles_rows_across_cores(tmp_path):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    r = sim(model(tmp_path, [node], [("x", (1, 16, 32, 32))], [("y", (1, 16, 16, 16))]),
            "mobile")
    assert all(c["tiles"] > 0 for c in r.cores)
    v = r.config.core.vector
    per_pass = v.lanes * v.alus
    tiles = sum(c["tiles"] for c in r.cores)
    assert busy(r) >= ceil(16 * 16 * 16 / per_pass) * LAT["max"] * 4
    assert busy(r) <= (ceil(16 * 16 * 16 / per_pass) + tiles) * LAT["max"] * 4
    assert stored(r) >= 16 * 16 * 16


@pytest.mark.parametrize("x,kernel,strides,y", [
    ((1, 4, 16), [2], [1], (1, 4, 15)),  # 1-D: every input element in some window
    ((1, 4, 4, 4, 4), [2, 2, 2], [2, 2, 2], (1, 4, 2, 2, 2)),  # 3-D
])
def test_1d_and_3d_pooling_compare_every_window(tmp_path, x, kernel, strides, y):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=kernel, strides=strides)
    r = sim(model(tmp_path, [node], [("x", x)], [("y", y)]))
    assert busy(r) == cost(r, [("max", prod(y), prod(kernel))])
    assert loaded(r) == requests(prod(x)) and stored(r) == requests(prod(y))


@pytest.mark.parametrize("p,steps", [(2, [("mul", 9), ("add", 9), ("sqrt", 1)]),
                                     (1, [("sub", 9), ("max", 9), ("add", 9)])])
def test_lp_pool_costs_powers_sums_and_root(tmp_path, p, steps):
    node = helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 1, 1], p=p)
    r = sim(model(tmp_path, [node], [("x", (1, 8, 8, 8))], [("y", (1, 8, 4, 4))]))
    assert busy(r) == cost(r, [(o, 8 * 4 * 4, k) for o, k in steps])


def test_4d_pooling_is_a_clear_error(tmp_path):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1, 1, 1, 1], name="pool4d")
    with pytest.raises(NpusimError) as e:
        sim(model(tmp_path, [node], [("x", (1, 2, 2, 2, 2, 2))], [("y", (1, 2, 2, 2, 2, 2))]))
    assert "pool4d" in str(e.value) and "1 to 3 spatial axes" in str(e.value)


# --------------------------------------------------------------------------- data movement

def test_concat_copies_each_input_into_place(tmp_path):
    node = helper.make_node("Concat", ["a", "b"], ["y"], axis=1)
    r = sim(model(tmp_path, [node], [("a", (4, 32)), ("b", (4, 96))], [("y", (4, 128))]))
    assert busy(r) == 0
    assert loaded(r) == 512 and stored(r) == 512  # rows of 32 and 96 bytes, request-aligned


def test_split_copies_each_part_out(tmp_path):
    nodes = [const("parts", [32, 96]), helper.make_node("Split", ["x", "parts"], ["a", "b"],
                                                        axis=1)]
    r = sim(model(tmp_path, nodes, [("x", (4, 128))], [("a", (4, 32)), ("b", (4, 96))]))
    assert busy(r) == 0 and loaded(r) == 512 and stored(r) == 512


def test_slice_reads_only_the_box(tmp_path):
    nodes = [const("st", [2]), const("en", [6]), const("ax", [0]),
             helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"])]
    r = sim(model(tmp_path, nodes, [("x", (8, 64))], [("y", (4, 64))]))
    assert busy(r) == 0 and loaded(r) == 256 and stored(r) == 256


def test_slice_with_unknown_starts_reads_the_output_size(tmp_path):
    path = model(tmp_path, [helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"])],
                 [("x", (8, 64))], [("y", (8, 32))],
                 [("st", [1], I64), ("en", [1], I64), ("ax", [1], I64)])
    r = sim(path)
    assert loaded(r) == 256 and stored(r) == 256  # 8 runs of 32 bytes


def test_transpose_is_an_on_chip_move(tmp_path):
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])
    r = sim(model(tmp_path, [node], [("x", (16, 32))], [("y", (32, 16))]))
    assert busy(r) == (512 // 8) * LAT["cast"]
    assert loaded(r) == 512 and stored(r) == 512


def test_channels_last_to_first_reads_whole_rows(tmp_path):
    """NHWC -> NCHW of a 3-channel image (a TF/Keras export's first node): walked in the
    output's order, each tile's source is one byte every 3, a whole 32-byte request per
    element (32x the bytes); walked in the source's order, the tile reads its rows whole
    and stores three planes of whole rows. Four cores: each takes a quarter of the image,
    so no tile holds a whole channel plane."""
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[0, 3, 1, 2])
    r = sim(model(tmp_path, [node], [("x", (1, 24, 32, 3))], [("y", (1, 3, 24, 32))]),
            extra=["num_cores=4"])
    assert loaded(r) == 24 * 32 * 3 and stored(r) == 24 * 32 * 3
    assert busy(r) == (24 * 32 * 3 // 8) * LAT["cast"]


@pytest.mark.parametrize("perm_in", [((0, 4, 2, 3, 1), (1, 64, 1, 64, 32), (1, 32, 1, 64, 64)),
                                     ((0, 4, 2, 3, 1), (1, 32, 1, 64, 64), (1, 64, 1, 64, 32))])
def test_a_transpose_contiguous_along_other_axes_on_each_side_moves_its_bytes(tmp_path,
                                                                              perm_in):
    """A 32-channel NHWC <-> NCHW (rivaGAN's 5-D form): the source is contiguous along one
    axis, the output along another. Walked in either side's order, the other side moves
    runs of one element (four times the bytes in 32-byte requests); a walk with both axes
    innermost (the channels whole, 64 of the other) moves whole runs on both sides."""
    perm, x, y = perm_in
    node = helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))
    r = sim(model(tmp_path, [node], [("x", x)], [("y", y)]), extra=["num_cores=4"])
    assert loaded(r) == stored(r) == prod(x)
    assert busy(r) == (prod(x) // 8) * LAT["cast"]


def test_a_square_transpose_is_walked_in_blocks_of_whole_requests(tmp_path):
    """1024 x 1024 on `mobile` (64-byte requests, 32 KiB for a tile's two boxes): a tile of
    whole rows on one side holds 16 of them, so the other side read 16-byte pieces of
    64-byte requests (4 MiB for 1 MiB); blocks of 64 x 64 read and write whole requests."""
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])
    r = npusim.simulate(str(model(tmp_path, [node], [("x", (1024, 1024))],
                                  [("y", (1024, 1024))])), "mobile")
    assert loaded(r) == stored(r) == 1024 * 1024


def test_head_split_transpose(tmp_path):
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1, 3])
    r = sim(model(tmp_path, [node], [("x", (2, 16, 4, 32))], [("y", (2, 4, 16, 32))]))
    assert busy(r) == (4096 // 8) * LAT["cast"]
    assert loaded(r) == 4096 and stored(r) == 4096


def test_gather_embedding_loads_the_indices_then_the_rows(tmp_path):
    node = helper.make_node("Gather", ["table", "ids"], ["y"], axis=0, name="embed")
    r = sim(model(tmp_path, [node], [("ids", (2, 5), I64)], [("y", (2, 5, 16))],
                  [("table", [100, 16])]))
    assert busy(r) == 0
    # 10 indices (one request), then 10 rows of 16 bytes spread over the table (one
    # request each), then the 160 gathered bytes stored contiguously
    assert loaded(r) == R + 10 * R
    assert stored(r) == 160
    assert r.layers[0]["bytes_loaded"] == loaded(r)


@pytest.mark.parametrize("rows", [64, 4096])
def test_gather_from_a_small_table_runs_on_chip(tmp_path, rows):
    """200 indices into a table of 4-byte rows: the DMA gather moves a whole 32-byte request
    per row (6,400 B). A 64-row table (256 B) is loaded once and gathered on chip (a move
    pass over the 800 output elements); a 4,096-row table (16 KiB) is not worth loading."""
    node = helper.make_node("Gather", ["table", "ids"], ["y"], axis=0, name="lookup")
    r = sim(model(tmp_path, [node], [("ids", (200,), I64)], [("y", (200, 4))],
                  [("table", [rows, 4])]))
    assert stored(r) == 800
    if rows == 64:
        assert loaded(r) == 256 + requests(200)
        assert busy(r) == (800 // 8) * LAT["cast"]
    else:
        assert loaded(r) == requests(200) + 200 * R
        assert busy(r) == 0


def test_more_indices_than_rows_walk_the_whole_table(tmp_path):
    """300 indices into a 64-row table: four passes over every row, then the other 44
    spread over it (here the first 44 rows, V // 44 = 1 apart): each row is read 4 or 5
    times. (Every index read row 0 before: one DRAM row, always a hit.)"""
    from collections import Counter

    from npusim.config import load_config
    from npusim.frontend import load_graph
    from npusim.kernels import isa
    from npusim.lowering import lower_graph

    node = helper.make_node("Gather", ["table", "ids"], ["y"], axis=0, name="embed")
    path = model(tmp_path, [node], [("ids", (3, 100), I64)], [("y", (3, 100, 512))],
                 [("table", [64, 512])])
    prog = lower_graph(load_graph(path), load_config("mobile", []))
    rows = []  # the table rows every load reads (a run of whole 512-byte rows each)
    for t in prog.tile:
        first = t[isa.T_INST_START]
        for i in prog.inst[first:first + t[isa.T_INST_LEN]]:
            if i[isa.I_OP] != isa.OP_MVIN or i[isa.I_RUN_BYTES] % 512:
                continue  # the index loads
            base = t[isa.T_BASE0 + i[isa.I_SLOT]] + i[isa.I_OFFSET]
            for o in range(i[isa.I_N_OUTER]):
                for k in range(i[isa.I_N_INNER]):
                    a = base + o * i[isa.I_OUTER_STRIDE] + k * i[isa.I_INNER_STRIDE]
                    rows += range(a // 512, a // 512 + i[isa.I_RUN_BYTES] // 512)
    reads = Counter(r - min(rows) for r in rows)
    assert sorted(reads) == list(range(64))
    assert [reads[r] for r in range(64)] == [5] * 44 + [4] * 20


def test_index_walks_cover_the_table_evenly():
    from npusim.lowering.vector import index_walks

    # 10 indices (2 x 5) into 100 rows: 10 rows apart, in the indices' order
    assert index_walks([2, 5], 100) == [([2, 5], [5, 1], [50, 10], 0)]
    # 300 into 64: four passes over the table from its first row, then 44 rows one apart
    assert index_walks([3, 100], 64) == [([4, 64], [64, 1], [0, 1], 0),
                                         ([44], [1], [1], 256)]
    # 128 into 64: two whole passes, nothing left
    assert index_walks([128], 64) == [([2, 64], [64, 1], [0, 1], 0)]
    # one index (a scalar): row 0
    assert index_walks([], 7) == [([], [], [], 0)]


def test_gather_of_one_index_along_an_inner_axis(tmp_path):
    nodes = [const("i", 0), helper.make_node("Gather", ["x", "i"], ["y"], axis=1)]
    r = sim(model(tmp_path, nodes, [("x", (4, 8, 32))], [("y", (4, 32))]))
    assert stored(r) == 128 and loaded(r) >= 128


# --------------------------------------------------------------------------- layers, tiles

def test_matmul_bias_relu_softmax_run_in_order(tmp_path):
    # the bias is a graph input here, so the Add is not folded into the MatMul's output
    # path: it is a vector pass of its own, and the Relu is one more step of that pass
    # (fusion.vector_groups): three layers, each starting after the one before
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
             helper.make_node("Relu", ["hb"], ["a"], name="relu"),
             helper.make_node("Softmax", ["a"], ["y"], axis=-1, name="softmax")]
    r = sim(model(tmp_path, nodes, [("x", (16, 32)), ("b", (64,))], [("y", (16, 64))],
                  [("w", [32, 64])]))
    names = [l["name"] for l in r.layers]
    assert names == ["mm", "bias", "softmax"]
    assert r.layers[1]["fused"] == ["relu"]
    # the pass stores a once, at the layer's precision (the Relu's own pass is gone)
    assert r.layers[1]["bytes_stored"] == 16 * 64 * r.layers[1]["precision"]
    for prev, nxt in zip(r.layers, r.layers[1:]):
        assert nxt["start_cycle"] >= prev["end_cycle"]
    assert r.layers[0]["macs"] == 16 * 32 * 64 == sum(c["macs"] for c in r.cores)
    el = 16 * 64
    assert busy(r) == cost(r, [("add", el, 1), ("max", el, 1)] + softmax_steps(16, 64))
    assert r.total_cycles >= r.layers[-1]["end_cycle"]


def test_matmul_with_a_constant_bias_and_relu_fuses_them_before_the_softmax(tmp_path):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
             helper.make_node("Relu", ["hb"], ["a"], name="relu"),
             helper.make_node("Softmax", ["a"], ["y"], axis=-1, name="softmax")]
    r = sim(model(tmp_path, nodes, [("x", (16, 32))], [("y", (16, 64))],
                  [("w", [32, 64]), ("b", [64])]))
    assert [l["name"] for l in r.layers] == ["mm", "softmax"]
    assert r.layers[0]["fused"] == ["bias", "relu"]
    assert r.layers[1]["start_cycle"] >= r.layers[0]["end_cycle"]
    assert busy(r) == cost(r, softmax_steps(16, 64))


def test_a_constant_scale_after_a_matmul_is_applied_on_the_way_out(tmp_path):
    # an attention score's 1/sqrt(d): a Div by a constant scalar rides in the MatMul's
    # output stage (as does a Mul by one value per output column); a Div of a constant by
    # the result, a runtime scale and a scale after an activation are vector passes
    def layers(second, weights=(), inputs=()):
        nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), *second,
                 helper.make_node("Softmax", ["s"], ["y"], axis=-1, name="softmax")]
        r = sim(model(tmp_path, nodes, [("x", (16, 32)), *inputs], [("y", (16, 64))],
                      [("w", [32, 64]), *weights]))
        return r, [(l["name"], l["fused"]) for l in r.layers]

    r, got = layers([helper.make_node("Div", ["h", "c"], ["s"], name="scale")], [("c", [])])
    assert got == [("mm", ["scale"]), ("softmax", [])]
    assert busy(r) == cost(r, softmax_steps(16, 64))
    _, got = layers([helper.make_node("Mul", ["c", "h"], ["s"], name="scale")], [("c", [64])])
    assert got == [("mm", ["scale"]), ("softmax", [])]
    for second, weights, inputs in (
            ([helper.make_node("Div", ["c", "h"], ["s"], name="scale")], [("c", [])], ()),
            ([helper.make_node("Mul", ["h", "c"], ["s"], name="scale")], (), [("c", ())]),
            ([helper.make_node("Mul", ["h", "c"], ["s"], name="scale")], [("c", [16, 64])], ()),
            ([helper.make_node("Relu", ["h"], ["a"], name="relu"),
              helper.make_node("Mul", ["a", "c"], ["s"], name="scale")], [("c", [])], ())):
        r, got = layers(second, weights, inputs)
        assert ("scale", []) in got, got


def test_a_product_of_the_result_with_itself_is_a_layer_of_its_own(tmp_path):
    # RWKV's squared ReLU (torch.square(relu(k W))) reads the result twice: not a bias or a
    # scale on the way out (the planner took the second operand for a constant, found none
    # and stopped on a tensor named ''), but a vector pass; so are x + x and x / x
    for op, vop in (("Mul", "mul"), ("Add", "add"), ("Div", "div")):
        nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                 helper.make_node(op, ["h", "h"], ["y"], name="self")]
        r = sim(model(tmp_path, nodes, [("x", (16, 32))], [("y", (16, 64))], [("w", [32, 64])]))
        assert [(l["name"], l["fused"]) for l in r.layers] == [("mm", []), ("self", [])]
        assert r.layers[0]["macs"] == 16 * 32 * 64
        assert busy(r) == cost(r, [(vop, 16 * 64, 1)])


def test_every_core_gets_work_and_the_cost_does_not_depend_on_the_tiling(tmp_path):
    s = (256, 1024)  # 256 Ki elements: many tiles of whole requests on mobile's 4 cores
    path = model(tmp_path, [helper.make_node("Add", ["x", "b"], ["y"])],
                 [("x", s)], [("y", s)], [("b", [1024])])
    r = sim(path, "mobile")
    assert all(c["tiles"] > 0 and c["vector_busy_cycles"] > 0 for c in r.cores)
    assert busy(r) == cost(r, [("add", prod(s), 1)])
    assert stored(r) == prod(s)
    spad_half = r.config.core.spad_kib * 1024 // 2
    tiles = sum(c["tiles"] for c in r.cores)
    # each tile holds its slice of x, the output slice and the bias: within half the spad
    assert 2 * prod(s) / tiles + 1024 <= spad_half


def test_constant_is_free(tmp_path):
    nodes = [const("c", [1, 2, 3, 4], F), helper.make_node("Add", ["x", "c"], ["y"])]
    r = sim(model(tmp_path, nodes, [("x", (2, 4))], [("y", (2, 4))]))
    # folded at load time: its value sits in DRAM like a weight, no layer, no cycles
    assert [layer["op_type"] for layer in r.layers] == ["Add"]
    assert busy(r) == LAT["add"]


def test_training_batchnorm_is_a_clear_error(tmp_path):
    shape = (2, 4, 3, 3)
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"],
                            ["y", "rm", "rv"], name="bn_train", training_mode=1)
    path = model(tmp_path, [node], [("x", shape)],
                 [("y", shape), ("rm", (4,)), ("rv", (4,))],
                 [("s", [4]), ("b", [4]), ("m", [4]), ("v", [4])])
    with pytest.raises(NpusimError) as e:
        sim(path)
    assert "bn_train" in str(e.value) and "training" in str(e.value)


def test_skip_ahead_gives_the_same_cycles_on_dram(tmp_path):
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
             helper.make_node("Where", ["c", "e", "z"], ["y"], name="select")]
    path = model(tmp_path, nodes, [("ids", (2, 50), I64), ("c", (2, 50, 16), BOOL)],
                 [("y", (2, 50, 16))], [("table", [1000, 16]), ("z", [16])])
    a = npusim.simulate(str(path), "mobile", skip=True)
    b = npusim.simulate(str(path), "mobile", skip=False)
    assert a.total_cycles == b.total_cycles and a.layers == b.layers


@pytest.mark.parametrize("preset", ["mobile", "server"])
def test_global_average_pool_streams_channels_a_request_wide(tmp_path, preset):
    """GlobalAveragePool reads the map channels-last. Whole rows of 3,136 pixels would
    leave room for 10 channels on `mobile` (10-byte runs, each a 64-byte request; 7.2x the
    traffic): the emitter streams the pixels in chunks of whole requests of channels
    instead, so it loads exactly the map's bytes, as ReduceMean over the same axes does
    (one pass: the same traffic and vector work, cycles within 5% on `mobile` where the
    tile counts are alike; `server`'s 256-byte request keeps 128 channels a tile, so two
    of its four cores share the map and the bound there is 1.5x)."""
    shape = [1, 256, 56, 56]
    gap = model(tmp_path, [helper.make_node("GlobalAveragePool", ["x"], ["y"], name="p")],
                [("x", shape)], [("y", [1, 256, 1, 1])], name="gap")
    mean = model(tmp_path, [helper.make_node("ReduceMean", ["x"], ["y"], name="p",
                                             axes=[2, 3])],
                 [("x", shape)], [("y", [1, 256, 1, 1])], name="mean")
    a, b = npusim.simulate(str(gap), preset), npusim.simulate(str(mean), preset)
    prec = a.config.precision
    loaded = [sum(c["bytes_loaded"] for c in r.cores) for r in (a, b)]
    assert loaded[0] == loaded[1] == prod(shape) * prec  # every DMA run whole requests
    bound = 1.05 if preset == "mobile" else 1.5
    assert a.total_cycles <= bound * b.total_cycles
