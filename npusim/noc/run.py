"""``npusim noc``: build a config's network with one traffic node per site and measure it
under synthetic traffic (``npusim.noc.traffic``), optionally as a Booksim config file
describes it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from npusim.config import load_config
from npusim.config.load import Overrides
from npusim.errors import NpusimError
from npusim.noc.booksim import read_booksim
from npusim.noc.placement import synthetic_sites
from npusim.noc.tables import build_network
from npusim.noc.topologies import topology_module
from npusim.noc.traffic import Measurement, NocRun, Traffic, measure


def network_for(cfg, sites=None, msg_classes: int = 1, skip: bool = True):
    """The router network of ``cfg.noc`` with an endpoint on each of ``sites`` (default:
    one traffic node per site of the topology)."""
    topo = topology_module(cfg.noc.type).build(cfg.noc, cfg.num_cores, cfg.memory.channels)
    if sites is None:
        sites = synthetic_sites(topo)
    return build_network(topo, sites, cfg.noc, msg_classes=msg_classes, skip=skip)


def run_noc(config: str | Path | None = None, overrides: Overrides = (), *,
            booksim: str | Path | None = None, traffic: dict | None = None,
            measurement: dict | None = None, skip: bool = True) -> NocRun:
    """Measure a network alone. ``traffic`` and ``measurement`` override fields of
    :class:`Traffic` and :class:`Measurement` (after the Booksim file, if any)."""
    notes: list[str] = []
    base_traffic, base_meas = Traffic(), Measurement()
    noc_overrides: dict = {}
    if booksim is not None:
        bf = read_booksim(booksim)
        noc_overrides, base_traffic, base_meas, notes = bf.noc, bf.traffic, bf.measurement, bf.notes
    if isinstance(overrides, str):
        overrides = [overrides]
    if isinstance(overrides, dict):
        merged: dict | list = {**noc_overrides, **overrides}
    else:
        merged = [f"{k}={_toml(v)}" for k, v in noc_overrides.items()] + list(overrides)
    cfg = load_config(config, merged)
    try:
        tr = replace(base_traffic, **(traffic or {}))
        meas = replace(base_meas, **(measurement or {}))
    except TypeError as err:
        raise NpusimError(f"unknown traffic or measurement setting: {err}") from None
    if "hotspots" in (traffic or {}) and tr.pattern != "hotspot":
        source = ("given" if "pattern" in (traffic or {})
                  else "the Booksim file's" if booksim is not None else "the default")
        raise NpusimError(f"hotspot nodes apply to hotspot traffic, and the traffic is "
                          f"{tr.pattern} ({source}): use --traffic hotspot")
    net = network_for(cfg, skip=skip)
    shape = None  # nodes one per router of a k-ary n-cube: its shape (neighbor, tornado)
    if cfg.noc.type in ("mesh", "torus", "ring"):
        shape = [int(c) + 1 for c in net.topo.coords.max(axis=0)]
    result = measure(net, tr, meas, shape=shape)
    result.topology = {
        "type": cfg.noc.type, "routers": net.topo.n_routers, "nodes": net.n_nodes,
        "links": net.topo.n_links, "dims": shape, "router": _router_dict(cfg.noc.router),
        "notes": notes,
    }
    return result


def _router_dict(rc) -> dict:
    from dataclasses import asdict
    return asdict(rc)


def _toml(value) -> str:
    """A value as a TOML literal for a ``key=value`` override."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def replay_packets(net, packets, max_cycles: int = 10_000_000):
    """Send ``packets`` (rows of source node, destination node, flits, creation cycle and
    optionally message class) through a fresh network ``net``; each source sends its
    packets in list order. Returns an array [packet, 2]: the cycle each head left its
    source and the cycle each tail arrived."""
    import numpy as np

    from npusim.kernels.network import replay as kr

    pk = np.zeros((len(packets), kr.N_PL_FIELDS), dtype=np.int64)
    given = np.asarray(packets, dtype=np.int64).reshape(len(packets), -1)
    pk[:, :given.shape[1]] = given
    N = net.n_nodes
    if len(pk) and (pk[:, :2].min() < 0 or pk[:, :2].max() >= N or pk[:, 2].min() < 1
                    or pk[:, 4].max() >= net.msg_classes):
        raise NpusimError(f"packets need nodes in 0..{N - 1}, at least one flit and a "
                          f"message class below {net.msg_classes}")
    order = np.lexsort((np.arange(len(pk)), pk[:, kr.PL_SRC])).astype(np.int64)
    counts = np.bincount(pk[:, kr.PL_SRC], minlength=N)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    last = (first + counts).astype(np.int64)
    out = np.full((len(pk), kr.N_PO_FIELDS), -1, dtype=np.int64)
    kr.run_packets(net.state, net.tables, net.params, pk, order, first, last, out, max_cycles)
    return out
