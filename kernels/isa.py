"""The instruction set and the column layout of the Program tables.

A Program is a handful of flat int64 tables (one row per instruction, tile, group, layer).
The column indices below are plain module constants so numba folds them into the kernels
and Python builds the tables with the same names.

The ISA is Gemmini's, extended with vector ops:

- ``MVIN``    DMA from DRAM into the scratchpad or accumulator (a strided descriptor)
- ``MVOUT``   DMA from the accumulator (or scratchpad) to DRAM
- ``PRELOAD`` shift one weight block (height x width) from the scratchpad into the array
- ``GEMM``    stream rows through the preloaded weights into the accumulator
- ``IM2COL``  explicit im2col rearrangement on the vector unit (implicit im2col in the
              loads is the default and needs no instruction)
- ``VECTOR``  an element-wise or reduction op on the vector unit
"""

# --- opcodes -----------------------------------------------------------------------
OP_MVIN = 0
OP_MVOUT = 1
OP_PRELOAD = 2
OP_GEMM = 3
OP_IM2COL = 4
OP_VECTOR = 5
OPCODE_NAMES = ("MVIN", "MVOUT", "PRELOAD", "GEMM", "IM2COL", "VECTOR")

# --- execution units of a core (each is in order) -----------------------------------
UNIT_LOAD = 0  # DMA load engine (MVIN)
UNIT_STORE = 1  # DMA store engine (MVOUT)
UNIT_SYSTOLIC = 2  # systolic array (PRELOAD, GEMM)
UNIT_VECTOR = 3  # vector unit (VECTOR, IM2COL)
N_UNITS = 4
UNIT_NAMES = ("dma_load", "dma_store", "systolic", "vector")

# --- instruction table columns (Program.inst[i, col]) ------------------------------
I_OP = 0  # opcode
I_UNIT = 1  # unit that executes it
I_DEP0 = 2  # index (within the tile template) of an instruction that must complete first, or -1
I_DEP1 = 3  # a second such dependency, or -1
# DMA descriptor: runs of RUN bytes at  base[SLOT] + OFFSET + o*OUTER_STRIDE + i*INNER_STRIDE
I_SLOT = 4  # which of the tile's base addresses (TILE_BASE0 + slot) the descriptor is relative to
I_OFFSET = 5
I_N_OUTER = 6
I_OUTER_STRIDE = 7
I_N_INNER = 8
I_INNER_STRIDE = 9
I_RUN_BYTES = 10
I_TO_ACC = 11  # MVIN/MVOUT: 1 if the on-chip side is the accumulator
# GEMM: ROWS rows per segment, SEGS segments (conv streams one output row per segment)
I_ROWS = 12
I_SEGS = 13
I_MACS = 14  # multiply-accumulates (GEMM) or element operations (VECTOR) actually performed
# VECTOR / IM2COL
I_VOP = 15  # index into the vector latency table (VECTOR_OPS)
I_ELEMENTS = 16  # elements processed
I_PASSES = 17  # passes over the data (e.g. softmax = max, exp, sum, div)
# PRELOAD: 1 if the array must drain first (the first preload of a tile: switching tiles
# reconfigures the execute unit, which in Gemmini waits for the mesh to empty)
I_DRAIN = 18
N_INST_COLS = 19

# Vector ops (config core.vector.latency), in the order of the latency table handed to the
# kernels; ``reduce`` is one level of an add/compare tree.
VECTOR_OPS = (
    "add", "sub", "mul", "div", "max", "min", "exp", "log", "sqrt", "rsqrt", "recip",
    "tanh", "sigmoid", "erf", "gelu", "pow", "cast", "reduce",
)

# --- tile table columns (Program.tile[t, col]) --------------------------------------
T_INST_START = 0  # first row of the tile's instruction template in Program.inst
T_INST_LEN = 1
T_LAYER = 2
T_GROUP = 3
T_BASE0 = 4  # four base addresses the DMA descriptors are relative to
N_TILE_SLOTS = 4
N_TILE_COLS = T_BASE0 + N_TILE_SLOTS

# --- group table: a chain of tiles that must run in order on one core --------------
# (the reduction (C) tiles of one output block accumulate into the same accumulator rows)
G_TILE_START = 0
G_TILE_LEN = 1
G_LAYER = 2
N_GROUP_COLS = 3

# --- layer table ---------------------------------------------------------------------
L_GROUP_START = 0
L_GROUP_LEN = 1
L_N_PREDS = 2  # layers that must finish before this one starts
L_SUCC_START = 3  # successors in Program.layer_succ[L_SUCC_START : L_SUCC_START + L_SUCC_LEN]
L_SUCC_LEN = 4
L_RELEASE = 5  # core cycle before which the layer may not start (a request's arrival)
L_REQUEST = 6  # which request it belongs to (a row of ProgramArrays.req)
N_LAYER_COLS = 7

# Dataflows of the systolic array (config ``core.systolic.dataflow``; Params.sa_dataflow is
# the index). Each has a schedule in npusim/lowering/array.py and a timing rule in
# kernels/systolic.py.
DATAFLOWS = ("ws",)
DATAFLOW_WS = 0

# Times are int64 ticks of the global time base; "never" is this.
NEVER = 2**62
