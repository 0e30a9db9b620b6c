"""The router network as the engine's NoC (kernels/router_network.py): a DMA round trip
through a mesh worked out by hand, every flit delivered and every credit back after a run
under back-pressure, skip-ahead changing nothing, the trace's NoC variables against the
network's own counters, and the chiplet preset. (Its energy: tests/test_energy.py; ONNXim's
booksim2 configs: tests/test_onnxim_configs.py.)"""

import numpy as np
import pytest

from helpers import config, cycles, one_tile_program
from npusim.config import load_config
from npusim.engine import run_program
from npusim.kernels import state as ks
from npusim.kernels.network import state as kn
from npusim.program import Instr

# 1 core (gemmini_validation), one memory channel, core / NoC / memory at 1000 MHz
SIMPLE = ["memory.type=simple", "memory.latency=20", "memory.freq_mhz=1000",
          "noc.freq_mhz=1000", "noc.flit_bytes=8", "memory.channel_bytes_per_cycle=32"]
MESH = ["noc.type=mesh", "noc.dims=[4,4]"]


def loads(n, run_bytes=32):
    """One tile that loads n requests of 32 B (one DMA instruction)."""
    return one_tile_program([Instr.dma(True, 0, 0, n, run_bytes, 1, 0, run_bytes)])


@pytest.mark.parametrize("memory_router, routers", [(15, 7), (0, 1), (5, 3)])
def test_dma_round_trip_through_a_mesh_by_hand(memory_router, routers):
    """The core sends at cycle 0 and the network takes the request at 1; a 1-flit packet
    arrives 2 + 4 * routers cycles later (2 from the interface into the first router, 4
    per router with Booksim's meshconfig pipeline: VC allocation, switch allocation,
    switch traversal, link); the channel takes it the cycle after (the units run memory ->
    NoC -> cores within a cycle), answers 20 cycles later, and the 32 / 8 = 4-flit
    response takes 2 + 4 * routers + 3 back (X then Y both ways: as many routers)."""
    cfg = config(*SIMPLE, *MESH, f"noc.memory_routers=[{memory_router}]")
    expected = 1 + (2 + 4 * routers) + 1 + 20 + (2 + 4 * routers + 3)
    assert cycles(loads(1), cfg) == expected
    assert cycles(loads(1), cfg, skip=False) == expected


def test_crossbar_round_trip_is_unchanged():
    """noc.type = "crossbar" keeps its fixed-latency model (test_core_timing's sum)."""
    cfg = config(*SIMPLE, "noc.latency=4")
    assert cycles(loads(1), cfg) == 1 + 4 + 20 + (4 + 4 - 1)


def check_network_empty(st):
    ns = st.noc.net
    np_ = st.noc.net_p
    assert ns.glob[kn.NG_FLITS] == 0 and ns.busy.sum() == 0 and ns.occ.sum() == 0
    assert ns.glob[kn.NG_FREE] == ns.pkt_free.shape[0]  # every packet row returned
    assert sorted(ns.pkt_free.tolist()) == list(range(ns.pkt_free.shape[0]))
    rows = st.noc.net_tab.link_class != kn.LC_NONE
    credits = ns.ovc[:, :, kn.OV_CREDITS]
    # every output row's downstream VCs hold all their credits once the returns are applied
    back = credits[rows] + np.array([[np.sum((ns.cr[q, :] & kn.CR_VC_MASK == v) & _pending(ns, q))
                                      for v in range(np_.vcs)] for q in np.flatnonzero(rows)])
    assert (back == np_.depth).all()
    assert (ns.nic[:, kn.NI_PKT] == -1).all()


def _pending(ns, q):
    """Mask of the credit ring slots of output row q still on their way back."""
    K = ns.cr.shape[1]
    mask = np.zeros(K, dtype=bool)
    h, n = ns.cr_ctl[kn.CR_HEAD, q], ns.cr_ctl[kn.CR_COUNT, q]
    mask[(h + np.arange(n)) % K] = True
    return mask


def test_every_flit_delivered_and_every_credit_back_under_back_pressure():
    """A 2x2 mesh with 2 VCs of 2 flits per port and a channel input ring kept full by a
    slow channel: cores stall on full rings and credits, yet every request and response
    arrives, the interfaces injected exactly the flits the DMA traffic implies (1 per
    read request, 32 / 8 = 4 per response), ejected as many, and afterwards the network is
    empty with every credit back."""
    cfg = config("memory.type=simple", "memory.latency=5", "memory.freq_mhz=1000",
                 "noc.freq_mhz=1000", "noc.flit_bytes=8", "memory.channel_bytes_per_cycle=4",
                 "noc.type=mesh", "noc.dims=[2,2]", "noc.router.vcs=2",
                 "noc.router.vc_buffer_flits=2", "num_cores=1")
    n = 100
    raw = run_program(loads(n), cfg)
    st = raw.state
    assert st.cores.layer_st[ks.L_LD_BYTES].sum() == 32 * n
    check_network_empty(st)
    ns, tab = st.noc.net, st.noc.net_tab
    inject = tab.link_class == kn.LC_ENDPOINT
    R, P = st.noc.net_p.n_routers, st.noc.net_p.ports
    from_nics = np.arange(len(inject)) >= R * P
    assert ns.link_flits[inject & from_nics].sum() == n * (1 + 4)
    assert ns.link_flits[inject & ~from_nics].sum() == n * (1 + 4)  # ejected
    # 32 B per 4 memory cycles: the channel, not the network, sets the pace
    assert cycles(loads(n), cfg) >= 8 * n


@pytest.mark.parametrize("extra", [["noc.type=mesh"], ["noc.type=torus", "noc.dims=[4,2]"],
                                   ["noc.type=ring", "noc.dims=[6]"],
                                   ["noc.type=mesh", "noc.core_ports=2"]])
def test_skip_ahead_changes_nothing_on_a_router_network(extra):
    """mobile (4 cores, DDR4) with two channels: loads that conflict in the banks and
    stores, on three topologies, and with two interfaces per core (the core's ring taken
    by its interfaces in turn), stepping every edge or skipping ahead."""
    cfg = load_config("mobile", ["memory.channels=2", *extra])
    prog = one_tile_program([Instr.dma(True, 0, 0, 48, 8192, 1, 0, 64),
                             Instr.dma(False, 1, 1 << 20, 16, 64, 1, 0, 64)], tiles=6)
    a = run_program(prog, cfg, skip=True).state
    b = run_program(prog, cfg, skip=False).state
    assert a.glob[ks.G_END] == b.glob[ks.G_END]
    assert np.array_equal(a.noc.net.link_flits, b.noc.net.link_flits)
    assert np.array_equal(a.cores.core, b.cores.core)
    assert np.array_equal(a.mem.dbank, b.mem.dbank)
    check_network_empty(a)


def test_trace_records_link_flits_and_router_occupancy(tmp_path):
    """The trace's per-link and per-router variables add up to the network's own counters
    (link by link), the injected request and response flits to what the DMA traffic
    implies, and occupancy is a mean number of flits between 0 and the buffers' size."""
    from npusim.simulation import simulate
    from npusim.trace import open_trace

    path = tmp_path / "run.h5"
    cfg = ["noc.type=mesh", "noc.dims=[2,2]", "memory.channels=2"]
    res = simulate("models/tiny_cnn.onnx", "mobile", overrides=cfg, trace=path)
    ds = open_trace(path)
    raw_flits = ds.noc_link_flits.sum("time").values
    assert raw_flits.sum() > 0 and ds.sizes["link"] == 8  # a 2x2 mesh: 4 links each way
    assert set(zip(ds.link_src_router.values, ds.link_dst_router.values)) == {
        (0, 1), (1, 0), (2, 3), (3, 2), (0, 2), (2, 0), (1, 3), (3, 1)}
    data = res.to_dict()
    reqs = sum(c["load_requests"] + c["store_requests"] for c in data["cores"])
    assert int(ds.noc_request_flits.sum()) + int(ds.noc_response_flits.sum()) == \
        reqs * (1 + 64 // 8)
    # a flit passes the switch of every router on its path: one more than the links
    injected = int(ds.noc_request_flits.sum()) + int(ds.noc_response_flits.sum())
    assert int(ds.noc_router_flits.sum()) == int(ds.noc_link_flits.sum()) + injected
    occ = ds.noc_router_occupancy
    assert float(occ.min()) >= 0 and 0 < float(occ.max()) <= 5 * 16 * 8
    util = ds.noc_link_utilization
    assert 0 < float(util.max()) <= 1


def test_chiplet_preset_runs_and_crosses_the_dies(tmp_path):
    """The chiplet example: two 2x2 dies, one HBM stack each; half of the channels sit on
    the other die, so the die-to-die links (x = 1 <-> x = 2) carry flits, and being a
    quarter of a flit wide they are busy 4 cycles per flit."""
    from npusim.simulation import simulate
    from npusim.trace import open_trace

    path = tmp_path / "run.h5"
    simulate("models/tiny_cnn.onnx", "chiplet", trace=path)
    ds = open_trace(path).sum("time")
    x = lambda r: r % 4  # noqa: E731
    d2d = [(x(a), x(b)) in ((1, 2), (2, 1)) for a, b in zip(ds.link_src_router.values,
                                                          ds.link_dst_router.values)]
    assert sum(d2d) == 4
    flits = ds.noc_link_flits.values
    assert flits[d2d].min() > 0


def test_the_steps_views_of_the_packed_network_are_pythons():
    """The engine's NoC step builds its views of the network's one buffer from the layout
    (kernels/network/packed.py); they must be the very tables Python built and reads:
    the same memory, shape and strides for every table, each on a cache line of its own,
    none overlapping another. A wrong offset, dimension or stride would have the step read
    or write another table's entries."""
    from numba import literal_unroll, njit

    from npusim.kernels.network.packed import network_views
    from npusim.noc.chip import chip_network

    @njit
    def describe(tables, out, k):
        for a in literal_unroll(tables):
            out[k] = (np.int64(a.ctypes.data), a.ndim, a.size, a.shape[0], a.shape[-1], a.strides[0])
            k += 1
        return k

    @njit
    def kernel_views(mem, layout, out):
        ns, nt = network_views(mem, layout)
        describe(nt, out, describe(ns, out, 0))

    net = chip_network(load_config("server", ["noc.type=mesh"]), trace_ring=4)
    tables = tuple(net.state) + tuple(net.tables)
    out = np.zeros((len(tables), 6), dtype=np.int64)
    kernel_views(net.mem, net.layout, out)
    python = [(a.ctypes.data, a.ndim, a.size, a.shape[0], a.shape[-1], a.strides[0])
              for a in tables]
    assert [tuple(row) for row in out] == python
    spans = sorted((a.ctypes.data, a.ctypes.data + a.nbytes) for a in tables)
    assert all(start % 64 == 0 for start, _ in spans)
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))
    assert all(np.shares_memory(a, net.mem) for a in tables)
