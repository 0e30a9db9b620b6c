"""Physical address -> (channel, rank, bank group, bank, row, column) for the DRAM.

The mapping is a list of bit fields (``amap[field] = (shift, width)``) over the address
in burst units. The low column bits that a multi-burst request spans are kept lowest, so
one request stays in one row of one channel; above them, by default, come the channel
bits, then bank group, column, rank, bank and row (``RoBaRaCoBgCh`` from the most
significant bit). With IPOLY hashing the channel is instead the address polynomial modulo
an irreducible polynomial over GF(2) (Rau's pseudo-random interleaving): ``ipoly[j]`` is
the channel contribution of address bit j.
"""

from .jit import kernel

# field order in amap
F_CH, F_CO, F_RA, F_BA, F_BG, F_RO = range(6)
N_FIELDS = 6


@kernel
def _field(unit, amap, f):
    return (unit >> amap[f, 0]) & ((1 << amap[f, 1]) - 1)


@kernel
def dram_unit(addr, p):
    """The address in bursts, without the burst-within-request bits."""
    return addr >> (p.d_burst_bits + p.d_bpr_bits)


@kernel
def dram_channel(addr, p, mt):
    unit = dram_unit(addr, p)
    if p.d_ipoly == 0:
        return _field(unit, mt.amap, F_CH)
    h = 0
    j = 0
    while unit > 0 and j < mt.ipoly.shape[0]:
        if unit & 1:
            h ^= mt.ipoly[j]
        unit >>= 1
        j += 1
    return h


@kernel
def dram_decode(addr, p, mt):
    """(rank, bank group, bank, row, column in bursts) of an address."""
    unit = dram_unit(addr, p)
    low = (addr >> p.d_burst_bits) & ((1 << p.d_bpr_bits) - 1)
    col = (_field(unit, mt.amap, F_CO) << p.d_bpr_bits) | low
    return (_field(unit, mt.amap, F_RA), _field(unit, mt.amap, F_BG),
            _field(unit, mt.amap, F_BA), _field(unit, mt.amap, F_RO), col)
