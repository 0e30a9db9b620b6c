"""The interference case study (tests/benchmarks/case_interference.py) at a reduced size:
GPT-2 (two layers, small vocabulary) generating on core 0 beside ResNet-18 batches on cores
1-3. The only shared parts are the NoC and the cycle-level DRAM, so the rise in time between
tokens is contention in the memory model, not a formula."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "benchmarks"))

from case_interference import interference  # noqa: E402


def test_p95_time_between_tokens_rises_beside_the_cnn():
    alone, b1, b4 = interference([1, 4], layers=2, tokens=6, prompt=16, cnn="resnet18",
                                 llm={"vocab": 1024}, cnn_copies=lambda b: 4 // b)
    assert (alone["cnn_copies"], b1["cnn_copies"], b4["cnn_copies"]) == (0, 4, 1)
    # the CNN work overlaps the whole generation in both cases
    assert min(b1["cnn_finish_cycle"], b4["cnn_finish_cycle"]) > b4["gpt2_finish_cycle"] * 0.5
    # its DRAM traffic delays some tokens by more than 10%, whatever the batch (which batch
    # delays more depends on how its memory-bound layers line up with the tokens: ResNet-18's
    # first conv, 3 channels on a 128-row array, is compute-bound for a long stretch)
    assert min(b1["tbt_p95_cycles"], b4["tbt_p95_cycles"]) > 1.1 * alone["tbt_p95_cycles"]
    # alone, every step costs the same: the spread is the CNN's doing
    assert alone["tbt_p95_cycles"] < 1.01 * alone["tbt_p50_cycles"]
