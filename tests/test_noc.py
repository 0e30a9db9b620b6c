"""The crossbar's response grant: each core takes, round robin from its pointer, the first
channel whose response ring has a ready response for it at its head. The kernel walks a
bit set of such channels (64 per word) instead of every channel; here it is checked
against that definition, over one word, exactly one, and several."""

import numpy as np
import pytest

from dram_helpers import bare_state, dram_config
from npusim.kernels import state as ks
from npusim.kernels.memory import response_queued, response_taken
from npusim.kernels.noc import _next_response_channel


def _push_response(st, ch, core, ready):
    """Append a response for ``core``, ready at tick ``ready``, to channel ch's ring."""
    q = st.ch_out.shape[2]
    o = (st.chan[ks.H_OUT_HEAD, ch] + st.chan[ks.H_OUT_COUNT, ch]) % q
    st.ch_out[ks.P_CORE, ch, o] = core
    st.ch_out[ks.P_TIME, ch, o] = ready
    st.chan[ks.H_OUT_COUNT, ch] += 1
    response_queued(st, ch)


def _first_ready_head(st, channels, c, t):
    """The definition: round robin from C_RESP_RR over every channel."""
    for k in range(channels):
        ch = (st.core[ks.C_RESP_RR, c] + k) % channels
        h = st.chan[ks.H_OUT_HEAD, ch]
        if (st.chan[ks.H_OUT_COUNT, ch] > 0 and st.ch_out[ks.P_CORE, ch, h] == c
                and st.ch_out[ks.P_TIME, ch, h] <= t):
            return ch
    return -1


@pytest.mark.parametrize("channels", [4, 64, 256])
def test_response_grant_is_the_first_ready_head_round_robin(channels):
    st, _, p = bare_state(dram_config("DDR4-2400R_8Gb_x8", channels=channels))
    rng = np.random.default_rng(channels)
    q = st.ch_out.shape[2]
    found = 0
    for step in range(600):
        ch = int(rng.integers(channels))
        if st.chan[ks.H_OUT_COUNT, ch] < q and rng.random() < 0.6:
            _push_response(st, ch, int(rng.integers(p.n_cores)), int(rng.integers(100)))
        busy = np.flatnonzero(st.chan[ks.H_OUT_COUNT, :channels] > 0)
        if len(busy) and rng.random() < 0.3:
            response_taken(st, int(rng.choice(busy)))
        c = int(rng.integers(p.n_cores))
        st.core[ks.C_RESP_RR, c] = int(rng.integers(channels))
        t = int(rng.integers(120))
        expected = _first_ready_head(st, channels, c, t)
        assert _next_response_channel(st, c, t) == expected
        found += expected >= 0
        # the bit sets and counts the kernel keeps list exactly the heads of each core
        for core in range(p.n_cores):
            heads = [x for x in range(channels) if st.chan[ks.H_OUT_COUNT, x] > 0
                     and st.ch_out[ks.P_CORE, x, st.chan[ks.H_OUT_HEAD, x]] == core]
            bits = [x for x in range(channels)
                    if (int(st.resp_heads[core, x >> 6]) >> (x & 63)) & 1]
            assert bits == heads
            assert st.core[ks.C_RESP_HEADS, core] == len(heads)
    assert found > 50  # the grants found something often enough to mean anything
