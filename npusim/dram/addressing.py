"""Address mapping tables for the DRAM kernel (``kernels/addrmap.py`` reads them).

The address, in bursts, is cut into bit fields named in ``memory.controller.address_mapping``
from the most significant end (default ``RoBaRaCoBgCh``: row, bank, rank, column, bank
group, channel, so a sequential stream alternates channels, then bank groups; Ramulator 2's
``RoBaRaCoCh`` is ``RoBaBgRaCoCh`` here). The low column bits a multi-burst request covers
stay below all fields,
so a request never straddles channels or rows. IPOLY hashing replaces the channel by the
address polynomial modulo an irreducible polynomial of degree log2(channels) over GF(2)
(Rau, "Pseudo-randomly interleaved memory", ISCA 1991).
"""

from __future__ import annotations

import numpy as np

from npusim.errors import NpusimError

FIELD_ORDER = ("Ch", "Co", "Ra", "Ba", "Bg", "Ro")  # index = kernels.addrmap.F_*
IRREDUCIBLE = {1: 0b11, 2: 0b111, 3: 0b1011, 4: 0b10011, 5: 0b100101, 6: 0b1000011}
IPOLY_BITS = 48


def log2_exact(n: int, what: str) -> int:
    if n < 1 or n & (n - 1):
        raise NpusimError(f"{what} = {n} must be a power of two for the DRAM address mapping")
    return n.bit_length() - 1


def field_table(mapping: str, widths: dict[str, int]) -> np.ndarray:
    """[6, 2] int64 (shift, width) per field in FIELD_ORDER, from an MSB-first string."""
    names = [mapping[i:i + 2] for i in range(0, len(mapping), 2)]
    if "Bg" not in names:  # bank-group bits sit just below the bank bits
        names.insert(names.index("Ba") + 1, "Bg")
    if "Ra" not in names:
        names.insert(names.index("Ba") + 1, "Ra")
    table = np.zeros((len(FIELD_ORDER), 2), dtype=np.int64)
    shift = 0
    for name in reversed(names):  # least significant first
        table[FIELD_ORDER.index(name)] = (shift, widths[name])
        shift += widths[name]
    return table


def ipoly_table(channels: int) -> np.ndarray:
    """Channel contribution x^j mod P(x) of each address bit j."""
    n = log2_exact(channels, "memory.channels")
    if n not in IRREDUCIBLE:
        raise NpusimError(f"IPOLY channel hashing supports 2..64 channels, got {channels}")
    poly = IRREDUCIBLE[n]
    out = np.zeros(IPOLY_BITS, dtype=np.int64)
    v = 1
    for j in range(IPOLY_BITS):
        out[j] = v
        v <<= 1
        if v >> n:
            v ^= poly
    return out
