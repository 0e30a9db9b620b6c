"""Case study: GPT-2 generating tokens on one core beside ResNet-50 batches on the others.

The NPU (`server` preset: 4 cores, 16 HBM2 channels) is split into two partitions: core 0
serves one GPT-2 request (prompt, then token by token), cores 1-3 run ResNet-50 inferences
back to back. The two share only the NoC and DRAM, so any change in GPT-2's time between
tokens comes from contention in the cycle-level memory system. The ResNet-50 batch grows
from 1 to 8; for each, and for GPT-2 alone, the script prints TTFT and TBT p50/p95/p99 and
writes results/case_studies/interference.{json,md}.

    python tests/benchmarks/case_interference.py [--layers N] [--tokens N] [--prompt N]
        [--cnn resnet50] [--batches 1,2,4,8] [--out NAME]

``tests/test_case_interference.py`` runs a reduced size (fewer GPT-2 layers and tokens,
ResNet-18) and checks that p95 TBT rises with the batch.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from npusim.simulation import simulate_requests
from npusim.workload import Request

RESULTS = Path(__file__).resolve().parents[2] / "results" / "case_studies"
PARTITIONS = "scheduler.partitions=[[0], [1, 2, 3]]"


def interference(batches, *, layers=12, tokens=32, prompt=128, cnn="resnet50",
                 cnn_copies=None, config="server", overrides=(), llm=None):
    """Per ResNet batch (0 = GPT-2 alone): the GPT-2 request's latency numbers.

    ``cnn_copies(batch)``: how many CNN requests to queue back to back (default: enough to
    keep cores 1-3 busy for as long as GPT-2 runs alone, from a solo run of each batch);
    ``llm``: more GPT-2 overrides."""
    rows = []
    solo_gpt2 = None
    for batch in [0, *batches]:
        gpt = Request("gpt2", prompt=prompt, generate=tokens, partition=0, name="gpt2",
                      llm={"layers": layers, **(llm or {})})
        reqs = [gpt]
        if batch and cnn_copies is None:
            solo = simulate_requests([Request(cnn, dims={"batch": batch}, partition=1)],
                                     config, overrides=[PARTITIONS, "scheduler.policy=spatial",
                                                        *overrides]).total_cycles
            copies = -(-solo_gpt2 // solo) + 1
        if batch:
            copies = cnn_copies(batch) if cnn_copies else copies
            reqs += [Request(cnn, dims={"batch": batch}, partition=1, name=f"{cnn}#{k}")
                     for k in range(copies)]
        t0 = time.perf_counter()
        res = simulate_requests(reqs, config, overrides=[PARTITIONS, "scheduler.policy=spatial",
                                                         *overrides])
        wall = time.perf_counter() - t0
        g = res.requests[0]
        if not batch:
            solo_gpt2 = g["finish_cycle"]
        cnn_done = max((r["finish_cycle"] for r in res.requests[1:]), default=0)
        rows.append({
            "cnn_batch": batch, "cnn_copies": len(reqs) - 1,
            "ttft_cycles": g["ttft_cycles"], "tbt_p50_cycles": g["tbt_p50_cycles"],
            "tbt_p95_cycles": g["tbt_p95_cycles"], "tbt_p99_cycles": g["tbt_p99_cycles"],
            "gpt2_finish_cycle": g["finish_cycle"], "cnn_finish_cycle": cnn_done,
            "dram_gbps": res.memory["bandwidth_gbps"], "wall_seconds": wall,
            "dram_requests": res.memory.get("reads", 0) + res.memory.get("writes", 0)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--cnn", default="resnet50")
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--out", default="interference")
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    rows = interference(batches, layers=a.layers, tokens=a.tokens, prompt=a.prompt, cnn=a.cnn)
    head = ("| ResNet batch | copies | TTFT | TBT p50 | TBT p95 | TBT p99 | DRAM GB/s | wall s |\n"
            "|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    lines = [f"| {r['cnn_batch'] or 'alone'} | {r['cnn_copies']} | {r['ttft_cycles']:,} | "
             f"{r['tbt_p50_cycles']:,.0f} | {r['tbt_p95_cycles']:,.0f} | "
             f"{r['tbt_p99_cycles']:,.0f} | {r['dram_gbps']:.1f} | {r['wall_seconds']:.1f} |"
             for r in rows]
    table = head + "\n".join(lines)
    print(table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    setup = (f"GPT-2 ({a.layers} layers) prompt {a.prompt}, {a.tokens} tokens on core 0; "
             f"{a.cnn} on cores 1-3; server preset (HBM2, 16 channels); cycles at 1 GHz")
    (RESULTS / f"{a.out}.json").write_text(json.dumps({"setup": setup, "rows": rows}, indent=1))
    (RESULTS / f"{a.out}.md").write_text(f"# Interference case study\n\n{setup}\n\n{table}\n")


if __name__ == "__main__":
    main()
