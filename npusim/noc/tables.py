"""A topology with its endpoints, turned into the arrays the router kernels read.

Ports: router r's output ports are its links in link order, then one ejection port per
endpoint that ejects there; its input ports are the links that enter it, then one
injection port per endpoint that injects there. Endpoint n's network interface has row
``n_routers * ports + n`` (see ``kernels/network/state.py``). Endpoint links (injection,
ejection) take one cycle, as Booksim's do; a NIC applies credits at once, a router
``credit_delay`` cycles after they arrive.

Links on another clock or narrower than a flit are converted to NoC cycles: a link of
``latency`` cycles at ``f_link`` takes ``ceil(latency * f_noc / f_link)`` NoC cycles, and
passes one flit every ``ceil(ceil(flit_bytes / width) * f_noc / f_link)`` NoC cycles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npusim.errors import NpusimError
from npusim.kernels.isa import NEVER
from npusim.kernels.network import state as ks
from npusim.kernels.network.names import ALLOCATORS
from npusim.noc.topology import Topology
from npusim.state import CACHE_LINE, aligned_table, ensure_free

ENDPOINT_LINK_LATENCY = 1


def _ceil_div(a, b):
    return -(-a // b)


@dataclass
class Network:
    """Everything a router kernel needs, plus what Python needs to read it back. ``state``
    and ``tables`` are views of one buffer, ``mem`` (laid out as ``layout`` says:
    ``kernels/network/state.py``)."""

    topo: Topology
    sites: np.ndarray       # [endpoint]: its site
    params: ks.NocParams
    tables: ks.NocTables
    state: ks.NocState
    mem: np.ndarray
    layout: np.ndarray
    out_port_link: np.ndarray   # [router, port]: link of an output port (-1: ejection/none)
    out_port_node: np.ndarray   # [router, port]: endpoint an output port ejects to (-1)
    msg_classes: int

    @property
    def n_nodes(self) -> int:
        return len(self.sites)

    def link_rows(self) -> np.ndarray:
        """Output row of every topology link."""
        P = self.params.ports
        rows = np.full(self.topo.n_links, -1, dtype=np.int64)
        r, o = np.nonzero(self.out_port_link >= 0)
        rows[self.out_port_link[r, o]] = r * P + o
        return rows


def vc_ranges(vcs: int, msg_classes: int, vc_classes: int, kind: str):
    """``vc_lo, vc_hi [msg_class, vc_class]``: message classes (requests, responses) split
    the VCs evenly, then VC classes (a torus's dateline) split each share; the last column
    is a message class's whole share, for hops with no VC class (ejection)."""
    share = vcs // msg_classes
    sub = share // vc_classes
    if sub < 1:
        need = msg_classes * vc_classes
        why = (f"{msg_classes} message classes (requests, responses)" if msg_classes > 1
               else "one message class")
        raise NpusimError(f"config field noc.router.vcs = {vcs} is too few: a {kind} with "
                          f"{why} and {vc_classes} VC classes needs at least {need}")
    lo = np.zeros((msg_classes, vc_classes + 1), dtype=np.int64)
    hi = np.zeros_like(lo)
    for m in range(msg_classes):
        for c in range(vc_classes):
            lo[m, c] = m * share + c * sub
            hi[m, c] = lo[m, c] + sub - 1
        lo[m, vc_classes] = m * share
        hi[m, vc_classes] = m * share + share - 1
    return lo, hi


def build_network(topo: Topology, sites, noc, msg_classes: int = 1, skip: bool = True,
                  trace_ring: int = 0, trace_bin: int = 1, period: int = 1) -> Network:
    """Tables and zeroed state for ``topo`` with one endpoint per entry of ``sites``.

    ``noc`` is the config's noc section (NocConfig): router parameters, flit size, clock.
    ``trace_ring`` > 0 turns the trace counters on: that many bins of ``trace_bin`` ticks,
    a NoC cycle being ``period`` ticks (``kernels/network/trace.py``)."""
    rc = noc.router
    if rc.priority != "none" and "wavefront" in (rc.vc_allocator, rc.sw_allocator):
        raise NpusimError(f"config field noc.router.priority = {rc.priority!r} is not modelled "
                          f"with a wavefront allocator (Booksim's wavefront visits priority "
                          f"classes in turn); use islip or separable_input_first / "
                          f"separable_output_first, or priority = 'none'")
    sites = np.asarray(sites, dtype=np.int64)
    R, N = topo.n_routers, len(sites)
    inject_at = topo.site_in[sites]
    eject_at = topo.site_out[sites]
    # ports: links first (the topology's numbers, else in link order), then endpoints in
    # endpoint order; or the endpoints first (``endpoints_first``, Booksim's anynet)
    n_eject = np.bincount(eject_at, minlength=R)
    n_inject = np.bincount(inject_at, minlength=R)
    if topo.link_out_port is not None:
        port_of_link = topo.link_out_port
        in_port_of_link = topo.link_in_port
        out_count = np.full(R, topo.link_ports, dtype=np.int64)
        in_count = out_count.copy()
    else:
        port_of_link = np.zeros(topo.n_links, dtype=np.int64)
        in_port_of_link = np.zeros(topo.n_links, dtype=np.int64)
        out_count = n_eject.copy() if topo.endpoints_first else np.zeros(R, dtype=np.int64)
        in_count = n_inject.copy() if topo.endpoints_first else np.zeros(R, dtype=np.int64)
        for k in range(topo.n_links):
            a, b = topo.link_src[k], topo.link_dst[k]
            port_of_link[k] = out_count[a]
            out_count[a] += 1
            in_port_of_link[k] = in_count[b]
            in_count[b] += 1
    # the endpoints' ports: 0, 1, ... of their router, or the ones after its links
    next_out = np.zeros(R, dtype=np.int64) if topo.endpoints_first else out_count
    next_in = np.zeros(R, dtype=np.int64) if topo.endpoints_first else in_count
    P = int(max((next_out + n_eject).max(), (next_in + n_inject).max(),
                out_count.max(), in_count.max(), 1))
    out_link = np.full((R, P), -1, dtype=np.int64)
    out_node = np.full((R, P), -1, dtype=np.int64)
    out_link[topo.link_src, port_of_link] = np.arange(topo.n_links)
    eject_port = np.zeros(N, dtype=np.int64)
    inject_port = np.zeros(N, dtype=np.int64)
    for n in range(N):
        r = eject_at[n]
        out_node[r, next_out[r]] = n
        eject_port[n] = next_out[r]
        next_out[r] += 1
        r = inject_at[n]
        inject_port[n] = next_in[r]
        next_in[r] += 1

    rows = R * P + N
    link = np.zeros((ks.N_LK_FIELDS, rows), dtype=np.int64)
    link[ks.LK_DST] = -1
    link[ks.LK_GAP] = 1
    in_src = np.full(rows, -1, dtype=np.int64)
    f_noc = noc.freq_mhz
    for k in range(topo.n_links):
        q = topo.link_src[k] * P + port_of_link[k]
        d = topo.link_dst[k] * P + in_port_of_link[k]
        f = int(topo.link_freq_mhz[k])
        link[ks.LK_DST, q] = d
        link[ks.LK_LAT, q] = _ceil_div(int(topo.link_latency[k]) * f_noc, f)
        link[ks.LK_GAP, q] = max(1, _ceil_div(_ceil_div(noc.flit_bytes, int(topo.link_bytes[k]))
                                              * f_noc, f))
        link[ks.LK_CREDIT_DELAY, q] = rc.credit_delay
        in_src[d] = q
    for n in range(N):
        nic = R * P + n
        q = eject_at[n] * P + eject_port[n]  # router -> NIC
        link[ks.LK_DST, q] = nic
        link[ks.LK_LAT, q] = ENDPOINT_LINK_LATENCY
        link[ks.LK_CREDIT_DELAY, q] = rc.credit_delay
        in_src[nic] = q
        d = inject_at[n] * P + inject_port[n]  # NIC -> router
        link[ks.LK_DST, nic] = d
        link[ks.LK_LAT, nic] = ENDPOINT_LINK_LATENCY
        link[ks.LK_CREDIT_DELAY, nic] = 0
        in_src[d] = nic

    route = np.full((R, N), -1, dtype=np.int64)
    route_class = np.full((R, N), topo.vc_classes, dtype=np.int64)
    for n in range(N):
        e = eject_at[n]
        hop = topo.next_link[:, e]
        ok = hop >= 0
        route[ok, n] = port_of_link[hop[ok]]
        route_class[ok, n] = topo.hop_class[ok, e]
        route[e, n] = eject_port[n]
        route_class[e, n] = topo.vc_classes
    # a torus hop's class is the packet's (hop_class -1 - i): from its endpoints' routers
    dateline = (topo.dateline[np.ix_(inject_at, eject_at)] if topo.dateline is not None
                else np.zeros((1, 1), dtype=np.int64))
    vc_lo, vc_hi = vc_ranges(rc.vcs, msg_classes, topo.vc_classes, f"{topo.kind} network")
    row_owner = np.concatenate([np.repeat(np.arange(R), P), R + np.arange(N)]).astype(np.int64)
    vc_mask = np.array([[sum(1 << v for v in range(a, b + 1)) for a, b in zip(la, ha)]
                        for la, ha in zip(vc_lo, vc_hi)], dtype=np.int64)
    link_class = np.full(rows, ks.LC_NONE, dtype=np.int64)
    link_class[in_src[in_src >= 0]] = ks.LC_ENDPOINT
    for k in range(topo.n_links):
        link_class[topo.link_src[k] * P + port_of_link[k]] = (
            ks.LC_DIE_TO_DIE if topo.link_d2d is not None and topo.link_d2d[k] else ks.LC_ON_DIE)
    tables = ks.NocTables(link, in_src, route, route_class, vc_lo, vc_hi, vc_mask, row_owner,
                          link_class, np.ascontiguousarray(dateline, dtype=np.int64))
    params = ks.noc_params_class(trace_ring > 0, rc.priority == "age")(
        n_routers=R, ports=P, vcs=rc.vcs, depth=rc.vc_buffer_flits, n_nodes=N,
        routing_delay=rc.routing_delay, va_delay=rc.vc_alloc_delay, sa_delay=rc.sw_alloc_delay,
        st_delay=rc.st_delay, va_alloc=ALLOCATORS.index(rc.vc_allocator),
        sa_alloc=ALLOCATORS.index(rc.sw_allocator), va_iters=rc.vc_alloc_iters,
        sa_iters=rc.sw_alloc_iters,
        wait_tail=int(rc.wait_for_tail_credit), skip=int(skip),
        trace_bin=int(trace_bin), period=int(period))
    mem, layout = pack(make_state(params, rows, trace_ring), tables)
    state, tables = ks.packed_tables(mem, layout)
    return Network(topo, sites, params, tables, state, mem, layout, out_link, out_node,
                   msg_classes)


def pack(state: ks.NocState, tables: ks.NocTables) -> tuple[np.ndarray, np.ndarray]:
    """A copy of a network's state and tables in one buffer, each table on a cache line of
    its own; returns the buffer and its layout (``ks.packed_tables`` reads them)."""
    arrays = tuple(state) + tuple(tables)
    line = CACHE_LINE // 8
    layout = np.zeros((len(arrays), ks.N_LAYOUT_FIELDS), dtype=np.int64)
    n = 0
    for lay, a, (name, dims) in zip(layout, arrays, ks.PACKED_TABLES):
        assert a.ndim == dims and a.dtype == np.int64, name
        lay[0] = n
        lay[1:1 + dims] = a.shape
        n += -(-a.size // line) * line
    mem = aligned_table(n)
    views, tabs = ks.packed_tables(mem, layout)
    for a, view in zip(arrays, views + tabs):
        view[...] = a
    return mem, layout


def make_state(p: ks.NocParams, rows: int, trace_ring: int = 0) -> ks.NocState:
    V, B, P = p.vcs, p.depth, p.ports
    S = max(P * V, P)
    n_packets = rows * V * B + p.n_nodes  # every buffered flit's packet, every queue head
    # the buffers and the packet pool, as tables here and again as one buffer (pack)
    ensure_free(8 * 2 * (rows * V * (B * (ks.N_FB_FIELDS + 1) + ks.N_IV_FIELDS + ks.N_OV_FIELDS)
                         + n_packets * (ks.N_PK_FIELDS + 1)),
                f"the router network's buffers ({rows} link ports x {V} VCs x {B} flits) "
                f"and packets")
    ivc = aligned_table(rows, V, ks.N_IV_FIELDS)
    ovc = aligned_table(rows, V, ks.N_OV_FIELDS)
    ovc[:, :, ks.OV_OWNER] = -1
    ovc[:, :, ks.OV_CREDITS] = B
    nic = np.zeros((p.n_nodes, ks.N_NI_FIELDS), dtype=np.int64)
    nic[:, ks.NI_PKT] = -1
    nic[:, ks.NI_LAST_VC] = -1
    cr_ctl = np.zeros((ks.N_CR_FIELDS, rows), dtype=np.int64)
    cr_ctl[ks.CR_NEXT] = NEVER
    glob = np.zeros(ks.N_NG_FIELDS, dtype=np.int64)
    glob[ks.NG_FREE] = n_packets
    return ks.NocState(
        ivc=ivc,
        fb=aligned_table(rows, V, B, ks.N_FB_FIELDS),
        ovc=ovc,
        ov_free=np.full(rows, (1 << V) - 1, dtype=np.int64),
        out_free=np.zeros(rows, dtype=np.int64),
        cr=np.zeros((rows, V * B), dtype=np.int64),
        cr_ctl=cr_ctl,
        cr_wait=np.zeros(rows, dtype=np.int64),
        occ=np.zeros(rows, dtype=np.int64),
        busy=np.zeros(p.n_routers + p.n_nodes, dtype=np.int64),
        wake=np.full(p.n_routers + p.n_nodes, NEVER, dtype=np.int64),
        va_gptr=np.zeros((rows, V), dtype=np.int64),
        va_aptr=np.zeros((rows, V), dtype=np.int64),
        sa_gptr=np.zeros(rows, dtype=np.int64),
        sa_aptr=np.zeros(rows, dtype=np.int64),
        sw_rr=np.zeros(rows, dtype=np.int64),
        wf=np.zeros((2, p.n_routers), dtype=np.int64),
        nic=nic,
        pkt=np.zeros((ks.N_PK_FIELDS, n_packets), dtype=np.int64),
        pkt_free=np.arange(n_packets, dtype=np.int64)[::-1].copy(),
        glob=glob,
        link_flits=np.zeros(rows, dtype=np.int64),
        router_flits=np.zeros(p.n_routers, dtype=np.int64),
        tr_link=np.zeros((trace_ring, rows) if trace_ring else (1, 1), dtype=np.int64),
        tr_occ=np.zeros((trace_ring, p.n_routers) if trace_ring else (1, 1), dtype=np.int64),
        tr_since=np.zeros(p.n_routers if trace_ring else 1, dtype=np.int64),
        sa_label=np.full(P * P, -1, dtype=np.int64),
        al=np.zeros((ks.N_AL_FIELDS, S), dtype=np.int64),
        va_req=np.zeros((ks.N_VR_FIELDS, S), dtype=np.int64),
    )
