"""The crossbar's grants walk indexes of the ring heads instead of every source: per core,
a bit set of the channels whose output ring has a response for it at its head (64 per
word), and per channel, how many cores have a request for it at the head of their
injection ring. The crossbar builds them from what the rings report (``rings.fresh``) and
its own pops; here they are checked against their definitions, and the response grant
against its own (round robin over every channel, first ready head for the core), over one
word, exactly one, and several."""

import numpy as np
import pytest

from dram_helpers import bare_state, dram_config
from npusim.kernels import state as ks
from npusim.kernels.crossbar import (_next_response_channel, _note_fresh, _take_request,
                                     _take_response)
from npusim.kernels.ports import ch_out_push, ch_out_room, inj_push, inj_room


def _first_ready_head(rg, st, channels, c, t):
    """The definition: round robin from XP_RR over every channel."""
    for k in range(channels):
        ch = (st.xb_core[ks.XP_RR, c] + k) % channels
        h = rg.mport[ks.MP_OUT_HEAD, ch]
        if (rg.mport[ks.MP_OUT_COUNT, ch] > 0 and rg.ch_out[ks.P_CORE, ch, h] == c
                and rg.ch_out[ks.P_TIME, ch, h] <= t):
            return ch
    return -1


@pytest.mark.parametrize("channels", [4, 64, 256])
def test_response_grant_is_the_first_ready_head_round_robin(channels):
    chip, _, p = bare_state(dram_config("DDR4-2400R_8Gb_x8", channels=channels))
    st, rg = chip.noc, chip.rings
    rng = np.random.default_rng(channels)
    found = 0
    for step in range(600):
        ch = int(rng.integers(channels))
        if ch_out_room(rg, ch) and rng.random() < 0.6:
            ch_out_push(rg, p, ch, int(rng.integers(100)), int(rng.integers(p.n_cores)), 0, 0, 0)
        _note_fresh(st, rg, p)
        busy = np.flatnonzero(rg.mport[ks.MP_OUT_COUNT, :channels] > 0)
        if len(busy) and rng.random() < 0.3:
            _take_response(st, rg, p, int(rng.choice(busy)), 0)
        c = int(rng.integers(p.n_cores))
        st.xb_core[ks.XP_RR, c] = int(rng.integers(channels))
        t = int(rng.integers(120))
        expected = _first_ready_head(rg, st, channels, c, t)
        assert _next_response_channel(st, rg, c, t) == expected
        found += expected >= 0
        # the bit sets and counts the crossbar keeps list exactly the heads of each core
        for core in range(p.n_cores):
            heads = [x for x in range(channels) if rg.mport[ks.MP_OUT_COUNT, x] > 0
                     and rg.ch_out[ks.P_CORE, x, rg.mport[ks.MP_OUT_HEAD, x]] == core]
            bits = [x for x in range(channels)
                    if (int(st.xb_heads[core, x >> 6]) >> (x & 63)) & 1]
            assert bits == heads
            assert st.xb_core[ks.XP_RESP_HEADS, core] == len(heads)
    assert found > 50  # the grants found something often enough to mean anything


def test_request_index_counts_the_cores_whose_head_targets_each_channel():
    cfg = dram_config("DDR4-2400R_8Gb_x8", "num_cores=8", channels=4)
    chip, _, p = bare_state(cfg)
    st, rg = chip.noc, chip.rings
    rng = np.random.default_rng(3)
    for step in range(800):
        c = int(rng.integers(p.n_cores))
        if inj_room(rg, c) and rng.random() < 0.8:
            inj_push(rg, p, c, step, int(rng.integers(4)), 0, 0, 0)
        _note_fresh(st, rg, p)
        c = int(rng.integers(p.n_cores))
        if rg.cport[ks.CP_INJ_COUNT, c] > 0 and rng.random() < 0.3:
            _take_request(st, rg, p, c, step)
        heads = [rg.inj[ks.N_CHAN, c, rg.cport[ks.CP_INJ_HEAD, c]]
                 for c in range(p.n_cores) if rg.cport[ks.CP_INJ_COUNT, c] > 0]
        assert list(st.xb_ch[ks.XC_INJ_HEADS, :4]) == [heads.count(ch) for ch in range(4)]
    assert rg.cport[ks.CP_INJ_COUNT].max() == rg.inj.shape[2]  # some rings filled up
