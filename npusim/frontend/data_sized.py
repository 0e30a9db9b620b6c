"""Ops whose output size depends on the data: NonZero, Compress, Unique, NonMaxSuppression.

npusim never reads tensor values, so how many elements such a node keeps is a dimension the
user gives, as for a symbolic input dim: ``--dim NAME=N``, NAME being the node's first output
tensor (named in the error when it is missing). This file is the one list of those ops: for
each, the most its inputs allow and its output shapes for a given count.

=================  ==========================================================================
NonZero            (rank, N): N of the input's elements are nonzero, at most all of them
Compress           N slices kept along ``axis`` (N elements of the flattened input without
                   one), at most the axis's length (and the condition's)
Unique             N distinct slices along ``axis`` (elements without one): Y and counts
                   hold N, indices N, inverse_indices one per input slice
NonMaxSuppression  (N, 3) selected boxes, at most batches x classes x min(boxes,
                   max_output_boxes_per_class); without that input ONNX selects none
=================  ==========================================================================
"""

from __future__ import annotations

import re
from math import prod

import numpy as np
from onnx import TensorProto

from npusim.errors import NpusimError

DATA_SIZED = ("NonZero", "Compress", "Unique", "NonMaxSuppression")
_STANDARD = ("", "ai.onnx")
# ``--dim '*=N'``: every data-sized node without a count of its own keeps N, or all it can
# if its inputs allow fewer (a detector has one NonZero per feature level and class: 182
# in torchvision's SSDlite)
EVERY = "*"
ITER = "<i>"  # an unrolled Loop's iteration in a count's name (``count_names``)


def is_data_sized(node) -> bool:
    """Whether ``node`` (an ONNX NodeProto or an IR Node) is one of the ops above."""
    return node.op_type in DATA_SIZED and node.domain in _STANDARD


def count_names(nodes, prefix: str = "") -> dict[str, str]:
    """The dim name of every data-sized node among ``nodes`` (ONNX NodeProtos) -> its op
    type, also inside an If's branches (the front end walks the branch its folded
    condition takes, its nodes' names unchanged: Faster R-CNN's box selection is a
    NonMaxSuppression inside one) and a Loop's body (unrolled, each iteration's names
    prefixed ``<loop>/iter<i>/``: named here with ``<i>``, per image NMS in Keras's
    ``map_fn``)."""
    out: dict[str, str] = {}
    for n in nodes:
        if is_data_sized(n) and n.output[0]:
            out[prefix + n.output[0]] = n.op_type
        if n.op_type in ("If", "Loop") and n.domain in _STANDARD:
            inner = prefix if n.op_type == "If" else f"{prefix}{n.name or 'Loop'}/iter{ITER}/"
            for a in n.attribute:
                if a.name in ("then_branch", "else_branch", "body"):
                    out.update(count_names(a.g.node, inner))
    return out


def is_count_name(name: str, names: dict[str, str]) -> bool:
    """Whether ``name`` binds one of ``names`` (``count_names``): itself, an unrolled
    iteration's (``<i>`` a number), or ``EVERY`` where there is any."""
    if name in names or (name == EVERY and names):
        return True
    return any(re.fullmatch(re.escape(n).replace(re.escape(ITER), r"\d+"), name)
               for n in names if ITER in n)


def _axis(attrs: dict, rank: int) -> int | None:
    axis = attrs.get("axis")
    return None if axis is None else int(axis) % max(rank, 1)


def count_bound(op: str, attrs: dict, shapes: list, values: list) -> int:
    """The largest count the inputs allow (``shapes``/``values``: per input, None unknown)."""
    x = shapes[0]
    if op == "NonZero":
        return prod(x)
    if op == "NonMaxSuppression":
        batches, boxes = x[0], x[1]
        classes = shapes[1][1]
        if len(shapes) < 3 or shapes[2] is None:
            return 0  # no max_output_boxes_per_class: ONNX selects no box
        per_class = boxes if values[2] is None else min(boxes, int(np.asarray(values[2]).reshape(-1)[0]))
        return batches * classes * max(per_class, 0)
    axis = _axis(attrs, len(x))
    length = prod(x) if axis is None else x[axis]
    if op == "Compress" and shapes[1] is not None:
        length = min(length, prod(shapes[1]))
    return length


def output_types(op: str, attrs: dict, shapes: list, elem_type: int, count: int
                 ) -> list[tuple[int, tuple[int, ...]]]:
    """(elem_type, shape) of each output when the node keeps ``count``."""
    x = shapes[0]
    if op == "NonZero":
        return [(TensorProto.INT64, (len(x), count))]
    if op == "NonMaxSuppression":
        return [(TensorProto.INT64, (count, 3))]
    axis = _axis(attrs, len(x))
    kept = (count,) if axis is None else x[:axis] + (count,) + x[axis + 1:]
    if op == "Compress":
        return [(elem_type, kept)]
    slices = prod(x) if axis is None else x[axis]
    return [(elem_type, kept), (TensorProto.INT64, (count,)), (TensorProto.INT64, (slices,)),
            (TensorProto.INT64, (count,))]


def count_of(node, name: str, counts: dict[str, int], bound: int) -> int | None:
    """The count given for ``name`` (checked against the most its inputs allow), else the
    ``EVERY`` count, at most ``bound``; None if neither was given."""
    if name in counts:
        check_count(node, name, counts[name], bound)
        return counts[name]
    return min(counts[EVERY], bound) if EVERY in counts else None


def check_count(node, name: str, count: int, bound: int) -> None:
    if count > bound:
        raise NpusimError(f"--dim {name}={count}: {node.op_type} '{node.name or name}' keeps at "
                          f"most {bound} with these inputs (1 <= {name} <= {bound})")


def missing_message(op: str, name: str, bound: int | None) -> str:
    """What to pass for a data-sized node whose count is not given."""
    what = {"NonZero": "how many elements are nonzero",
            "Compress": "how many slices the condition keeps",
            "Unique": "how many distinct values there are",
            "NonMaxSuppression": "how many boxes survive"}[op]
    limit = f" (1 <= N <= {bound})" if bound else ""
    return (f"its size is {what}, which depends on data npusim never reads: give it with "
            f"--dim {name}=N{limit}, or every such size at once with --dim '{EVERY}=N'")
