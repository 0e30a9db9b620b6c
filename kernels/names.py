"""Every list of names the kernels know by number, each in one place.

The config validates its fields against these lists, the Python side turns a name into
its number with ``LIST.index(name)``, and the kernels compare with the constants next to
each list (a name's number is its position; unpacking ``range(len(LIST))`` fails at import
if the two ever disagree in length). Vector ops, opcodes and units are the ISA's lists, in
``isa.py``. Neither module imports numba, so ``import npusim.config`` does not load it
(tests/test_names.py checks).
"""

# memory.type: the memory models of kernels/memory.py
MEMORY_TYPES = ("ideal", "simple", "dram")
MEM_IDEAL, MEM_SIMPLE, MEM_DRAM = range(len(MEMORY_TYPES))

# scheduler.policy: one file each in kernels/policies/
POLICIES = ("fifo", "time-shared", "spatial")
POLICY_FIFO, POLICY_TIME_SHARED, POLICY_SPATIAL = range(len(POLICIES))

# DRAM commands and the levels of the timing rules (npusim.dram, kernels/dram.py);
# PREA and REF go to a whole rank
COMMANDS = ("ACT", "PRE", "PREA", "RD", "WR", "RDA", "WRA", "REF")
ACT, PRE, PREA, RD, WR, RDA, WRA, REF = range(len(COMMANDS))
RANK_WIDE = ("PREA", "REF")
LEVELS = ("channel", "rank", "bankgroup", "bank")
LV_CHANNEL, LV_RANK, LV_BANKGROUP, LV_BANK = range(len(LEVELS))
