"""The network between cores and memory: topologies as data, placement, the tables the
router kernels read, synthetic traffic and Booksim config files."""
