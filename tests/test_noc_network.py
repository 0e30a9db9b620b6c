"""The router network (npusim/noc, kernels/network): topologies and their routes, zero-load
latency worked out by hand, credits and flits conserved under saturation, skip-ahead
changing nothing, the allocators against their definitions."""

import itertools

import numpy as np
import pytest

from npusim.config import load_config
from npusim.errors import NpusimError
from npusim.kernels.network import state as ks
from npusim.noc.run import network_for, replay_packets, run_noc
from npusim.noc.topologies import topology_module

MESH = ["noc.type=mesh", "noc.dims=[4,4]"]


def cfg_of(*overrides, preset="mobile"):
    return load_config(preset, list(overrides))


def one_by_one(net, pairs, size=1, gap=200):
    """Each (src, dst) packet alone in the network: latency of each (tail arrival minus
    creation)."""
    pk = [(s, d, size, gap * k) for k, (s, d) in enumerate(pairs)]
    out = replay_packets(net, pk)
    assert (out[:, 1] >= 0).all()
    return out[:, 1] - np.array([p[3] for p in pk])


def routers_on_path(topo, s, d):
    return len(topo.hops(s, d)) + 1


# ---------------------------------------------------------------------------- zero load

@pytest.mark.parametrize("size", [1, 4])
def test_zero_load_latency_of_a_mesh_is_hops_times_pipeline(size):
    """Booksim's meshconfig pipeline: VC allocation, switch allocation, switch traversal
    and a 1-cycle link per router (4 cycles), 2 cycles from the source to the first
    router, and a packet's other flits one cycle apart: 2 + 4 * routers + (size - 1)."""
    cfg = cfg_of(*MESH)
    net = network_for(cfg)
    pairs = list(itertools.product(range(16), repeat=2))
    lat = one_by_one(net, pairs, size)
    xy = lambda n: (n % 4, n // 4)  # noqa: E731
    routers = [abs(xy(s)[0] - xy(d)[0]) + abs(xy(s)[1] - xy(d)[1]) + 1 for s, d in pairs]
    assert lat.tolist() == [2 + 4 * h + size - 1 for h in routers]


def test_zero_load_latency_with_other_delays_and_longer_links():
    """Per router: routing 1 + VC allocation 2 + switch allocation 1 + traversal 2 cycles,
    then the link: 3 cycles between routers, 1 to the sink."""
    cfg = cfg_of(*MESH, "noc.router.routing_delay=1", "noc.router.vc_alloc_delay=2",
                 "noc.router.st_delay=2", "noc.link_latency=3")
    net = network_for(cfg)
    pairs = [(0, 15), (5, 6), (3, 3), (12, 1)]
    lat = one_by_one(net, pairs, 3)
    expect = []
    for s, d in pairs:
        h = routers_on_path(net.topo, s, d)
        expect.append(2 + h * (1 + 2 + 1 + 2) + 3 * (h - 1) + 1 + 2)
    assert lat.tolist() == expect


def test_narrow_links_serialize_flits():
    """Links half a flit wide pass a flit every 2 cycles: each router-to-router hop takes
    one cycle more for the head, and the flits leave the first such link 2 cycles apart.
    At the last router the head spends a cycle in VC allocation that the body flits do
    not (they bid for the switch on arrival), so the second flit reaches the sink 1 cycle
    after the head and the others 2 apart: the tail trails by 1 + 2 + 2."""
    cfg = cfg_of(*MESH, "noc.flit_bytes=16", "noc.link_bytes=8")
    net = network_for(cfg)
    lat = one_by_one(net, [(0, 3), (0, 15)], 4)
    for got, (s, d) in zip(lat, [(0, 3), (0, 15)]):
        h = routers_on_path(net.topo, s, d)
        assert got == 2 + 4 * h + (h - 1) + 1 + 2 + 2


def test_die_to_die_links_take_their_own_clock():
    """A 4x2 mesh cut in two dies along x: the links between x = 1 and x = 2 take 10
    cycles of a 500 MHz clock = 20 NoC cycles at 1000 MHz (19 more than an on-die link),
    and at a quarter of the flit width and half the clock pass a flit every 8 NoC cycles,
    the last of which the flit also waits for (7 more); its second flit then reaches the
    sink 7 cycles after the head (8 apart, less the head's VC allocation cycle)."""
    cfg = cfg_of("noc.type=mesh", "noc.dims=[4,2]", "noc.flit_bytes=32", "noc.freq_mhz=1000",
                 "noc.d2d.dies=[2,1]", "noc.d2d.latency=10", "noc.d2d.freq_mhz=500",
                 "noc.d2d.link_bytes=8")
    net = network_for(cfg)
    lat = one_by_one(net, [(1, 2), (0, 1), (2, 1), (5, 6)], 2)
    cross = 2 + 4 * 2 + 19 + 7 + 7
    assert lat.tolist() == [cross, 2 + 4 * 2 + 1, cross, cross]


@pytest.mark.parametrize("kind, extra", [
    ("torus", ["noc.dims=[4,4]"]), ("ring", ["noc.dims=[6]"]),
    ("fly", ["noc.radix=4", "noc.stages=2"]), ("crossbar", []),
])
def test_zero_load_latency_follows_each_topologys_route(kind, extra):
    cfg = cfg_of(f"noc.type={kind}", *extra)
    net = network_for(cfg)
    topo = net.topo
    n = net.n_nodes
    pairs = [(s, d) for s in range(n) for d in range(n) if (s * 7 + d) % 5 == 0]
    lat = one_by_one(net, pairs, 2)
    for got, (s, d) in zip(lat, pairs):
        a, b = int(topo.site_in[net.sites[s]]), int(topo.site_out[net.sites[d]])
        assert got == 2 + 4 * routers_on_path(topo, a, b) + 1


# ---------------------------------------------------------------------------- routes

def test_mesh_routes_x_then_y():
    topo = topology_module("mesh").build(cfg_of(*MESH).noc, 4, 1)
    for s, d in [(0, 15), (13, 2), (5, 5)]:
        path = [s] + [int(topo.link_dst[k]) for k in topo.hops(s, d)]
        xs = [r % 4 for r in path]
        ys = [r // 4 for r in path]
        turn = next((i for i in range(len(path)) if xs[i] == d % 4), 0)
        assert all(y == s // 4 for y in ys[:turn + 1]) and all(x == d % 4 for x in xs[turn:])
        assert len(path) - 1 == abs(s % 4 - d % 4) + abs(s // 4 - d // 4)


@pytest.mark.parametrize("dims", [[5], [4, 4], [3, 6]])
def test_torus_dateline_classes_break_every_cycle(dims):
    """Every hop's (link, VC class) channel waits only on the next hop's: for each class
    the channel dependency graph of all routes has no cycle, so no deadlock. Routes are
    minimal (never longer than half a ring per dimension)."""
    topo = topology_module("torus").build(
        cfg_of("noc.type=torus", f"noc.dims={dims}").noc, 4, 1)
    assert topo.vc_classes == 2
    deps: dict = {}
    R = topo.n_routers
    for s in range(R):
        for d in range(R):
            hops = topo.hops(s, d)
            assert len(hops) <= sum(k // 2 for k in dims)
            r = s
            chans = []
            for link in hops:
                chans.append((link, topo.vc_class(s, r, d)))
                r = int(topo.link_dst[link])
            for a, b in zip(chans, chans[1:]):
                deps.setdefault(a, set()).add(b)
    seen, done = set(), set()

    def visit(c):
        if c in done:
            return
        assert c not in seen, "cyclic channel dependency"
        seen.add(c)
        for nxt in deps.get(c, ()):
            visit(nxt)
        done.add(c)

    for c in list(deps):
        visit(c)


def test_torus_classes_are_booksims_partition():
    """Booksim's dim_order_torus: class 1 on every hop of a dimension when the source's
    coordinate there is above the destination's (going the positive way: the packets that
    cross the wrap-around link; the negative way: those that do not), else class 0."""
    def path(topo, s, d):  # the routers a packet visits after s, and its class at each hop
        routers, cls, r = [], [], s
        for link in topo.hops(s, d):
            cls.append(topo.vc_class(s, r, d))
            r = int(topo.link_dst[link])
            routers.append(r)
        return routers, cls

    ring = topology_module("torus").build(cfg_of("noc.type=torus", "noc.dims=[5]").noc, 4, 1)
    assert path(ring, 4, 1) == ([0, 1], [1, 1])  # the positive way, across the wrap-around
    assert path(ring, 0, 2) == ([1, 2], [0, 0])  # the positive way, not across it
    assert path(ring, 1, 4) == ([0, 4], [0, 0])  # the negative way, across it
    assert path(ring, 3, 1) == ([2, 1], [1, 1])  # the negative way, not across it
    grid = topology_module("torus").build(cfg_of("noc.type=torus", "noc.dims=[5,5]").noc, 4, 1)
    # (1,2) -> (4,3): x the negative way across the wrap-around (0), then y up by one (0)
    assert path(grid, 1 + 5 * 2, 4 + 5 * 3)[1] == [0, 0, 0]
    # (3,4) -> (0,1): x the positive way across it (1, 1), then y the same way (1, 1)
    assert path(grid, 3 + 5 * 4, 0 + 5 * 1)[1] == [1, 1, 1, 1]


def test_fly_takes_one_router_per_stage():
    topo = topology_module("fly").build(cfg_of("noc.type=fly", "noc.radix=3",
                                               "noc.stages=3").noc, 4, 1)
    for t_in in range(27):
        for t_out in range(27):
            a, b = int(topo.site_in[t_in]), int(topo.site_out[t_out])
            assert len(topo.hops(a, b)) == 2


def test_custom_network_from_an_anynet_file(tmp_path):
    f = tmp_path / "net.txt"
    f.write_text("router 0 node 0 node 1 router 1 5\n"
                 "router 1 node 2 router 2\n"
                 "router 2 node 3 router 0 // a triangle\n")
    cfg = cfg_of("noc.type=custom", f"noc.file=\"{f}\"")
    topo = topology_module("custom").build(cfg.noc, 2, 2)
    # 0 -> 1 costs 5 directly but 2 through router 2 (0->2 is 1 cycle, written on line 3)
    assert [int(topo.link_dst[k]) for k in topo.hops(0, 1)] == [2, 1]
    assert topo.nodes == [0, 0, 1, 2]
    net = network_for(cfg)
    lat = one_by_one(net, [(0, 2), (2, 0)], 1)
    # 0 -> 2 -> 1: routers 0, 2, 1 with 1-cycle links; 1 -> 0 is 1 cycle (the reverse of
    # the 5-cycle link keeps Booksim's default)
    assert lat.tolist() == [2 + 4 * 3, 2 + 4 * 2]


def test_custom_network_breaks_ties_and_numbers_ports_as_booksim(tmp_path):
    """Two 3-hop paths from router 0 to router 5 (0-1-4-5 and 0-2-3-5): Booksim's anynet
    Dijkstra from router 0 reaches 3 before 4 (same distance, lower number), so 5's
    predecessor is 3 and the path goes by router 2, although the link to 1 is the lower
    one. A router's ports: its endpoints first, then its links by the router they join."""
    f = tmp_path / "net.txt"
    f.write_text("router 0 node 0 router 1 router 2\nrouter 1 router 4\nrouter 2 router 3\n"
                 "router 3 router 5\nrouter 4 router 5\nrouter 5 node 1\n")
    cfg = cfg_of("noc.type=custom", f"noc.file=\"{f}\"")
    topo = topology_module("custom").build(cfg.noc, 1, 1)
    assert [int(topo.link_dst[k]) for k in topo.hops(0, 5)] == [2, 3, 5]
    # back from 5, routers 1 and 2 are both 2 hops away and 1 is taken first: by 4 and 1
    assert [int(topo.link_dst[k]) for k in topo.hops(5, 0)] == [4, 1, 0]
    net = network_for(cfg)
    node0 = topo.nodes[0]  # router 0: endpoint 0 on port 0, then routers 1 and 2
    assert net.out_port_node[node0, 0] == 0
    assert [int(topo.link_dst[k]) for k in net.out_port_link[node0, 1:3]] == [1, 2]


@pytest.mark.parametrize("text, message", [
    ("router 0 node 0\nswitch 1\n", "must start with 'router <id>'"),
    ("router 0 node 0 router\n", "expected 'router <id> .latency.' or 'node <id>'"),
    ("router 0 node 0\nrouter 1 node 0\n", "node 0 is already attached"),
    ("router 0 node 0\nrouter 1 node 1\n", "cannot reach router"),
    ("router 0 node 0 3 router 1\nrouter 1 node 1\n", "node 0 has latency 3"),
])
def test_bad_anynet_files_are_clear_errors(tmp_path, text, message):
    f = tmp_path / "bad.txt"
    f.write_text(text)
    with pytest.raises(NpusimError, match=message):
        topology_module("custom").build(cfg_of("noc.type=custom", f"noc.file=\"{f}\"").noc, 1, 1)


def test_placement_defaults_and_errors():
    cfg = cfg_of("noc.type=mesh", "noc.dims=[4,2]", "memory.type=simple",
                 "memory.channels=4", "memory.latency=10",
                 "memory.channel_bytes_per_cycle=8", "memory.freq_mhz=1000")
    from npusim.noc.placement import place
    topo = topology_module("mesh").build(cfg.noc, 4, 4)
    pl = place(topo, cfg.noc, 4, 4)
    assert pl.core_sites == (0, 1, 2, 3)
    assert pl.memory_sites == (0, 3, 4, 7)  # west and east edges, alternating
    bad = cfg_of("noc.type=mesh", "noc.dims=[2,2]", "noc.core_routers=[0,1,2,9]")
    with pytest.raises(NpusimError, match=r"noc.core_routers .* site 9 does not exist"):
        place(topology_module("mesh").build(bad.noc, 4, 1), bad.noc, 4, 1)
    with pytest.raises(NpusimError, match="noc.core_routers lists 2 sites for 4 cores"):
        cfg_of("noc.type=mesh", "noc.core_routers=[0,1]")
    with pytest.raises(NpusimError, match="noc.d2d.dies = .* must give the dies"):
        cfg_of("noc.type=mesh", "noc.dims=[4,4]", "noc.d2d.dies=[2]")


def test_too_few_vcs_for_a_torus_is_a_clear_error():
    with pytest.raises(NpusimError, match="noc.router.vcs = 1 is too few: a torus"):
        network_for(cfg_of("noc.type=torus", "noc.dims=[4,4]", "noc.router.vcs=1"))


# ---------------------------------------------------------------------------- invariants

def _credit_invariant(net):
    """For every output VC: its credits + flits in (or on their way to) the downstream VC
    + credits on their way back = the VC's buffer depth."""
    ns, nt, p = net.state, net.tables, net.params
    K = ns.cr.shape[1]
    for q in range(ns.ovc.shape[0]):
        d = nt.link[ks.LK_DST, q]
        if d < 0:
            continue
        back = np.zeros(p.vcs, dtype=np.int64)
        h, n = ns.cr_ctl[ks.CR_HEAD, q], ns.cr_ctl[ks.CR_COUNT, q]
        for i in range(n):
            back[ns.cr[q, (h + i) % K] & ks.CR_VC_MASK] += 1
        total = ns.ovc[q, :, ks.OV_CREDITS] + ns.ivc[d, :, ks.IV_COUNT] + back
        assert (total == p.depth).all(), (q, total)


def test_saturated_network_loses_and_duplicates_nothing_and_keeps_its_credits():
    """Every node sends 60 four-flit packets at once to random nodes (far beyond what the
    network carries): every packet arrives once, every flit crosses its ejection link
    once, credits balance at every stop, and at the end the network is empty with every
    credit and VC back."""
    cfg = cfg_of(*MESH, "noc.router.vcs=4", "noc.router.vc_buffer_flits=4")
    net = network_for(cfg)
    rng = np.random.default_rng(5)
    n = net.n_nodes
    pk = [(s, int(rng.integers(n)), 4, 0) for s in range(n) for _ in range(60)]
    arr = np.array(pk, dtype=np.int64)
    _, t = replay_with_stops(net, pk, _credit_invariant)
    ns = net.state
    assert ns.glob[ks.NG_FLITS] == 0
    assert ns.glob[ks.NG_FREE] == ns.pkt_free.shape[0]
    eject_rows = [q for q in range(ns.ovc.shape[0])
                  if net.tables.link[ks.LK_DST, q] >= net.params.n_routers * net.params.ports]
    assert ns.link_flits[eject_rows].sum() == 4 * len(pk)
    # per node: flits out of its ejection link = 4 x packets addressed to it
    to_node = np.bincount(arr[:, 1], minlength=n) * 4
    got = {int(net.tables.link[ks.LK_DST, q]) - net.params.n_routers * net.params.ports:
           int(ns.link_flits[q]) for q in eject_rows}
    assert [got[i] for i in range(n)] == to_node.tolist()
    receive_all(net, t + 100)
    assert (ns.ovc[:, :, ks.OV_CREDITS] == net.params.depth).all()
    assert (ns.ovc[:, :, ks.OV_OWNER] == -1).all()
    assert (ns.ov_free == (1 << net.params.vcs) - 1).all()


def replay_with_stops(net, pk, check, every=97):
    """``replay_packets``, stopping every ``every`` cycles to run ``check(net)``; returns
    what it returns and the cycle reached."""
    from npusim.kernels.network import replay as kr

    full = np.zeros((len(pk), kr.N_PL_FIELDS), dtype=np.int64)
    full[:, :4] = np.array(pk, dtype=np.int64)
    order = np.lexsort((np.arange(len(pk)), full[:, 0])).astype(np.int64)
    counts = np.bincount(full[:, 0], minlength=net.n_nodes)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    last = first + counts
    out = np.full((len(pk), kr.N_PO_FIELDS), -1, dtype=np.int64)
    t = 0
    while (out[:, 1] < 0).any():
        t = kr.run_packets(net.state, net.tables, net.params, full, order, first, last, out,
                           t + every)
        check(net)
        assert t < 100_000
    return out, t


def _noted_routes_and_credit_dues(net):
    """What the routers note to save loads matches what it summarizes: every occupied
    router input VC's output port and output VC set (``route_head``) are its front
    packet's route, the flits behind its front flit (``IV_FRONT``, the rest in ``fb``)
    follow it packet by packet (a flit after a non-tail is of the same packet and not a
    head, a flit after a tail is a head), and every credit ring's ``CR_NEXT`` is the due
    cycle of its first credit (``isa.NEVER`` when empty)."""
    from npusim.kernels.isa import NEVER

    ns, nt, p = net.state, net.tables, net.params
    for q in range(p.n_routers * p.ports):
        r = q // p.ports
        for v in range(p.vcs):
            if (ns.occ[q] >> v) & 1:
                pkt = ns.ivc[q, v, ks.IV_FRONT] >> ks.F_BITS
                dest, m = ns.pkt[ks.PK_DEST, pkt], ns.pkt[ks.PK_CLASS, pkt]
                route = ns.ivc[q, v, ks.IV_ROUTE]
                assert route & ks.ROUTE_OUT_MASK == nt.route[r, dest], (q, v)
                c = nt.route_class[r, dest]
                if c < 0:  # a torus hop: the packet's class in that dimension
                    c = nt.dateline[ns.pkt[ks.PK_SRC, pkt], dest] >> (-1 - c) & 1
                assert route >> ks.ROUTE_MASK_SHIFT == nt.vc_mask[m, c]
                flit, h = ns.ivc[q, v, ks.IV_FRONT], ns.ivc[q, v, ks.IV_HEAD]
                for k in range(ns.ivc[q, v, ks.IV_COUNT] - 1):
                    behind = ns.fb[q, v, (h + k) % p.depth, ks.FB_FLIT]
                    if flit & ks.F_TAIL:
                        assert behind & ks.F_HEAD, (q, v, k)
                    else:
                        assert behind >> ks.F_BITS == flit >> ks.F_BITS, (q, v, k)
                        assert not behind & ks.F_HEAD, (q, v, k)
                    flit = behind
    for q in range(ns.cr.shape[0]):
        h, n = ns.cr_ctl[ks.CR_HEAD, q], ns.cr_ctl[ks.CR_COUNT, q]
        due = ns.cr[q, h] >> ks.CR_VC_BITS if n else NEVER
        assert ns.cr_ctl[ks.CR_NEXT, q] == due, q


@pytest.mark.parametrize("wait_tail", ["true", "false"])
def test_noted_routes_and_credit_dues_stay_true_and_change_no_packet(wait_tail):
    """Packets of 1 to 5 flits from every node to random nodes, far beyond saturation,
    through routers of 4 VCs of 4 flits (without ``wait_tail`` a head also comes to the
    front behind a tail, not only into an empty VC): at every stop each VC's noted route
    and each credit ring's noted due cycle are the true ones, and stepping every router
    every cycle gives every packet the same departure and arrival cycle."""
    cfg = cfg_of(*MESH, "noc.router.vcs=4", "noc.router.vc_buffer_flits=4",
                 f"noc.router.wait_for_tail_credit={wait_tail}")
    rng = np.random.default_rng(11)
    pk = [(s, int(rng.integers(16)), int(rng.integers(1, 6)), int(c))
          for c in range(0, 400, 4) for s in range(16)]
    a, _ = replay_with_stops(network_for(cfg, skip=True), pk, _noted_routes_and_credit_dues,
                             every=13)
    b = replay_packets(network_for(cfg, skip=False), pk)
    assert (a[:, 1] >= 0).all() and np.array_equal(a, b)
    latency = a[:, 1] - np.array([p[3] for p in pk])
    assert latency.mean() > 4 * latency.min()  # congested: VCs queue heads behind tails


def receive_all(net, t):
    """Apply every credit due by cycle t (the routers apply them lazily)."""
    from npusim.kernels.network.router import receive_credits

    for q in range(net.state.ovc.shape[0]):
        receive_credits(net.state, net.params, q, t)


@pytest.mark.parametrize("rate, flits", [(0.02, 1), (0.3, 4), (1.0, 1)])
def test_skip_ahead_changes_nothing(rate, flits):
    kw = dict(traffic={"rate": rate, "packet_flits": flits, "seed": 3},
              measurement={"cycles": 3000, "warmup_periods": 1})
    a = run_noc("mobile", MESH, skip=True, **kw)
    b = run_noc("mobile", MESH, skip=False, **kw)
    assert a.avg_packet_latency_cycles == b.avg_packet_latency_cycles
    assert a.accepted_flits_per_node_cycle == b.accepted_flits_per_node_cycle
    assert a.link_flits == b.link_flits and a.router_flits == b.router_flits
    assert a.saturated == b.saturated == (rate == 1.0)
    assert a.sim_cycles == b.sim_cycles  # the drain ends on the same cycle


def test_drain_ends_the_cycle_the_last_measured_packet_arrives():
    """As Booksim's drain loop, which steps only while a measured packet is out: no whole
    1000-cycle block past it (whose threshold check Booksim never makes)."""
    r = run_noc("mobile", MESH, traffic={"rate": 0.1, "seed": 4},
                measurement={"cycles": 2000, "warmup_periods": 1})
    drain_start = 1000 + 2000  # one warm-up period, then the measured cycles
    assert not r.saturated
    assert drain_start < r.sim_cycles <= drain_start + r.max_packet_latency_cycles + 1


@pytest.mark.parametrize("wait_tail", ["true", "false"])
def test_heads_starved_of_vcs_sleep_without_changing_a_packet(wait_tail):
    """Every node floods two hot spots with one-flit packets through routers of 2 VCs:
    most heads find no free output VC. The routers leave such heads out of VC allocation
    and sleep until a credit (or their own tail) can free one; stepping every router
    every cycle instead gives every packet the same departure and arrival cycle."""
    cfg = cfg_of(*MESH, "noc.router.vcs=2", "noc.router.vc_buffer_flits=2",
                 f"noc.router.wait_for_tail_credit={wait_tail}")
    rng = np.random.default_rng(5)
    pk = [(int(s), int(rng.choice([0, 5])), 1, int(c))
          for c in range(300) for s in rng.permutation(16)[:6] if s not in (0, 5)]
    a = replay_packets(network_for(cfg, skip=True), pk)
    b = replay_packets(network_for(cfg, skip=False), pk)
    assert (a[:, 1] >= 0).all() and np.array_equal(a, b)
    latency = a[:, 1] - np.array([p[3] for p in pk])
    assert latency.mean() > 10 * latency.min()  # deep in saturation: heads wait for VCs


def test_deterministic_and_seed_dependent():
    kw = dict(traffic={"rate": 0.2}, measurement={"cycles": 2000, "warmup_periods": 1})
    a = run_noc("mobile", MESH, **kw)
    b = run_noc("mobile", MESH, **kw)
    c = run_noc("mobile", MESH, traffic={"rate": 0.2, "seed": 9},
                measurement={"cycles": 2000, "warmup_periods": 1})
    assert a.to_dict()["link_flits"] == b.to_dict()["link_flits"]
    assert a.avg_packet_latency_cycles == b.avg_packet_latency_cycles
    assert a.link_flits != c.link_flits


def test_accepted_throughput_follows_the_offered_load_below_saturation():
    r = run_noc("mobile", MESH, traffic={"rate": 0.25, "packet_flits": 4})
    assert not r.saturated
    assert r.accepted_flits_per_node_cycle == pytest.approx(0.25, rel=0.04)
    assert r.avg_packet_latency_cycles > 2 + 4 * 3.5 + 3  # above zero load (avg 3.5 routers)


# ---------------------------------------------------------------------------- allocators

def _first(candidates, pri=None):
    """An arbiter's pick from ``candidates`` in its round-robin order: the first, or with
    priorities (Booksim's separable allocators under ``priority = age``) the first of the
    highest priority; -1 if none."""
    candidates = list(candidates)
    if not candidates:
        return -1
    return max(candidates, key=pri) if pri else candidates[0]


def reference_switch(kind, iters, req, gptr, aptr, wf, pri=None):
    """The allocators as Booksim defines them (module docstring of kernels/network/alloc.py),
    on a dense boolean request matrix; returns the match and updates the pointers.
    ``pri[i][o]``: the request's priority, which Booksim's separable allocators' arbiters
    prefer before their round robin (iSLIP ignores it)."""
    P = len(req)
    inm, outm = [-1] * P, [-1] * P
    if kind == "islip":
        pri = None
    if kind == "wavefront":
        for d in range(P):
            for o in range(P):
                i = (wf[0] + d + P - o) % P
                if req[i][o] and inm[i] < 0 and outm[o] < 0:
                    inm[i], outm[o] = o, i
        wf[0] = (wf[0] + 1) % P
        return inm
    for it in range(iters):
        if kind == "separable_input_first":
            choice = [_first((o for o in [(aptr[i] + k) % P for k in range(P)]
                              if req[i][o] and outm[o] < 0),
                             pri and (lambda o, i=i: pri[i][o])) if inm[i] < 0 else -1
                      for i in range(P)]
            for o in range(P):
                if outm[o] >= 0:
                    continue
                i = _first((i for i in [(gptr[o] + k) % P for k in range(P)] if choice[i] == o),
                           pri and (lambda i, o=o: pri[i][o]))
                if i >= 0:
                    inm[i], outm[o] = o, i
                    if it == 0:
                        gptr[o], aptr[i] = (i + 1) % P, (o + 1) % P
            continue
        grant = [-1] * P
        for o in range(P):
            if outm[o] < 0:
                grant[o] = _first((i for i in [(gptr[o] + k) % P for k in range(P)]
                                   if req[i][o] and inm[i] < 0),
                                  pri and (lambda i, o=o: pri[i][o]))
        for i in range(P):
            if inm[i] >= 0:
                continue
            o = _first((o for o in [(aptr[i] + k) % P for k in range(P)] if grant[o] == i),
                       pri and (lambda o, i=i: pri[i][o]))
            if o >= 0:
                inm[i], outm[o] = o, i
                if it == 0:
                    gptr[o], aptr[i] = (i + 1) % P, (o + 1) % P
    return inm


@pytest.mark.parametrize("kind, iters, priority", [
    ("islip", 1, "none"), ("islip", 3, "none"), ("separable_input_first", 1, "none"),
    ("separable_input_first", 2, "none"), ("wavefront", 1, "none"),
    ("separable_output_first", 1, "none"), ("islip", 1, "age"),
    ("separable_input_first", 1, "age"), ("separable_input_first", 2, "age"),
    ("separable_output_first", 1, "age")])
def test_switch_allocator_matches_its_definition(kind, iters, priority):
    from collections import namedtuple

    from npusim.kernels.network.alloc import switch_allocate
    from npusim.kernels.network.names import ALLOCATORS

    P = 6
    Par = namedtuple("Par", "ports sa_alloc sa_iters")
    if priority == "age":  # (the class says so, as network/state.py's AgedNocParams)
        Par = type("AgedPar", (Par,), {"__slots__": (), "aged": True})
    p = Par(P, ALLOCATORS.index(kind), iters)
    rng = np.random.default_rng(iters)
    gptr = np.zeros(P, np.int64)
    aptr = np.zeros(P, np.int64)
    wf = np.zeros((2, 1), np.int64)
    ref_g, ref_a, ref_w = [0] * P, [0] * P, [0]
    al = np.zeros((ks.N_AL_FIELDS, P * P), np.int64)
    for _ in range(300):
        req = rng.random((P, P)) < rng.choice([0.1, 0.4, 0.8])
        lab = np.where(req.reshape(-1), 1, -1).astype(np.int64)
        asks = np.flatnonzero(req.reshape(-1))
        asks = rng.permutation(asks)  # in any order
        al[ks.AL_REQ_IN, :len(asks)], al[ks.AL_REQ_OUT, :len(asks)] = divmod(asks, P)
        pri = rng.integers(0, 3, (P, P))  # few values: ties between priorities too
        al[ks.AL_REQ_PRI, :len(asks)] = pri.reshape(-1)[asks]
        switch_allocate(lab, al, len(asks), gptr, aptr, wf, p, 0)
        expect = reference_switch(kind, iters, req.tolist(), ref_g, ref_a, ref_w,
                                  pri.tolist() if priority == "age" else None)
        assert al[ks.AL_IN, :P].tolist() == expect
        assert gptr.tolist() == ref_g and aptr.tolist() == ref_a and wf[1, 0] == ref_w[0]
        matched = [o for o in expect if o >= 0]
        assert len(matched) == len(set(matched))


def reference_vc(kind, iters, reqs, free, o, V, S, gptr, aptr, pri=None):
    """VC allocation of output port o by its definition: requests (input VC, allowed
    output VCs) in ascending input VC order, output VCs ``free``; pointers over the
    router's input VCs (gptr per output VC) and output VCs (aptr per input VC, o * V + ov).
    ``pri[iv]``: the input VC's priority, which the output VCs' arbiters of Booksim's
    separable allocators prefer before their round robin (iSLIP ignores it)."""
    if kind == "islip":
        pri = None
    key = pri and (lambda iv: pri[iv])
    inm = {iv: -1 for iv, _ in reqs}
    taken = set()
    for it in range(iters):
        new = 0
        if kind == "separable_input_first":
            choice = {}
            for iv, allowed in reqs:
                if inm[iv] >= 0:
                    continue
                for k in range(S):  # scan the router's output VCs from the pointer
                    g = (aptr[iv] + k) % S
                    if g // V == o and g % V in allowed and g % V in free and g % V not in taken:
                        choice[iv] = g % V
                        break
            for ov in sorted(set(choice.values())):
                iv = _first((iv for iv in [(gptr[ov] + k) % S for k in range(S)]
                             if choice.get(iv) == ov), key)
                inm[iv] = ov
                taken.add(ov)
                new += 1
                if it == 0:
                    gptr[ov], aptr[iv] = (iv + 1) % S, (o * V + ov + 1) % S
        else:
            grants = {}
            for ov in range(V):
                if ov not in free or ov in taken:
                    continue
                iv = _first((iv for iv in [(gptr[ov] + k) % S for k in range(S)]
                             if iv in inm and inm[iv] < 0 and ov in dict(reqs)[iv]), key)
                if iv >= 0:
                    grants.setdefault(iv, set()).add(ov)
            for iv, _ in reqs:
                if inm[iv] >= 0 or iv not in grants:
                    continue
                for k in range(S):
                    g = (aptr[iv] + k) % S
                    if g // V == o and g % V in grants[iv]:
                        inm[iv] = g % V
                        taken.add(g % V)
                        new += 1
                        if it == 0:
                            gptr[g % V], aptr[iv] = (iv + 1) % S, (g + 1) % S
                        break
        if not new:
            break
    return [inm[iv] for iv, _ in reqs]


@pytest.mark.parametrize("kind, iters, priority", [
    ("islip", 1, "none"), ("islip", 2, "none"), ("separable_input_first", 2, "none"),
    ("separable_output_first", 1, "none"), ("islip", 1, "age"),
    ("separable_input_first", 1, "age"), ("separable_input_first", 2, "age"),
    ("separable_output_first", 1, "age")])
def test_vc_allocator_matches_its_definition(kind, iters, priority):
    from collections import namedtuple

    from npusim.kernels.network.alloc import vc_allocate_port
    from npusim.kernels.network.names import ALLOCATORS

    P, V, o = 5, 8, 2
    S = P * V
    Par = namedtuple("Par", "ports vcs va_alloc va_iters")
    if priority == "age":
        Par = type("AgedPar", (Par,), {"__slots__": (), "aged": True})
    p = Par(P, V, ALLOCATORS.index(kind), iters)
    rng = np.random.default_rng(iters + 7)
    gptr = np.zeros((P, V), np.int64)  # rows of router 0: output row o is gptr[o]
    aptr = np.zeros((P, V), np.int64)
    ref_g, ref_a = [0] * V, [0] * S
    vr = np.zeros((ks.N_VR_FIELDS, S), np.int64)
    al = np.zeros((ks.N_AL_FIELDS, S), np.int64)
    wf = np.zeros((2, 1), np.int64)
    for _ in range(300):
        n = int(rng.integers(1, 7))
        ivs = sorted(rng.choice(S, n, replace=False).tolist())
        reqs = []
        for k, iv in enumerate(ivs):
            lo = int(rng.integers(V))
            allowed = set(range(lo, min(V, lo + int(rng.integers(1, V)))))
            reqs.append((iv, allowed))
            vr[ks.VR_IV, k], vr[ks.VR_OUT, k] = iv, o
            vr[ks.VR_IN, k], vr[ks.VR_VC, k] = divmod(iv, V)
            vr[ks.VR_MASK, k] = sum(1 << v for v in allowed)
            al[ks.AL_IN, k] = -1
        free = {v for v in range(V) if rng.random() < 0.6}
        pri = {iv: int(rng.integers(0, 3)) for iv in ivs}
        vr[ks.VR_PRI, :n] = [pri[iv] for iv in ivs]
        vc_allocate_port(sum(1 << v for v in free), gptr, aptr, vr, al, wf, p, 0, o, 0, n)
        expect = reference_vc(kind, iters, reqs, free, o, V, S, ref_g, ref_a,
                              pri if priority == "age" else None)
        assert al[ks.AL_IN, :n].tolist() == expect
        assert gptr[o].tolist() == ref_g
        assert aptr.reshape(-1).tolist() == ref_a
