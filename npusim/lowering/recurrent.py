"""LSTM, GRU and RNN (ONNX's recurrent ops) unrolled over the sequence, as a compiler for an
NPU runs them: the input projection of every time step at once, then per step one GEMM
of the previous hidden state with the recurrent weights and one vector-unit layer for the
cell's element-wise work.

Per direction ``d`` (forward, or reverse walking the steps backwards):

- ``name/x_proj``: ``X[S*B, I] . W_d^T[I, G*H] + Wb_d`` for all steps (``G`` gates:
  LSTM 4, GRU 3, RNN 1), written time-major as ``XW[S, B, G*H]``;
- per step ``t``, ``name/t<t>/gemm``: ``H_{t-1}[B, H] . R_d^T[H, G*H]``. For LSTM and RNN
  its accumulators start from ``XW[t]`` (added in place, loaded as a GEMM's addend) and
  it adds ``Rb`` as a bias; for GRU it adds ``Rb`` only (the reset gate multiplies the
  recurrent part of the candidate before the input part is added);
- ``name/t<t>/cell``: the gates' activations and the state update on the vector unit,
  reading the gate pre-activations and the previous state, writing ``c_t`` (LSTM) and
  ``h_t`` straight into ``Y[t, d]``, where the next step's GEMM reads it.

The cell's steps come from the element-wise cost table (``vector.ELEMENTWISE``), one pass
of an op per gate element it is applied to: LSTM ``f`` (Sigmoid) over i, o, f, ``g``
(Tanh) over the candidate and ``h`` (Tanh) over ``c_t``, then ``f * c + i * g`` and
``o * h(c)``; GRU with ``linear_before_reset`` (what PyTorch and Keras export): z and r
from ``XW + HR``, ``n = g(XW_n + r * HR_n)``, ``h = n + z * (h_prev - n)``; without it the
step takes a second GEMM, ``(r * h_prev) . R_n^T``. The activations named by the
``activations`` attribute are costed by their own rows of the table; ``clip`` adds a
compare pair per gate element, LSTM peepholes a multiply-add per gated element.

MACs: ``S * B * G * H * (I + H)`` per direction, the count of an unrolled graph.
``initial_h`` absent means zeros: the first step's GEMM still runs (on a zero state, as
the op defines it). ``sequence_lens`` is not read (every sequence is taken as full length:
npusim never reads input data). ``Y_h`` and ``Y_c`` are copied out of the last step's
state when something reads them. With ``layout = 1`` (batch-major ``X``, ``Y`` and states)
the projection's rows of one step and the initial states are addressed as if time-major
(the same bytes are moved; only their DRAM addresses differ).

ONNX Runtime's ``DynamicQuantizeLSTM`` (its dynamic quantization of an LSTM) is the LSTM
with both GEMMs of every step in int8 on weights stored input x gates, the cells in float.
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil

from npusim.errors import NpusimError
from npusim.frontend.graph import Node
from npusim.frontend.quantized import INT8
from npusim.lowering.context import LoweringContext
from npusim.lowering.gemm import GemmProblem, emit_gemm
from npusim.lowering.tiling import ACC_BYTES
from npusim.lowering.vector import (ELEMENTWISE, LayerEmitter, View, box_dmas, emit_views,
                                    row_major)
from npusim.program import LayerInfo

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"],
                       "RNN": ["Tanh"]}
# the activation functions ONNX allows in recurrent ops: their cost rows (those that are
# not ONNX ops of the same name spelled out)
ACTIVATIONS = {
    **{a: ELEMENTWISE[a] for a in ("Sigmoid", "Tanh", "Relu", "LeakyRelu", "ThresholdedRelu",
                                   "HardSigmoid", "Elu", "Softsign", "Softplus")},
    "Affine": ELEMENTWISE["Mul"] + ELEMENTWISE["Add"],  # alpha * x + beta
    "ScaledTanh": ELEMENTWISE["Mul"] + ELEMENTWISE["Tanh"] + ELEMENTWISE["Mul"],
}


def _activation(node: Node, name: str) -> list[tuple[str, int]]:
    if name not in ACTIVATIONS:
        raise NpusimError(f"{node.op_type} '{node.name}': activation '{name}' is not one ONNX "
                          f"defines for recurrent ops; supported: "
                          f"{', '.join(sorted(ACTIVATIONS))}")
    return ACTIVATIONS[name]


def _times(steps: list[tuple[str, int]], n: int) -> list[tuple[str, int]]:
    """``steps`` applied to ``n`` element groups: each step's passes times ``n``."""
    return [(op, p * n) for op, p in steps]


def _add(*ops: tuple[str, int]) -> list[tuple[str, int]]:
    """Element-wise ops of the table, ``(op type, element groups)`` each."""
    out = []
    for op, n in ops:
        out += _times(ELEMENTWISE[op], n)
    return out


def cell_steps(node: Node, hidden: int, op: str | None = None) -> list[list[tuple[str, int]]]:
    """The vector steps of one time step's cell layer(s), per element of the hidden state
    (``B * H`` elements): one list per vector layer of the step (``op``: the cell, default
    the node's op type)."""
    op = op or node.op_type
    acts = list(node.attrs.get("activations", [])) or DEFAULT_ACTIVATIONS[op]
    per_dir = len(DEFAULT_ACTIVATIONS[op])
    f, *rest = [_activation(node, a) for a in acts[:per_dir]]
    G = GATES[op]
    clip = _times([("max", 1), ("min", 1)], G) if "clip" in node.attrs else []
    if op == "LSTM":
        g, h = rest
        peep = _add(("Mul", 3), ("Add", 3)) if len(node.inputs) > 7 and node.inputs[7] else []
        return [clip + peep + _times(f, 3) + _times(g, 1) + _add(("Mul", 2), ("Add", 1))
                + _times(h, 1) + _add(("Mul", 1))]
    if op == "RNN":
        return [clip + f]
    g = rest[0]
    if int(node.attrs.get("linear_before_reset", 0)):
        # z, r = f(XW + HR); n = g(XW_n + r * HR_n); h = n + z * (h_prev - n)
        return [_add(("Add", 2)) + clip + _times(f, 2) + _add(("Mul", 1), ("Add", 1))
                + _times(g, 1) + _add(("Sub", 1), ("Mul", 1), ("Add", 1))]
    # z, r = f(XW + HR); keep 1 - z, z * h_prev, r * h_prev; then n = g(XW_n + (r h) R_n
    # + Rb_n) and h = (1 - z) * n + z * h_prev
    return [_add(("Add", 2)) + clip + _times(f, 2) + _add(("Sub", 1), ("Mul", 2)),
            _add(("Add", 1)) + _times(g, 1) + _add(("Mul", 1), ("Add", 1))]


def lower_recurrent(ctx: LoweringContext, node: Node, *, cell: str | None = None,
                    gemm_precision: int | None = None, weights_c_by_m: bool = False) -> None:
    """``cell``: the recurrent op whose cell this node runs (default: its op type);
    ``gemm_precision``: bytes per element the GEMMs compute in, when not the node's (an
    integer LSTM's); ``weights_c_by_m``: W and R stored input x gates, not gates x input."""
    g = ctx.graph
    op = cell or node.op_type
    ins = list(node.inputs) + [""] * (8 - len(node.inputs))
    x, w, r, b, _seq_lens, h0, c0 = ins[:7]
    outs = list(node.outputs) + [""] * (3 - len(node.outputs))
    y, y_h, y_c = outs[:3]
    x_shape, w_shape = g.shape(x), g.shape(w)
    layout = int(node.attrs.get("layout", 0))
    if len(x_shape) != 3:
        raise NpusimError(f"{op} '{node.name}': X must be 3-D, got shape {x_shape}")
    S, B = (x_shape[1], x_shape[0]) if layout else (x_shape[0], x_shape[1])
    I = x_shape[2]
    D, GH = w_shape[0], w_shape[2 if weights_c_by_m else 1]
    G = GATES[op]
    H = int(node.attrs.get("hidden_size", GH // G))
    if GH != G * H:
        raise NpusimError(f"{op} '{node.name}': W has {GH} rows, expected {G} gates x "
                          f"hidden_size {H}")
    direction = node.attrs.get("direction", "forward")
    prec = ctx.precision
    # bytes per element of what the GEMMs read: the weights, and X and h as quantized
    # copies laid out like them (an integer LSTM quantizes both on the fly)
    wprec = gemm_precision or prec
    steps = cell_steps(node, H, op)

    def gemm(sub, prob, info):
        float_precision = ctx.node_precision
        ctx.node_precision = gemm_precision or float_precision
        info.precision = gemm_precision
        emit_gemm(ctx, sub, prob, info)
        ctx.node_precision = float_precision
    lbr = op == "GRU" and int(node.attrs.get("linear_before_reset", 0))

    # the hidden-state sequence: Y when the model has it, else a scratch of Y's shape
    y_shape = (B, S, D, H) if layout else (S, D, B, H)
    seq = y if y else ctx.scratch(f"{node.name}::Y", y_shape)
    seq_addr = ctx.addr(seq)
    ys = row_major(y_shape)
    t_stride, d_stride, b_stride = ((ys[1], ys[2], ys[0]) if layout else (ys[0], ys[1], ys[2]))
    c_state = ctx.scratch(f"{node.name}::c", (D, B, H)) if op == "LSTM" else ""
    zero_h = ctx.scratch(f"{node.name}::h0", (D, B, H)) if not h0 else ""
    last: dict[str, tuple[int, int]] = {}  # Y_h / Y_c per direction: (addr, row stride)
    ends: list[int] = []  # the last cell layer of each direction

    for d in range(D):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        tag = f"/{'reverse' if reverse else 'forward'}" if D > 1 else ""
        # input projection for every step, time-major (room for accumulator width)
        xw = ctx.scratch(f"{node.name}{tag}::XW", (S, B, GH), max(prec, ACC_BYTES))
        sub = Node(f"{node.name}{tag}/x_proj", node.op_type, inputs=[x, w] + ([b] if b else []),
                   outputs=[xw])
        gemm(sub, GemmProblem(
            N=S * B, C=I, M=GH, batch_offsets=[(0, d * GH * I * wprec, 0)], x_addr=ctx.addr(x),
            x_row_stride=I * wprec, x_trans=False, w_addr=ctx.addr(w),
            w_trans=not weights_c_by_m,
            y_addr=ctx.address[xw], bias_addr=ctx.bias_addr(b) + d * 2 * GH * ACC_BYTES if b else None),
            _info(sub, [x_shape, w_shape], (S, B, GH), S * B * I * GH))
        h_prev = h0 or zero_h
        h_addr, h_row = ctx.addr(h_prev) + d * B * H * prec, H
        c_prev = (c0 or c_state) if op == "LSTM" else ""
        c_addr = ctx.addr(c_prev) + d * B * H * prec if c_prev else 0
        for k in range(S):
            t = S - 1 - k if reverse else k
            name = f"{node.name}{tag}/t{t}"
            r_addr = ctx.addr(r) + d * GH * H * wprec
            rb = ctx.bias_addr(b) + (d * 2 + 1) * GH * ACC_BYTES if b else None
            # the step's rows of XW: an addend of the GEMM (LSTM, RNN: loaded at
            # accumulator width, as a GEMM's addend is) or an operand of the cell (GRU)
            xw_t = ctx.address[xw] + t * B * GH * (prec if op == "GRU" else ACC_BYTES)
            pre = ctx.scratch(f"{name}::gates", (B, GH if (op != "GRU" or lbr) else 2 * H))
            sub = Node(f"{name}/gemm", node.op_type, inputs=[h_prev, r, xw], outputs=[pre])
            if op == "GRU":  # Rb as the bias: the input part is added in the cell
                M, bias, rows = (GH if lbr else 2 * H), rb, 1
            else:  # accumulate onto XW[t], with Rb folded into XW's bias at deployment
                M, bias, rows = GH, xw_t, B
            gemm(sub, GemmProblem(
                N=B, C=H, M=M, batch_offsets=[(0, 0, 0)], x_addr=h_addr,
                x_row_stride=h_row * wprec, x_trans=False, w_addr=r_addr,
                w_trans=not weights_c_by_m,
                y_addr=ctx.addr(pre), bias_addr=bias, bias_rows=rows),
                _info(sub, [(B, H), (GH, H)], (B, M), B * H * M))
            h_out = f"{name}::h"
            ctx.address[h_out] = seq_addr + t * t_stride * prec + d * d_stride * prec
            operands = [(xw_t, GH, B * GH, G)] if op == "GRU" else []
            operands.append((ctx.addr(pre), M, M, M // H))
            if op == "LSTM":
                c_out = f"{name}::c"
                ctx.address[c_out] = ctx.addr(c_state) + d * B * H * prec
                cell = Node(f"{name}/cell", node.op_type, inputs=[pre, c_prev], outputs=[c_out, h_out])
                loads = operands + [(c_addr, H, H, 1)]
                stores = [(ctx.address[c_out], H, H, 1), (ctx.address[h_out], b_stride, H, 1)]
                _emit_cell(ctx, cell, B, H, loads, stores, steps[0])
                c_prev, c_addr = c_out, ctx.address[c_out]
            elif op == "RNN":
                cell = Node(f"{name}/cell", node.op_type, inputs=[pre], outputs=[h_out])
                _emit_cell(ctx, cell, B, H, operands, [(ctx.address[h_out], b_stride, H, 1)],
                           steps[0])
            elif lbr:
                cell = Node(f"{name}/cell", node.op_type, inputs=[xw, pre, h_prev], outputs=[h_out])
                _emit_cell(ctx, cell, B, H, operands + [(h_addr, h_row, H, 1)],
                           [(ctx.address[h_out], b_stride, H, 1)], steps[0])
            else:
                _gru_reset_after(ctx, node, name, B, H, GH, d, xw, xw_t, pre, h_prev, h_addr,
                                 h_row, r_addr, rb, h_out, b_stride, steps)
            h_prev, h_addr, h_row = h_out, ctx.address[h_out], b_stride
        last[f"h{d}"] = (h_addr, h_row)
        if op == "LSTM":
            last[f"c{d}"] = (c_addr, H)
        ends.append(ctx.producer_layer[h_prev])
    # Y is complete when the last step of every direction is: a layer with no work joins
    # them (the directions are independent and may run side by side)
    join = ctx.builder.begin_layer(
        LayerInfo(name=node.name, op_type=node.op_type, input_shapes=[x_shape, w_shape],
                  output_shape=y_shape, macs=0, mapping="",
                  mapping_source="the directions' last steps joined (no data moved)"), ends)
    if y:
        ctx.producer_layer[y] = join
    _copy_states(ctx, node, y_h, "h", last, D, B, H, join)
    if op == "LSTM":
        _copy_states(ctx, node, y_c, "c", last, D, B, H, join)


def _gru_reset_after(ctx, node, name, B, H, GH, d, xw, xw_t, pre, h_prev, h_addr, h_row,
                     r_addr, rb, h_out, b_stride, steps) -> None:
    """GRU without linear_before_reset: z, r, then ``(r * h_prev) . R_n^T``, then h."""
    prec = ctx.precision
    keep = ctx.scratch(f"{name}::zrh", (B, 3 * H))  # 1 - z | z * h_prev | r * h_prev
    cell = Node(f"{name}/gates", node.op_type, inputs=[xw, pre, h_prev], outputs=[keep])
    _emit_cell(ctx, cell, B, H, [(xw_t, GH, B * GH, 2), (ctx.addr(pre), 2 * H, 2 * H, 2),
                                 (h_addr, h_row, H, 1)],
               [(ctx.addr(keep), 3 * H, 3 * H, 3)], steps[0])
    n_pre = ctx.scratch(f"{name}::n", (B, H))
    sub = Node(f"{name}/gemm_n", node.op_type, inputs=[keep, node.inputs[2]], outputs=[n_pre])
    emit_gemm(ctx, sub, GemmProblem(
        N=B, C=H, M=H, batch_offsets=[(0, 0, 0)], x_addr=ctx.addr(keep) + 2 * H * prec,
        x_row_stride=3 * H * prec, x_trans=False, w_addr=r_addr + 2 * H * H * prec,
        w_trans=True, y_addr=ctx.addr(n_pre),
        bias_addr=None if rb is None else rb + 2 * H * ACC_BYTES),
        _info(sub, [(B, H), (H, H)], (B, H), B * H * H))
    cell = Node(f"{name}/cell", node.op_type, inputs=[xw, n_pre, keep], outputs=[h_out])
    _emit_cell(ctx, cell, B, H, [(xw_t + 2 * H * ACC_BYTES, GH, B * GH, 1),
                                 (ctx.addr(n_pre), H, H, 1), (ctx.addr(keep), 3 * H, 3 * H, 2)],
               [(ctx.address[h_out], b_stride, H, 1)], steps[1])


def _info(node: Node, in_shapes, out_shape, macs: int) -> LayerInfo:
    return LayerInfo(name=node.name, op_type=node.op_type, input_shapes=list(in_shapes),
                     output_shape=tuple(out_shape), macs=int(macs), mapping="",
                     mapping_source="")


def _emit_cell(ctx: LoweringContext, node: Node, B: int, H: int, loads, stores, steps) -> None:
    """One vector layer over the ``B x H`` hidden state, tiled by rows and column chunks.
    ``loads``/``stores``: (byte address, row stride in elements, row length in elements,
    element groups per hidden element): an operand of ``k`` groups holds ``k`` blocks of
    ``H`` along its row (the gates)."""
    prec = ctx.precision
    info = LayerInfo(name=node.name, op_type=node.op_type, input_shapes=[(B, H)],
                     output_shape=(B, H), macs=0, mapping="", mapping_source="")
    em = LayerEmitter(ctx, node, "vector unit (recurrent cell)", info=info)
    width = sum(k for *_, k in loads) + sum(k for *_, k in stores)
    cap = ctx.budget.spad_half // prec // width  # hidden elements per tile
    if cap < 1:
        raise NpusimError(f"{node.op_type} '{node.name}': one element of the cell's "
                          f"{width} operands does not fit half the scratchpad "
                          f"({ctx.budget.spad_half} B); raise core.spad_kib")
    per_core = ceil(B * H / ctx.config.num_cores)
    size = min(cap, per_core)
    if size >= H:
        tc, hc = min(B, size // H), H
    else:
        tc, hc = 1, size

    def boxes(ops, first_slot, rows, cols, load):
        out = []
        for i, (_addr, row_stride, row_len, k) in enumerate(ops):
            if k == 1:
                counts, strides = [rows, cols], [row_stride, 1]
            else:  # k blocks of H: [rows, k, cols]
                counts, strides = [rows, k, cols], [row_stride, H, 1]
            out += box_dmas(first_slot + i, counts, strides, prec)[0]
        return out

    shapes: dict[tuple[int, int], tuple] = {}
    for b0 in range(0, B, tc):
        rows = min(tc, B - b0)
        for h0 in range(0, H, hc):
            cols = min(hc, H - h0)
            if (rows, cols) not in shapes:
                el = rows * cols
                shapes[rows, cols] = (boxes(loads, 0, rows, cols, True),
                                      [(op, el, p) for op, p in steps],
                                      boxes(stores, len(loads), rows, cols, False))
            bases = [a + (b0 * rs + h0) * prec for a, rs, _, _ in loads + stores]
            em.group()
            em.tile(bases, *shapes[rows, cols])
    em.finish()


def _copy_states(ctx, node, out: str, which: str, last, D, B, H, join: int) -> None:
    """``Y_h`` / ``Y_c`` copied out of the last step's state, when something reads it."""
    g = ctx.graph
    if not out or (not g.consumers(out) and out not in g.outputs):
        return
    prec = ctx.precision
    em = LayerEmitter(ctx, Node(f"{node.name}/{out}", node.op_type, outputs=[out]),
                      "DMA copy", info=_info(Node(f"{node.name}/Y_{which}", node.op_type),
                                             [(D, B, H)], (D, B, H), 0),
                      preds=[join])
    base = ctx.addr(out)
    for d in range(D):
        addr, row = last[f"{which}{d}"]
        emit_views(em, (B, H), [View(addr, [row, 1])],
                   [View(base + d * B * H * prec, [H, 1])], [])
    em.finish()


def lower_dynamic_quantize_lstm(ctx: LoweringContext, node: Node) -> None:
    """ONNX Runtime's DynamicQuantizeLSTM (what its dynamic quantization makes of an LSTM):
    the LSTM with its input projection and recurrent GEMMs in int8 on int8 weights stored
    input x gates (W [D, I, 4H], R [D, H, 4H]), the cells in float. It quantizes X and each
    step's h on the fly; as for DynamicQuantizeMatMul, that pass is not charged. Inputs: the
    LSTM's eight, then the weights' scales and zero points (not loaded)."""
    lower_recurrent(ctx, replace(node, inputs=list(node.inputs[:8])), cell="LSTM",
                    gemm_precision=INT8, weights_c_by_m=True)


LOWERINGS: dict = {op: lower_recurrent for op in GATES}
LOWERINGS["DynamicQuantizeLSTM"] = lower_dynamic_quantize_lstm
