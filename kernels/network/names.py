"""Names the router network's kernels and the config share (plain Python, no numba, so
the config schema can import it). An allocator's id is its position in ALLOCATORS."""

# Virtual channels per port, at most: a credit keeps its VC in the low bits of its ring
# entry (kernels/network/state.py CR_VC_BITS), and VC sets are bits of one word
MAX_VCS = 32

ALLOCATORS = ("islip", "separable_input_first", "separable_output_first", "wavefront")
ALLOC_ISLIP, ALLOC_SEPARABLE_INPUT_FIRST, ALLOC_SEPARABLE_OUTPUT_FIRST, ALLOC_WAVEFRONT = range(4)

# What an arbiter prefers before its round robin (noc.router.priority): nothing, or the
# older packet (Booksim's priority = age; network/state.py AgedNocParams)
PRIORITIES = ("none", "age")
