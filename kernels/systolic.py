"""The systolic array's timing: one rule per dataflow (``isa.DATAFLOWS``).

The lowering emits the array's PRELOAD/GEMM order (``npusim.lowering.array``, one schedule
function per dataflow); this file times it. A second dataflow is one more schedule there
and one more timing rule here, chosen by ``p.sa_dataflow``.

Weight stationary (``ws``; Gemmini's WS mode, ``ExecuteController.scala``), array ``h`` x
``w``:

- A GEMM streams its rows in chunks of at most ``h`` (one Gemmini COMPUTE each: a conv
  streams every output row of a tile as its own chunks, ``segs`` rows of ``rows``
  pixels); a chunk holds the array input ``max(rows, min_cycles)`` cycles (Gemmini:
  ``total_rows = max(rows, 4)``, two writes to one accumulator row stay 4 cycles apart).
  Its last result reaches the accumulator ``w + h - 1`` cycles after the stream ends,
  plus the accumulator write.
- A PRELOAD reads a weight block out of the scratchpad (``h - 1`` cycles, hidden while the
  array is busy) and shifts it in over ``h`` cycles into the shadow weights. Gemmini feeds
  the next block's weights beside the *last* chunk of the current GEMM (its "mul_pre"
  step lasts ``h`` cycles whatever the chunk's rows), so the shift starts no earlier than
  that chunk: a GEMM whose last chunk is shorter than ``h`` rows waits the difference.
  The first PRELOAD of a tile (``I_DRAIN``) waits for the array to drain: starting a tile
  reconfigures the execute unit.
"""

from .jit import kernel

from . import array_rows, isa
from .state import *  # noqa: F403  (field indices of the state tables)
from .trace import trace_interval


gemm_stream_cycles = kernel(array_rows.gemm_stream_cycles)
last_chunk_cycles = kernel(array_rows.last_chunk_cycles)


@kernel
def _ws_issue(st, prog, p, c, row, t, layer):
    """Weight-stationary PRELOAD or GEMM issued at tick t: (start, done)."""
    P = p.core_period
    if prog.inst[row, isa.I_OP] == isa.OP_PRELOAD:
        read_from = t  # the scratchpad read of the weights may start at issue...
        if prog.inst[row, isa.I_DRAIN] == 1:  # ...or only once the array has drained
            read_from = max(t, st.core[C_SA_DONE, c])
        start = max(read_from + (p.sa_height - 1) * P, st.core[C_SA_PRELOAD_READY, c],
                    st.core[C_SA_LAST_CHUNK, c])
        done = start + p.sa_height * P
        st.core[C_SA_PRELOAD_READY, c] = done
        return start, done
    rows = prog.inst[row, isa.I_ROWS]
    start = max(t, st.core[C_SA_PRELOAD_READY, c], st.core[C_SA_STREAM_FREE, c])
    stream = gemm_stream_cycles(rows, prog.inst[row, isa.I_SEGS], p.sa_height, p.sa_min_cycles)
    end = start + stream * P
    st.core[C_SA_STREAM_FREE, c] = end
    st.core[C_SA_LAST_CHUNK, c] = end - last_chunk_cycles(rows, p.sa_height,
                                                          p.sa_min_cycles) * P
    done = end + (p.sa_width + p.sa_height - 1 + p.acc_latency) * P
    st.core[C_SA_DONE, c] = done
    st.core[C_SA_STREAM, c] += stream
    st.layer_st[L_SA_CYCLES, layer] += stream
    st.core[C_SA_MACS, c] += prog.inst[row, isa.I_MACS]
    trace_interval(st, p, isa.UNIT_SYSTOLIC, c, start, end)
    return start, done


@kernel
def array_issue(st, prog, p, c, row, t, layer):
    """Start and finish of a PRELOAD or GEMM under the configured dataflow."""
    if p.sa_dataflow == isa.DATAFLOW_WS:
        return _ws_issue(st, prog, p, c, row, t, layer)
    return isa.NEVER, isa.NEVER  # no other dataflow yet (the config admits only isa.DATAFLOWS)
