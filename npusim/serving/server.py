"""Iteration-level batching of the LLM requests of one model (Orca-style continuous batching).

A server owns the requests of one architecture on one core partition. Whenever its previous
iteration has ended (the engine pauses on the iteration's last layer), it admits the
requests that have arrived, oldest first, up to ``scheduler.max_batch`` in flight, and
lowers the next iteration: a prefill of the whole prompt for each newly admitted request
(after the ``context`` tokens its KV cache already holds, if any: a prefix cached earlier),
one generation step for every other one. Each request's KV cache grows by the tokens of
every iteration it runs in; a request leaves once it has produced ``generate`` tokens (the
first one at the end of its prefill). Every token's cycle is recorded, which gives time to
first token and the times between tokens.

An iteration is released at the core cycle after the previous one ended (the scheduling
decision), or at the next arrival when no request is in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npusim.config import NpuConfig
from npusim.program import ProgramBuilder
from npusim.lowering.replay import LoweringMemo
from npusim.serving.iteration import IterationLayers, ModelMemory, Slot, lower_iteration
from npusim.serving.spec import LlmSpec
from npusim.workload import Request


@dataclass
class LlmRequestRun:
    index: int  # position in the workload
    request: Request
    tokens: list[int] = field(default_factory=list)  # core cycle each token was produced
    prefill_iteration: int = -1

    @property
    def done(self) -> bool:
        return len(self.tokens) >= self.request.generate


@dataclass
class Iteration:
    layers: IterationLayers
    rows: dict[int, int]  # token rows of each request in the batch (its prompt, or 1)
    release_cycle: int
    requests: list[int]  # workload indices in the batch
    prefill_tokens: int
    decode_tokens: int
    kv_tokens: int  # KV-cache positions attended, summed over the batch
    end_cycle: int = -1

    @property
    def first_layer(self) -> int:
        return self.layers.first

    @property
    def last_layer(self) -> int:
        return self.layers.last

    def energy_shares(self, layer_j: np.ndarray) -> dict[int, float]:
        """Joules of this iteration's layers shared out to its requests: a request's own
        layers (its attention) are its own, the layers over every request's token rows go by
        its rows, the per-sequence tail (last-token gather, LM head) in equal parts. The
        shares add up to the iteration's joules."""
        L = self.layers
        shared = np.ones(L.last + 1 - L.first, bool)
        for own in L.own.values():
            shared[np.asarray(own, int) - L.first] = False
        rows_part = L.per_sequence - L.first
        token_j = float(layer_j[L.first:L.per_sequence][shared[:rows_part]].sum())
        sequence_j = float(layer_j[L.per_sequence:L.last + 1].sum())
        total_rows = sum(self.rows.values())
        return {r: float(layer_j[L.own[r]].sum()) + token_j * self.rows[r] / total_rows
                + sequence_j / len(self.requests) for r in self.requests}


class LlmServer:
    def __init__(self, stream: int, spec: LlmSpec, requests: list[tuple[int, Request]],
                 cfg: NpuConfig, builder: ProgramBuilder):
        self.stream = stream
        self.spec = spec
        self.cfg = cfg
        self.builder = builder
        self.mem = ModelMemory(spec)
        self.mem.allocate_weights(builder, cfg.precision)
        self.memo = LoweringMemo()  # iterations lower the same ops again: copy them
        order = sorted(requests, key=lambda ir: (ir[1].arrival_cycle, ir[0]))
        self.runs = {i: LlmRequestRun(i, r) for i, r in order}
        self.waiting = [i for i, _ in order]
        self.active: list[int] = []
        self.iterations: list[Iteration] = []

    @property
    def pending(self) -> Iteration | None:
        it = self.iterations[-1] if self.iterations else None
        return it if it is not None and it.end_cycle < 0 else None

    def schedule(self, now: int) -> int | None:
        """Lower the next iteration, released after core cycle ``now``; returns its last
        layer, or None when every request is done."""
        if not self.active and not self.waiting:
            return None
        release = now + 1
        if not self.active:
            release = max(release, self.runs[self.waiting[0]].request.arrival_cycle)
        while (self.waiting and len(self.active) < self.cfg.scheduler.max_batch
               and self.runs[self.waiting[0]].request.arrival_cycle <= release):
            i = self.waiting.pop(0)
            r = self.runs[i].request
            self.mem.allocate_kv(self.builder, i, r.context + r.prompt + r.generate,
                                 self.cfg.precision)
            self.runs[i].prefill_iteration = len(self.iterations)
            self.active.append(i)
        slots = []
        for i in self.active:
            run, r = self.runs[i], self.runs[i].request
            if not run.tokens:  # the prompt goes in after the context already cached
                slots.append(Slot(i, r.prompt, r.context))
            else:  # the last token goes in; the cache holds all before it
                slots.append(Slot(i, 1, r.context + r.prompt + len(run.tokens) - 1))
        fresh = {i for i in self.active if not self.runs[i].tokens}
        self.builder.request, self.builder.release = self.stream, release
        name = f"{self.spec.name}/it{len(self.iterations)}"
        layers = lower_iteration(self.builder, self.mem, self.cfg, slots, name, self.memo)
        self.iterations.append(Iteration(
            layers, {s.request: s.q for s in slots}, release, list(self.active),
            prefill_tokens=sum(s.q for s in slots if s.request in fresh),
            decode_tokens=sum(s.q for s in slots if s.request not in fresh),
            kv_tokens=sum(s.past + s.q for s in slots)))
        return layers.last

    def iteration_ended(self, end_cycle: int) -> None:
        it = self.pending
        it.end_cycle = end_cycle
        for i in it.requests:
            self.runs[i].tokens.append(end_cycle)
        self.active = [i for i in self.active if not self.runs[i].done]

    def request_results(self, layer_start: np.ndarray, layer_j: np.ndarray) -> dict[int, dict]:
        """Per request: arrival, start, finish, latency, TTFT, time between tokens and its
        share of the energy of the iterations it ran in (``Iteration.energy_shares``)."""
        joules = dict.fromkeys(self.runs, 0.0)
        for it in self.iterations:
            for i, j in it.energy_shares(layer_j).items():
                joules[i] += j
        out = {}
        for i, run in self.runs.items():
            r = run.request
            tbt = np.diff(run.tokens).tolist() if len(run.tokens) > 1 else []
            first = self.iterations[run.prefill_iteration].first_layer
            out[i] = {
                "name": r.name, "model": self.spec.name, "llm": self.spec.describe(),
                "context": r.context, "prompt": r.prompt, "generate": r.generate,
                "arrival_cycle": r.arrival_cycle, "start_cycle": int(layer_start[first]),
                "finish_cycle": run.tokens[-1],
                "latency_cycles": run.tokens[-1] - r.arrival_cycle,
                "ttft_cycles": run.tokens[0] - r.arrival_cycle,
                "tbt_cycles": tbt,
                **{f"tbt_p{q}_cycles": (float(np.percentile(tbt, q)) if tbt else None)
                   for q in (50, 95, 99)},
                "token_cycles": run.tokens,
                "energy_j": joules[i],
                "energy_per_token_j": joules[i] / len(run.tokens),
            }
        return out

    def iteration_results(self) -> list[dict]:
        return [{"iteration": k, "release_cycle": it.release_cycle, "end_cycle": it.end_cycle,
                 "batch": len(it.requests), "prefill_tokens": it.prefill_tokens,
                 "decode_tokens": it.decode_tokens, "kv_tokens": it.kv_tokens}
                for k, it in enumerate(self.iterations)]
