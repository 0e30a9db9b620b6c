"""Struct-of-arrays state of a network of input-queued virtual-channel routers.

Ports are numbered per router, inputs and outputs separately, and flattened into *rows*:
row ``r * ports + i`` is input port i (or output port i) of router r. The network
interface (NIC) of node n adds one more row, ``n_routers * ports + n``: its output row
injects into a router input, its input row is the ejection buffer a router output feeds.
So every link, router-to-router or NIC-to-router, joins an output row to an input row,
and one set of tables serves both:

- input side, per row and VC: a ring of flits (packet, flags, arrival cycle), the VC's
  pipeline state and its output port and VC once allocated;
- output side, per row and VC: who owns the downstream VC, its credits, whether the tail
  has been sent; per row the credits on their way back (a ring of due cycles);
- packets: one row per packet in flight (source, destination, size, creation cycle, ...),
  taken from a free list.

The per-VC tables are record-major (``ivc[row, vc, field]``): a VC's fields, read
together on every visit, share one cache line (the front flit and its arrival are kept
there too, ``fb`` holds the flits behind it), and a visit to a VC touches nothing else.

A flit is written into its downstream buffer when it wins the switch, stamped with the
cycle it arrives (after switch traversal and the link); it is invisible there before that
cycle but holds its slot, which its sender's credit already paid for. Times are NoC cycles.
"""

from collections import namedtuple

import numpy as np

from .names import MAX_VCS

# Scalar parameters of a network, fixed for a run.
NOC_PARAM_FIELDS = (
    "n_routers", "ports", "vcs", "depth", "n_nodes",
    "routing_delay", "va_delay", "sa_delay", "st_delay",
    "va_alloc", "sa_alloc", "va_iters", "sa_iters", "wait_tail", "skip",
    # tracing (network/trace.py, in a traced run): bin width in ticks, ticks per NoC cycle
    "trace_bin", "period",
)


class NocParams(namedtuple("NocParams", NOC_PARAM_FIELDS)):
    """The Params of a network without a trace and without priorities. Whether the network
    traces, and whether its arbiters prefer older packets (``noc.router.priority = "age"``),
    is the class, as for the engine's Params (``kernels/state.py: params_class``): the
    trace hooks (``network/trace.py``) and the priority tests (``alloc.age_priority``)
    compile to nothing in a network without them."""

    __slots__ = ()
    traced = False
    aged = False


class TracedNocParams(NocParams):
    __slots__ = ()
    traced = True


class AgedNocParams(NocParams):
    __slots__ = ()
    aged = True


class TracedAgedNocParams(TracedNocParams):
    __slots__ = ()
    aged = True


def noc_params_class(traced: bool, aged: bool) -> type:
    """The NocParams class of a network that traces or not, with age priority or not."""
    return ((TracedAgedNocParams if aged else TracedNocParams) if traced
            else (AgedNocParams if aged else NocParams))

# Read-only tables:
#   link[LK_*, out_row]           where an output row leads and how long it takes
#   in_src[in_row]                the output row feeding an input row (-1: none)
#   route[router, node]           output port towards a node (its ejection port at the end)
#   route_class[router, node]     VC class of that hop; vc_classes = any class; -1 - i: the
#                                 packet's class in torus dimension i, bit i of
#                                 dateline[source node, node] (Booksim's dateline partition)
#   vc_lo/vc_hi[msg_class, cls]   VC range of a message class and VC class (cls = vc_classes: all)
#   vc_mask[msg_class, cls]       the same range as a bit set
#   row_owner[row]                router (or n_routers + node) of a row: index into busy/wake
#   link_class[row]               what an output row drives: LC_* (energy, traces; the
#                                 kernels do not read it)
NOC_TABLES = (("link", 2), ("in_src", 1), ("route", 2), ("route_class", 2), ("vc_lo", 2),
              ("vc_hi", 2), ("vc_mask", 2), ("row_owner", 1), ("link_class", 1),
              ("dateline", 2))  # (name, dimensions)
NocTables = namedtuple("NocTables", [name for name, _ in NOC_TABLES])
# link_class: no link (an unused port); a link into an endpoint or out of one; a link
# between two routers on one die; a die-to-die link
LC_NONE, LC_ENDPOINT, LC_ON_DIE, LC_DIE_TO_DIE = range(4)
(LK_DST, LK_LAT, LK_GAP, LK_CREDIT_DELAY) = range(4)
N_LK_FIELDS = 4

NOC_STATE_TABLES = (  # (name, dimensions)
    ("ivc", 3),           # [row, vc, IV_*]     input VCs
    ("fb", 4),            # [row, vc, depth, FB_*]
                          #                     flit buffers (rings) of the flits behind
                          #                     each VC's front flit (IV_FRONT)
    ("ovc", 3),           # [row, vc, OV_*]     downstream VCs seen from an output
    ("ov_free", 1),       # [row]               bit v set: downstream VC v has no owner
    ("out_free", 1),      # [row]               cycle an output link takes its next flit
    ("cr", 2),            # [row, k]            credits on their way back, a ring per output
                          #                     row: due cycle << CR_VC_BITS | VC
    ("cr_ctl", 2),        # [CR_*, row]
    ("cr_wait", 1),       # [row]               1: a flit waits for the next credit sent here
    ("occ", 1),           # [row]               bit v set: input VC v holds flits
    ("busy", 1),          # [router + node]     flits a router (then a NIC) holds or expects
    ("wake", 1),          # [router + node]     first cycle it may have something to do
    ("va_gptr", 2),       # [row, vc]           VC allocator: output VC grant pointers,
    ("va_aptr", 2),       # [row, vc]           input VC accept pointers
    ("sa_gptr", 1),       # [row]               switch allocator: per output, per input
    ("sa_aptr", 1),       # [row]
    ("sw_rr", 1),         # [row]               round robin over an input's VCs
    ("wf", 2),            # [2, router]         wavefront priority diagonals (VC, switch)
    ("nic", 2),           # [node, NI_*]        packet being injected
    ("pkt", 2),           # [PK_*, packet]
    ("pkt_free", 1),      # [k]                 free packet rows (a stack)
    ("glob", 1),          # [NG_*]
    ("link_flits", 1),    # [row]               flits sent out of each output row
    ("router_flits", 1),  # [router]            flits through each router's switch
    # tracing (network/trace.py; one-element placeholders when off)
    ("tr_link", 2),       # [slot, row]         flits out of each output row, binned ring
    ("tr_occ", 2),        # [slot, router]      buffer occupancy (flits x cycles), binned
                          #                     ring
    ("tr_since", 1),      # [router]            cycle tr_occ is added up to
    # allocator scratch, reused by every router (S = ports * vcs)
    ("sa_label", 1),      # [ports * ports]     switch requests: input i -> output o, by VC
    ("al", 2),            # [AL_*, S]           match state of allocator inputs and outputs
    ("va_req", 2),        # [VR_*, S]           input VCs requesting an output VC
)
NocState = namedtuple("NocState", [name for name, _ in NOC_STATE_TABLES])

# A network's state and tables are views of one int64 buffer (``network/packed.py``): the
# NocState tables, then the NocTables, table k at offset ``layout[k, 0]`` of the buffer
# with shape ``layout[k, 1:1 + dims]``, each starting on a cache line.
PACKED_TABLES = NOC_STATE_TABLES + NOC_TABLES
N_LAYOUT_FIELDS = 5  # offset, then up to four dimensions


def packed_tables(mem: np.ndarray, layout: np.ndarray) -> tuple[NocState, NocTables]:
    """The NocState and NocTables of a packed network, as numpy views of its buffer."""
    views = [mem[lay[0]:lay[0] + np.prod(lay[1:1 + d])].reshape(lay[1:1 + d])
             for (_, d), lay in zip(PACKED_TABLES, layout)]
    return NocState(*views[:len(NOC_STATE_TABLES)]), NocTables(*views[len(NOC_STATE_TABLES):])

# ivc
# (IV_FRONT, IV_FRONT_ARR: the front flit (an FB_FLIT word) and its arrival cycle, kept
#  here rather than in ``fb`` so that a visit to a VC touches one cache line and a VC
#  holding one flit (every VC, when packets are one flit and ``wait_tail`` holds) never
#  touches ``fb``; 8 fields = 64 bytes. IV_HEAD: the ring slot of the flit behind the
#  front. IV_ROUTE: the output port of the front packet's route and the output VCs it may
#  take there (a bit set), ``out | mask << ROUTE_MASK_SHIFT``, noted when its head comes
#  to the front; IV_OVC: the output VC it holds once allocated)
IV_HEAD, IV_COUNT, IV_STATE, IV_ROUTE, IV_OVC, IV_READY, IV_FRONT_ARR, IV_FRONT = range(8)
ROUTE_MASK_SHIFT = 16
ROUTE_OUT_MASK = (1 << ROUTE_MASK_SHIFT) - 1
N_IV_FIELDS = 8
VC_IDLE, VC_ALLOC, VC_ACTIVE = range(3)  # IV_STATE: empty; head waits for a VC; has one
# fb (FB_FLIT: the flit's packet row, shifted left by F_BITS, and its F_* flags: 16 bytes
#  a flit, so a VC's buffer of 8 flits is two cache lines)
FB_FLIT, FB_ARR = range(2)
N_FB_FIELDS = 2
F_HEAD, F_TAIL = 1, 2  # flags
F_BITS, F_MASK = 2, 3
# ovc (OV_OWNER: -1 free, else the input VC that holds it, plus OV_TAIL_SENT once its
#  tail is sent and the VC waits for its last credit (wait_tail); 16 bytes a VC)
OV_OWNER, OV_CREDITS = range(2)
N_OV_FIELDS = 2
OV_TAIL_SENT = 1 << 40
# cr_ctl (CR_NEXT: the cycle the first credit in the ring is due, isa.NEVER if none; read
# first, so that a router's credit intake does not touch the rings of rows with none due)
CR_HEAD, CR_COUNT, CR_NEXT = range(3)
N_CR_FIELDS = 3
# a credit's VC in the low bits of its ring entry (noc.router.vcs <= MAX_VCS), its due
# cycle in the bits above (58 of them: NoC cycles below 2**58, 9 years at 1 GHz, and
# arrivals are bounded far below: npusim.workload.MAX_ARRIVAL_CYCLES)
CR_VC_BITS = (MAX_VCS - 1).bit_length()
CR_VC_MASK = (1 << CR_VC_BITS) - 1
# nic (NI_PKT: -1 none; NI_SENT: its flits sent so far; NI_VC: the VC it holds)
NI_PKT, NI_SENT, NI_VC, NI_LAST_VC = range(4)
N_NI_FIELDS = 4
# pkt (PK_CLASS: message class, 0 request / 1 response; PK_ITIME: cycle its head left the
# source; PK_TAG: the driver's own: synthetic traffic 1 if measured, a replayed packet's
# index in its list)
PK_SRC, PK_DEST, PK_SIZE, PK_CTIME, PK_CLASS, PK_ITIME, PK_TAG = range(7)
N_PK_FIELDS = 7
# glob
# (NG_FREE: free packet rows; NG_FLITS: flits in buffers; NG_NOW: the cycle reached;
#  NG_WAKE: the earliest wake set since the driver last cleared it)
NG_FREE, NG_FLITS, NG_NOW, NG_WAKE = range(4)
N_NG_FIELDS = 4
# al (AL_IN: output an input got, AL_OUT: input an output got, -1 none; AL_GRANT: the
# input an output grants this iteration; AL_CHOICE: the output an input picks;
# AL_REQ_IN, AL_REQ_OUT: the switch requests, input and output port: kept apart, as
# decoding one index would divide, the slowest instruction on this path)
AL_IN, AL_OUT, AL_GRANT, AL_CHOICE, AL_REQ_IN, AL_REQ_OUT, AL_REQ_PRI, AL_BEST = range(8)
N_AL_FIELDS = 8  # (AL_REQ_PRI: a switch request's priority; AL_BEST: that of a port's pick)
# va_req (VR_IV: input port * vcs + vc, and apart (no division): VR_IN the input port,
# VR_VC the VC; VR_OUT: output port; VR_MASK: the output VCs it may take, a bit set)
VR_IV, VR_OUT, VR_MASK, VR_IN, VR_VC, VR_PRI = range(6)
N_VR_FIELDS = 6  # (VR_PRI, last: the requesting VC's priority, with age priority only)
