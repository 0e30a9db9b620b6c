"""LLM serving: iterations over growing KV caches, iteration-level batching, GQA vs MHA."""

import json
import re

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from npusim.errors import NpusimError
from npusim.serving.spec import load_llm
from npusim.simulation import simulate_requests
from npusim.workload import Request, read_requests

IDEAL = ["memory.type=ideal"]
SMALL = {"layers": 1, "vocab": 1024}  # GPT-2 with one layer and a small vocabulary


def _gpt2(prompt, generate, arrival=0, name="", **llm):
    return Request("gpt2", prompt=prompt, generate=generate, arrival_cycle=arrival, name=name,
                   llm={**SMALL, **llm})


def _serve(reqs, *overrides, config="server", **kw):
    return simulate_requests(reqs, config, overrides=list(overrides), **kw)


def test_a_cached_context_makes_the_first_iteration_a_generation_step():
    res = _serve([Request("gpt2", context=100, prompt=1, generate=3, llm=SMALL)], *IDEAL)
    its = res.extra["llm_servers"][0]["iterations"]
    assert [(i["prefill_tokens"], i["decode_tokens"], i["kv_tokens"]) for i in its] == [
        (1, 0, 101), (0, 1, 102), (0, 1, 103)]


def test_prefill_then_one_token_per_iteration_with_ttft_and_tbt():
    res = _serve([_gpt2(16, 4)], *IDEAL)
    r = res.requests[0]
    its = res.extra["llm_servers"][0]["iterations"]
    assert [(i["prefill_tokens"], i["decode_tokens"], i["kv_tokens"]) for i in its] == [
        (16, 0, 16), (0, 1, 17), (0, 1, 18), (0, 1, 19)]
    assert r["token_cycles"] == [i["end_cycle"] for i in its]
    assert r["ttft_cycles"] == its[0]["end_cycle"]
    assert r["tbt_cycles"] == [b - a for a, b in zip(r["token_cycles"], r["token_cycles"][1:])]
    # each iteration is released the cycle after the one before it ended
    assert [i["release_cycle"] for i in its[1:]] == [i["end_cycle"] + 1 for i in its[:-1]]
    assert r["finish_cycle"] == res.total_cycles == its[-1]["end_cycle"]


def test_requests_join_and_leave_the_batch_up_to_max_batch():
    # three requests at cycle 0 with room for two: the third joins when the first leaves
    reqs = [_gpt2(8, 2, name="a"), _gpt2(8, 4, name="b"), _gpt2(8, 2, name="c")]
    res = _serve(reqs, *IDEAL, "scheduler.max_batch=2")
    its = res.extra["llm_servers"][0]["iterations"]
    batches = [(i["batch"], i["prefill_tokens"], i["decode_tokens"]) for i in its]
    # it0: a, b prefill; it1: a, b decode (a done); it2: b decode + c prefill;
    # it3: b decode (b done: 4 tokens), c decode (c done)
    assert batches == [(2, 16, 0), (2, 0, 2), (2, 8, 1), (2, 0, 2)]
    a, b, c = res.requests
    assert len(a["token_cycles"]) == 2 and len(b["token_cycles"]) == 4
    assert c["start_cycle"] > a["finish_cycle"]
    assert c["ttft_cycles"] == its[2]["end_cycle"]


def test_a_late_request_waits_for_the_iteration_in_flight_then_joins():
    reqs = [_gpt2(32, 3, name="early"), _gpt2(8, 2, arrival=1000, name="late")]
    res = _serve(reqs, *IDEAL)
    its = res.extra["llm_servers"][0]["iterations"]
    assert its[0]["end_cycle"] > 1000  # the late one arrived during the first prefill
    assert [i["batch"] for i in its] == [1, 2, 2]
    late = res.requests[1]
    assert late["start_cycle"] == its[1]["release_cycle"] >= late["arrival_cycle"]


def test_an_idle_server_starts_at_the_next_arrival():
    reqs = [_gpt2(8, 1), _gpt2(8, 1, arrival=5_000_000)]
    res = _serve(reqs, *IDEAL)
    its = res.extra["llm_servers"][0]["iterations"]
    assert its[0]["end_cycle"] < 5_000_000
    assert its[1]["release_cycle"] == 5_000_000 == res.requests[1]["start_cycle"]
    # alone, each takes the same time
    assert res.requests[1]["latency_cycles"] == res.requests[0]["latency_cycles"]


def test_skip_ahead_and_pauses_change_nothing():
    reqs = [_gpt2(8, 3, name="a"), _gpt2(4, 2, arrival=3000, name="b"),
            Request("mlp", name="cnn", arrival_cycle=100)]
    mem = ["memory.controller.refresh=true"]
    fast = _serve(reqs, *mem, config="mobile")
    slow = _serve(reqs, *mem, config="mobile", skip=False)
    assert fast.requests == slow.requests
    assert fast.total_cycles == slow.total_cycles
    again = _serve(reqs, *mem, config="mobile")
    assert again.to_dict()["requests"] == fast.to_dict()["requests"]


def test_decode_steps_grow_with_the_kv_cache():
    # one layer, memory-bound on DRAM: a step at a 1000-token context reads the longer
    # cache (K and V: 2 * heads * 936 more positions * 64 * 2 bytes) and takes longer
    short, long = (_serve([Request("gpt2", context=c, prompt=1, generate=2, llm=SMALL)])
                   for c in (64, 1000))
    tbt = [r.requests[0]["tbt_cycles"][0] for r in (short, long)]
    assert tbt[1] > tbt[0]

    def decode_bytes(res):
        return sum(l["bytes_loaded"] for l in res.layers if "/it1/" in l["name"])

    spec = load_llm("gpt2")
    grew = decode_bytes(long) - decode_bytes(short)
    assert grew >= 2 * spec.kv_heads * (1000 - 64) * spec.head_dim * 2


def test_gqa_moves_less_kv_data_than_mha_and_is_faster_when_memory_bound():
    # Llama-3-8B attention (32 query heads of 128) with 8 KV heads (GQA) or 32 (MHA),
    # one layer with a small FFN, one generation step after a 2048-token context
    def step(kv_heads):
        req = Request("llama3_8b", context=2048, prompt=1, generate=1,
                      llm={"layers": 1, "vocab": 1024, "intermediate": 512,
                           "kv_heads": kv_heads})
        res = _serve([req])
        attn = [l for l in res.layers if l["op_type"] == "GroupQueryAttention"]
        return sum(l["bytes_loaded"] for l in attn), res.requests[0]["ttft_cycles"]

    (gqa_bytes, gqa_cycles), (mha_bytes, mha_cycles) = step(8), step(32)
    kv = 2 * 2048 * 128 * 2  # K and V rows of one KV head
    assert mha_bytes - gqa_bytes >= (32 - 8) * kv
    assert gqa_cycles < mha_cycles


@pytest.mark.parametrize("text, message", [
    ('model = "gpt2"\nprompt = 8\ngenerate = 2\nbatch = 2\n',
     "an LLM request takes prompt and generate, not batch"),
    ('model = "mlp"\narrival_us = 1\narrival_cycles = 5\n',
     "give arrival_us or arrival_cycles, not both"),
    ('model = "gpt2"\nprompt = 1000\ngenerate = 100\n',
     "generate 100 exceeds the 1024 positions of gpt2"),
    ('model = "mlp"\nprompt = 4\n', "prompt is only for LLM requests"),
    ('model = "gpt2"\nprompt = 4\ngenerate = 0\n', "generate = 0: an LLM request generates at "
                                                 "least 1 token"),
    ('model = "gpt2"\n', "model = 'gpt2' is a language model: an LLM request gives prompt"),
    ('model = "nope"\n', "request 1: model 'nope' not found"),
    ('modell = "mlp"\n', r"unknown key\(s\) \['modell'\]"),
    # 2**40 + 1 cycles would overflow the NoC's packed due cycles; 2**40 itself is allowed
    ('model = "mlp"\narrival_cycles = 1099511627777\n', r"must be at most 1099511627776"),
    ('model = "mlp"\ncount = 3\ninterval_cycles = 549755813889\n',
     r"arrival of its last request .* is 1099511627778 core cycles"),
    ('model = "mlp"\narrival_us = 1e300\n', r"is 1e\+303 core cycles: must be at most"),
    # 10**11 copies grew a list of requests until memory ran out
    ('model = "mlp"\ncount = 100000000000\n', "count = 100,000,000,000 copies is more than "
                                            "npusim simulates: at most 1,000,000"),
    ('model = "mlp"\narrival_us = inf\n', "arrival_us = inf must be a finite number >= 0"),
    ('model = "mlp"\narrival_us = nan\n', "arrival_us = nan must be a finite number >= 0"),
    ('model = "gpt2"\nprompt = 4\ngenerate = 2\nllm = 5\n',
     "llm = 5 must be a table of architecture overrides"),
    ('model = "gpt2"\nprompt = 4\ngenerate = 2\nllm = { hidden = 99999999 }\n',
     "its largest weight holds 5,025,699,949,743 elements, more than npusim simulates"),
])
def test_request_files_name_their_problems(tmp_path, text, message):
    f = tmp_path / "r.toml"
    f.write_text("[[request]]\n" + text)
    with pytest.raises(NpusimError, match=message):
        read_requests(f, 1000)


def test_request_file_units_copies_and_partitions(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"requests": [
        {"model": "mlp", "arrival_us": 2.5, "count": 3, "interval_cycles": 100,
         "partition": 1, "name": "m"},
        {"model": "gpt2", "prompt": 16, "generate": 4, "llm": {"kv_heads": 4}}]}))
    reqs = read_requests(f, core_freq_mhz=800)
    assert [r.arrival_cycle for r in reqs] == [2000, 2100, 2200, 0]
    assert [r.name for r in reqs[:3]] == ["m#0", "m#1", "m#2"]
    assert {r.partition for r in reqs[:3]} == {1}
    assert reqs[3].is_llm and reqs[3].llm == {"kv_heads": 4}


def test_onnxim_language_model_json(tmp_path):
    f = tmp_path / "lm.json"
    f.write_text(json.dumps({"model_name": "tiny", "num_hidden_layers": 2, "hidden_size": 256,
                             "num_attention_heads": 8, "num_kv_heads": 2,
                             "intermediate_size": 512, "vocab_size": 500}))
    spec = load_llm(str(f))
    assert (spec.layers, spec.heads, spec.kv_heads, spec.head_dim) == (2, 8, 2, 32)
    res = _serve([Request(str(f), prompt=8, generate=2)], *IDEAL)
    assert len(res.requests[0]["token_cycles"]) == 2
    f.write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 256,
                             "num_attention_heads": 8, "num_kv_heads": 3,
                             "intermediate_size": 512}))
    with pytest.raises(NpusimError, match="8 attention heads cannot share 3 KV heads"):
        load_llm(str(f))


@pytest.mark.parametrize("req, message", [
    # built in Python, a request is checked as a request file's is (these ran forever, or
    # failed deep inside with another complaint)
    (Request("tiny_cnn", arrival_cycle=-5), "arrival_cycle = -5 must be an integer >= 0"),
    (Request("tiny_cnn", arrival_cycle=1.5), "arrival_cycle = 1.5 must be an integer >= 0"),
    (Request("gpt2", prompt=2000, generate=2),
     "context 0 + prompt 2000 + generate 2 exceeds the 1024 positions of gpt2"),
    (Request("gpt2", prompt=4, generate=-2), "generate = -2 must be an integer >= 0"),
    (Request("gpt2", prompt=4, generate=2, context=-10), "context = -10 must be an integer"),
    (Request("gpt2", prompt=0, generate=2), "prompt = 0 must be at least 1 token"),
    (Request("tiny_cnn", prompt=4), "prompt is only for LLM requests"),
    ("tiny_cnn", "'tiny_cnn' is not a npusim.Request"),
])
def test_requests_built_in_python_are_checked(req, message):
    with pytest.raises(NpusimError, match=f"request 1: {re.escape(message)}"):
        _serve([req], *IDEAL)


@pytest.mark.parametrize("change, message", [
    ({"bias": "no"}, "bias = 'no' must be true or false"),
    ({"hidden_size": 250}, "hidden_size 250 is not a multiple of num_attention_heads 8: "
                           "give head_dim"),
    ({"vocab_size": 2**40}, "its largest weight holds 281,474,976,710,656 elements"),
])
def test_a_language_model_json_names_its_problem(tmp_path, change, message):
    f = tmp_path / "lm.json"
    f.write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 256,
                             "num_attention_heads": 8, "num_kv_heads": 2,
                             "intermediate_size": 512, "vocab_size": 500, **change}))
    with pytest.raises(NpusimError, match=re.escape(message)):
        load_llm(str(f))


def test_a_request_names_the_dims_it_must_give(tmp_path):
    f = tmp_path / "r.toml"
    f.write_text('[[request]]\nmodel = "mlp"\n[[request]]\nmodel = "bert_ffn"\n')
    with pytest.raises(NpusimError, match=re.escape(
            "request 2 (bert_ffn): bert_ffn.onnx has unbound symbolic dimension(s) 'seq'; "
            "give them in the request: dims = { seq = N }")):
        _serve(read_requests(f, 1000), *IDEAL)


def test_a_request_whose_model_folds_to_nothing_is_done_on_arrival(tmp_path):
    """Every node a constant: no layer runs; the request finishes as it arrives (its
    results took the earliest start of no layers before)."""
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
                 np.ones((2, 2), np.float32))),
             helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "consts", [], [helper.make_tensor_value_info("y", 1, [2, 2])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "c.onnx")
    res = _serve([Request(str(tmp_path / "c.onnx"), arrival_cycle=300)], *IDEAL)
    (row,) = res.requests
    assert (row["start_cycle"], row["finish_cycle"], row["latency_cycles"]) == (300, 300, 0)


def test_request_energy_is_its_attention_plus_its_share_of_the_batch_layers():
    """Worked from layer names, not from the server's own bookkeeping: a request's joules are
    its attention layers (``/r<i>/``), the token-row layers by its rows (prompt, then 1), the
    last-token gather and LM head in equal parts; the shares add up to the server's."""
    res = _serve([_gpt2(8, 2, name="a"), _gpt2(24, 2, name="b")], *IDEAL)
    rows = {0: {"a": 8, "b": 24}, 1: {"a": 1, "b": 1}}  # prefill, then one decode step
    expect = {"a": 0.0, "b": 0.0}
    for k, it_rows in rows.items():
        layers = [l for l in res.layers if l["name"].startswith(f"gpt2/it{k}/")]
        tail = [l["name"].rsplit("/", 1)[1] in ("last_hidden", "logits") for l in layers]
        own = {n: sum(l["energy_j"] for l in layers if f"/r{i}/" in l["name"])
               for i, n in enumerate("ab")}
        token_j = sum(l["energy_j"] for l, t in zip(layers, tail)
                      if not t and "/r" not in l["name"])
        tail_j = sum(l["energy_j"] for l, t in zip(layers, tail) if t)
        for n in "ab":
            expect[n] += own[n] + token_j * it_rows[n] / sum(it_rows.values()) + tail_j / 2
    for r in res.requests:
        assert r["energy_j"] == pytest.approx(expect[r["name"]], rel=1e-12)
        assert r["energy_per_token_j"] == pytest.approx(r["energy_j"] / 2, rel=1e-12)
    server = res.extra["llm_servers"][0]["energy_j"]
    assert sum(r["energy_j"] for r in res.requests) == pytest.approx(server, rel=1e-12)
    assert server == pytest.approx(res.energy["total_j"], rel=1e-12)
    assert res.requests[1]["energy_j"] > 1.5 * res.requests[0]["energy_j"]  # 3x the prompt
