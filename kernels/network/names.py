"""Names the router network's kernels and the config share (plain Python, no numba, so
the config schema can import it). An allocator's id is its position in ALLOCATORS."""

ALLOCATORS = ("islip", "separable_input_first", "separable_output_first", "wavefront")
ALLOC_ISLIP, ALLOC_SEPARABLE_INPUT_FIRST, ALLOC_SEPARABLE_OUTPUT_FIRST, ALLOC_WAVEFRONT = range(4)
