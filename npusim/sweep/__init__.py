"""Parameter sweeps: a grid of configs and workloads, one simulation per point, run on Dask,
resumable, and returned as one labelled ``xarray.Dataset``.

    from npusim.sweep import run_sweep, open_sweep
    ds = run_sweep("configs/sweeps/resnet18_grid.toml", "results/grid.h5", workers=2)
    ds = open_sweep("results/grid.h5")        # later, in a notebook
    ds.total_cycles.sel(num_cores=4)

The sweep file format is described in :mod:`npusim.sweep.spec`.
"""

from npusim.sweep.dataset import open_sweep
from npusim.sweep.run import run_sweep
from npusim.sweep.spec import load_sweep

__all__ = ["load_sweep", "open_sweep", "run_sweep"]
