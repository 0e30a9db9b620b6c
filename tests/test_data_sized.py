"""Ops whose output size depends on the data (NonZero, Compress, Unique, NonMaxSuppression):
the count given as a dim (frontend/data_sized.py), its bounds and errors, and each op's
vector cycles against its step list (lowering/data_sized.py), with test_vector_ops.py's
conventions: the gemmini_validation preset (one core, 8 elements per pass, ideal memory),
distinct-prime latencies, one tile."""

from math import ceil

import pytest
from onnx import TensorProto, helper

import npusim
from npusim.errors import NpusimError
from npusim.frontend import data_sized_dims, load_graph
from test_vector_ops import BOOL, F, I64, LAT, OVERRIDES, busy, const, model, stored

X = (4, 8, 16)


def sim(path, dims, extra=()):
    return npusim.simulate(str(path), "gemmini_validation", overrides=OVERRIDES + list(extra),
                           dims=dims)


def passes(elements, op, times=1):
    return ceil(elements / 8) * LAT[op] * times


def levels(n):
    return (n - 1).bit_length()


def nonzero_model(tmp_path):
    node = helper.make_node("NonZero", ["x"], ["nz"], name="find")
    return model(tmp_path, [node], [("x", X)], [("nz", (3, "n"), I64)])


def nms_model(tmp_path, boxes=32, classes=2, centre=0, max_out=True):
    inputs = ["b", "s", "max_out", "iou", "score"] if max_out else ["b", "s"]
    nodes = [const("max_out", [8]), const("iou", [0.5], F), const("score", [0.1], F),
             helper.make_node("NonMaxSuppression", inputs, ["sel"], name="nms",
                              center_point_box=centre)]
    return model(tmp_path, nodes, [("b", (1, boxes, 4)), ("s", (1, classes, boxes))],
                 [("sel", ("n", 3), I64)])


# --------------------------------------------------------------------------- front end

def test_an_unbound_count_names_the_dim_to_give_and_its_range(tmp_path):
    with pytest.raises(NpusimError, match=r"how many elements are nonzero.*--dim nz=N "
                                          r"\(1 <= N <= 512\)"):
        sim(nonzero_model(tmp_path), None)


def test_missing_counts_come_before_the_shape_arithmetic_on_them(tmp_path):
    """A MoE's expert loop: shape arithmetic on NonZero's output cannot be folded without
    its count; the error asks for the counts (all of them), not for unsupported Shape ops."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="find"),
             helper.make_node("Shape", ["nz"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["z"]),
             helper.make_node("NonZero", ["x"], ["nz2"], name="find2")]
    path = model(tmp_path, nodes, [("x", X)], [("z", (3, "n")), ("nz2", (3, "m"), I64)])
    with pytest.raises(NpusimError) as err:
        sim(path, None)
    message = str(err.value)
    assert message.endswith("--dim nz=N (1 <= N <= 512), or every such size at once with "
                            "--dim '*=N'; also unbound: --dim nz2=N")
    assert "cannot lower" not in message


def test_a_count_above_what_the_inputs_allow_is_refused(tmp_path):
    with pytest.raises(NpusimError, match=r"--dim nz=513: NonZero 'find' keeps at most 512"):
        sim(nonzero_model(tmp_path), {"nz": 513})


def test_counts_are_dims_the_model_takes(tmp_path):
    path = nonzero_model(tmp_path)
    assert data_sized_dims(path) == ["nz", "*"]  # and '*': all of them at once
    with pytest.raises(NpusimError, match="sizes of its data-sized nodes: nz"):
        load_graph(path, {"n": 3})


def test_a_sweep_takes_counts_as_dims(tmp_path):
    from test_sweep import sweep_cli, write

    path = nonzero_model(tmp_path)
    sweep = write(tmp_path / "s.toml", f"[workload]\nmodel = '{path}'\n"
                                       "[axes]\ndim.nz = [10, 20]\n")
    res = sweep_cli(str(sweep), "--out", str(tmp_path / "s.h5"), "--dry-run")
    assert res.exit_code == 0, res.output
    assert "2 points" in res.output
    sweep = write(tmp_path / "s.toml", f"[workload]\nmodel = '{path}'\n[axes]\ndim.zz = [1]\n")
    res = sweep_cli(str(sweep), "--out", str(tmp_path / "s.h5"), "--dry-run")
    assert res.exit_code == 2 and "data-sized nodes: nz" in res.output, res.output


def test_one_count_for_every_data_sized_node(tmp_path):
    """--dim '*=N': every data-sized node without a count of its own keeps N, or all its
    inputs allow when that is fewer; a count of its own still wins."""
    nodes = [helper.make_node("NonZero", ["x"], ["a"], name="big"),
             helper.make_node("NonZero", ["y"], ["b"], name="small"),
             helper.make_node("NonZero", ["x"], ["c"], name="own")]
    path = model(tmp_path, nodes, [("x", X), ("y", (2, 3))],
                 [("a", (3, "n")), ("b", (2, "m")), ("c", (3, "k"))])
    g = load_graph(path, {"*": 40, "c": 7})
    assert [g.shape(t) for t in "abc"] == [(3, 40), (2, 6), (3, 7)]
    with pytest.raises(NpusimError, match="has no dimension named '\\*'"):
        load_graph(tiny := model(tmp_path, [helper.make_node("Relu", ["x"], ["r"])],
                                 [("x", X)], [("r", X)], name="plain"), {"*": 4})
    assert data_sized_dims(tiny) == []


def test_a_long_list_of_missing_counts_is_cut_short(tmp_path):
    """A detector has a NonZero per level and class (SSDlite: 182): the error names the
    first, five more, how many else, and the one flag that binds them all."""
    nodes = [helper.make_node("NonZero", ["x"], [f"nz{i}"], name=f"find{i}") for i in range(9)]
    path = model(tmp_path, nodes, [("x", X)], [(f"nz{i}", (3, f"n{i}"), I64) for i in range(9)])
    with pytest.raises(NpusimError) as err:
        sim(path, None)
    message = str(err.value)
    assert "--dim nz0=N (1 <= N <= 512), or every such size at once with --dim '*=N'" in message
    assert message.endswith("also unbound: --dim nz1=N --dim nz2=N --dim nz3=N --dim nz4=N "
                            "--dim nz5=N and 3 more")


def test_a_count_inside_an_if_branch(tmp_path):
    """Faster R-CNN's box selection is a NonMaxSuppression in an If whose condition folds
    (its inputs' sizes are known): the count is named after the branch's tensor, asked for,
    and taken."""
    then = helper.make_graph([helper.make_node("NonZero", ["x"], ["nz"], name="find")], "then",
                             [], [helper.make_tensor_value_info("nz", I64, None)])
    other = helper.make_graph([const("e", [0, 0, 0])], "else", [],
                              [helper.make_tensor_value_info("e", I64, None)])
    nodes = [helper.make_node("Size", ["x"], ["n"]), const("zero", 0),
             helper.make_node("Greater", ["n", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    path = model(tmp_path, nodes, [("x", X)], [("y", (3, "k"), I64)])
    assert data_sized_dims(path) == ["nz", "*"]
    with pytest.raises(NpusimError, match=r"--dim nz=N \(1 <= N <= 512\)"):
        sim(path, None)
    assert load_graph(path, {"nz": 9}).shape("y") == (3, 9)


def test_counts_inside_an_unrolled_loop(tmp_path):
    """Keras's map_fn over NMS: a data-sized node in a Loop's body. The front end unrolls
    the loop (names ``loop/iter<i>/...``); each iteration's count is a dim of its own, and
    '*' binds them all (both were refused as dims the model has not)."""
    I = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["nz"], name="find"),
         helper.make_node("Cast", ["nz"], ["nzf"], to=F),
         helper.make_node("ReduceSum", ["nzf"], ["s"], keepdims=0),
         helper.make_node("Add", ["acc", "s"], ["acc_out"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])], "body",
        [I("i", I64, []), I("cond", BOOL, []), I("acc", F, [])],
        [I("cond_out", BOOL, []), I("acc_out", F, [])])
    nodes = [const("trips", 2), helper.make_node("Constant", [], ["go"], value=helper.make_tensor(
                 "go", BOOL, [], [True])),
             helper.make_node("Constant", [], ["a0"], value=helper.make_tensor("a0", F, [], [0.0])),
             helper.make_node("Loop", ["trips", "go", "a0"], ["acc"], name="loop", body=body)]
    path = model(tmp_path, nodes, [("x", X)], [("acc", ())])
    assert data_sized_dims(path) == ["loop/iter<i>/nz", "*"]
    with pytest.raises(NpusimError, match=r"--dim loop/iter0/nz=N \(1 <= N <= 512\)"):
        sim(path, None)
    g = load_graph(path, {"loop/iter0/nz": 5, "loop/iter1/nz": 7})
    assert [g.shape(f"loop/iter{i}/nz") for i in (0, 1)] == [(3, 5), (3, 7)]
    assert load_graph(path, {"*": 9}).shape("loop/iter0/nz") == (3, 9)
    with pytest.raises(NpusimError, match="no dimension named 'loop/iter0/nzz'"):
        load_graph(path, {"loop/iter0/nzz": 5})


def test_nms_keeps_at_most_its_classes_times_max_output_per_class(tmp_path):
    # 1 batch x 2 classes x min(32 boxes, 8) = 16
    g = load_graph(nms_model(tmp_path), {"sel": 16})
    assert g.shape("sel") == (16, 3)
    with pytest.raises(NpusimError, match="keeps at most 16"):
        load_graph(nms_model(tmp_path), {"sel": 17})
    # without max_output_boxes_per_class ONNX selects no box
    with pytest.raises(NpusimError, match="keeps at most 0"):
        load_graph(nms_model(tmp_path, max_out=False), {"sel": 1})


def test_unique_and_compress_shapes(tmp_path):
    nodes = [helper.make_node("Unique", ["x"], ["y", "idx", "inv", "cnt"], axis=1),
             helper.make_node("Compress", ["x", "c"], ["z"], axis=2)]
    path = model(tmp_path, nodes, [("x", X), ("c", (16,), BOOL)],
                 [("y", (4, "u", 16)), ("idx", ("u",), I64), ("inv", (8,), I64),
                  ("cnt", ("u",), I64), ("z", (4, 8, "k"))])
    g = load_graph(path, {"y": 5, "z": 7})
    assert [g.shape(t) for t in ("y", "idx", "inv", "cnt", "z")] == [
        (4, 5, 16), (5,), (8,), (5,), (4, 8, 7)]


# --------------------------------------------------------------------------- costs

def test_nonzero_cost(tmp_path):
    r = sim(nonzero_model(tmp_path), {"nz": 40})
    flags = passes(512, "sub") + passes(512, "add", levels(512))  # compare, prefix count
    coordinates = sum(passes(3 * 40, op) for op in ("div", "mul", "sub"))
    assert busy(r) == flags + coordinates
    assert stored(r) == 3 * 40 + 8  # 120 one-byte indices in whole 32-byte requests


def test_compress_gathers_only_the_kept_slices(tmp_path):
    node = helper.make_node("Compress", ["x", "c"], ["y"], axis=1)
    path = model(tmp_path, [node], [("x", X), ("c", (8,), BOOL)], [("y", (4, "k", 16))])
    r = sim(path, {"y": 3})
    assert busy(r) == passes(8, "sub") + passes(8, "add", levels(8))
    assert stored(r) == 4 * 3 * 16


def test_unique_sorts_then_compacts(tmp_path):
    node = helper.make_node("Unique", ["x"], ["y", "idx", "inv", "cnt"])
    path = model(tmp_path, [node], [("x", (64,))],
                 [("y", ("u",)), ("idx", ("u",), I64), ("inv", (64,), I64), ("cnt", ("u",), I64)])
    r = sim(path, {"y": 10})
    T = levels(64)
    scan = passes(64, "max", T * (T + 1) // 2) + passes(64, "sub") + passes(64, "add", T)
    outputs = passes(10, "cast") + passes(64, "cast") + passes(10, "sub")
    assert busy(r) == scan + outputs


@pytest.mark.parametrize("centre", [0, 1])
def test_nms_rounds_per_class(tmp_path, centre):
    """5 boxes kept over 2 classes: one class runs 3 rounds, the other 2; each round over
    the 32 candidates takes the max, the IoU with the kept box and the suppression."""
    r = sim(nms_model(tmp_path, centre=centre), {"sel": 5})
    boxes = ([("mul", 3), ("sub", 2), ("add", 2)] if centre else [("sub", 2), ("mul", 1)])
    cost = sum(passes(32, op, n) for op, n in boxes)  # one value per box

    def rounds(s):
        element = [("sub", 1), ("max", 6 * s), ("min", 2 * s), ("sub", 4 * s), ("mul", 2 * s),
                   ("add", s)]
        return sum(passes(32, op, n) for op, n in element) + passes(1, "reduce", s * levels(32))

    cost += rounds(3) + rounds(2) + passes(5 * 3, "cast")  # the triples stored
    assert busy(r) == cost
    assert [layer["name"] for layer in r.layers] == ["nms/boxes", "nms"]


def test_nms_class_keeping_nothing_pays_the_threshold_and_one_max(tmp_path):
    r1 = sim(nms_model(tmp_path, classes=3), {"sel": 1})
    r2 = sim(nms_model(tmp_path, classes=3), {"sel": 2})
    empty = passes(32, "sub") + passes(32, "max") + passes(1, "reduce", levels(32))
    one = passes(32, "sub") + sum(passes(32, op, n) for op, n in (
        ("max", 6), ("min", 2), ("sub", 4), ("mul", 2), ("add", 1))) + passes(1, "reduce", 5)
    # one more class keeps a box instead of none; one more triple stored (3 -> 6 elements:
    # the same single pass of 8)
    assert busy(r2) - busy(r1) == one - empty


# --------------------------------------------------------------------------- RoiAlign

def roi_model(tmp_path, mode="avg", ratio=2, fmap=(1, 4, 32, 32), boxes=3):
    node = helper.make_node("RoiAlign", ["x", "rois", "bi"], ["y"], name="roi", mode=mode,
                            output_height=2, output_width=3, sampling_ratio=ratio)
    return model(tmp_path, [node], [("x", fmap), ("rois", (boxes, 4)), ("bi", (boxes,), I64)],
                 [("y", (boxes, fmap[1], 2, 3))], opset=16)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_cost(tmp_path, mode):
    """3 boxes of 2 x 3 bins, 2 x 2 samples each: 72 sample points (144 coordinates: GridSample's
    bilinear steps, clamped, and the tap weights), then per channel and sample 4 taps."""
    r = sim(roi_model(tmp_path, mode), None)
    coordinates = [("mul", 1), ("add", 1), ("max", 1), ("min", 1), ("cast", 1), ("sub", 2),
                   ("mul", 2 if mode == "avg" else 1)]
    samples = 3 * 4 * 6 * 4  # boxes x channels x bins x samples
    taps = [("mul", 4), ("add" if mode == "avg" else "max", 4)]
    assert busy(r) == (sum(passes(3 * 24 * 2, op, n) for op, n in coordinates)
                       + sum(passes(samples, op, n) for op, n in taps))
    assert stored(r) >= 3 * 4 * 6  # every bin once, not once per sample
    assert stored(r) < 3 * 4 * 6 * 4


def test_roi_align_reads_one_pixel_per_sample_per_box(tmp_path):
    """Each box reads a window of 4 x 6 pixels (2 x 3 bins of 2 x 2 samples) per channel: 4
    rows of 6 one-byte pixels (a 32-byte request each) in each of 4 channels, and its 24
    packed sample words (one request); three boxes read three such windows."""
    for boxes in (1, 3):
        r = sim(roi_model(tmp_path, boxes=boxes), None)
        assert r.layers[1]["bytes_loaded"] == boxes * (4 * 4 * 32 + 32)


def test_roi_align_adaptive_sampling_is_listed_up_front(tmp_path):
    with pytest.raises(NpusimError, match=r"RoiAlign: roi \(sampling_ratio 0 samples as many"):
        sim(roi_model(tmp_path, ratio=0), None)
