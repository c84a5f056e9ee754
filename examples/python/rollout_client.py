#!/usr/bin/env python3
"""A Python client of a rollout replica and the reference, written from the protos alone.

    PYTHONPATH=build/python python3 examples/python/rollout_client.py \
        --rollout 127.0.0.1:50051 [--reference 127.0.0.1:50053] [--tokenizer DIR/tokenizer.json]

It waits for the replica's health to be SERVING, reads GetModelInfo (vocabulary, special
tokens, limits, the tokenizer's SHA-256, which it compares with --tokenizer's), samples a GRPO
group for each prompt with a fixed seed (retrying RESOURCE_EXHAUSTED and UNAVAILABLE with
backoff, as docs/api.md advises), checks every sample against the limits, and with
--reference scores the same sequences there and prints how far the reference's log-probs are
from the rollout's (the same weights give the same numbers up to rounding). The last line is
a JSON summary. Needs PYTHONPATH=<build>/python and Debian's python3-grpcio, python3-protobuf.
"""

import argparse
import hashlib
import json
import sys
import time
import uuid

import grpc

from rlmesh.grpc_health.v1 import health_pb2, health_pb2_grpc
from rlmesh.v1 import common_pb2, reference_pb2, reference_pb2_grpc, rollout_pb2
from rlmesh.v1 import rollout_pb2_grpc

RETRYABLE = (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE)
OPTIONS = [("grpc.max_receive_message_length", 1 << 30),
           ("grpc.max_send_message_length", 1 << 30)]


def wait_serving(channel, what, timeout_s):
    stub = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
                    health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                raise
        if time.monotonic() > deadline:
            sys.exit(f"{what}: not SERVING after {timeout_s} s")
        time.sleep(0.2)


def generate(stub, request, attempts=8):
    """All samples of one Generate call; a refused call is sent again after 0.05, 0.1, ... s.
    A call refused with RESOURCE_EXHAUSTED started nothing, so sending it again (with a new
    request_id) loses and duplicates no sample."""
    delay = 0.05
    for attempt in range(attempts):
        try:
            return list(stub.Generate(request, timeout=120))
        except grpc.RpcError as e:
            if e.code() not in RETRYABLE or attempt == attempts - 1:
                raise
            print(f"Generate: {e.code().name} ({e.details()}); again in {delay:.2f} s")
            time.sleep(delay)
            delay = min(2 * delay, 2.0)
            request.request_id = uuid.uuid4().hex


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollout", required=True, help="host:port of a rollout replica")
    parser.add_argument("--reference", help="host:port of the reference service")
    parser.add_argument("--tokenizer", help="a local tokenizer.json to compare with the replica's")
    parser.add_argument("--prompts", default="49,50,51,52,61;55,56,57,61",
                        help="prompts as token ids, ids separated by ',', prompts by ';' "
                             "(the default is '1234=' and '789=' in the quickstart's byte-level "
                             "tokenizer)")
    parser.add_argument("--n", type=int, default=4, help="samples per prompt (the group size)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--wait-s", type=float, default=120, help="how long to wait for health")
    args = parser.parse_args()

    rollout_channel = grpc.insecure_channel(args.rollout, options=OPTIONS)
    wait_serving(rollout_channel, "rollout", args.wait_s)
    rollout = rollout_pb2_grpc.RolloutServiceStub(rollout_channel)
    info = rollout.GetModelInfo(common_pb2.GetModelInfoRequest(), timeout=60)
    limits = info.limits
    special = ", ".join(f"{t.content}={t.id}" for t in info.special_tokens)
    print(f"model {info.model_path}: {info.architecture}, vocabulary {info.vocab_size}, "
          f"eos {list(info.eos_token_ids)}, special tokens [{special}]")
    print(f"limits: max_model_len {limits.max_model_len}, max_prompt_length "
          f"{limits.max_prompt_length}, max_new_tokens {limits.max_new_tokens}, "
          f"max_samples_per_request {limits.max_samples_per_request}")
    tokenizer_matches = None
    if args.tokenizer:
        with open(args.tokenizer, "rb") as f:
            local = hashlib.sha256(f.read()).hexdigest()
        tokenizer_matches = local == info.tokenizer_sha256
        print(f"tokenizer.json sha256 {info.tokenizer_sha256}: "
              f"{'the same as' if tokenizer_matches else 'DIFFERENT from'} {args.tokenizer}")

    prompts = [[int(t) for t in p.split(",")] for p in args.prompts.split(";")]
    for p, ids in enumerate(prompts):
        bad = [t for t in ids if not 0 <= t < info.vocab_size]
        if bad or len(ids) > limits.max_prompt_length:
            sys.exit(f"prompt {p}: ids {bad} outside the vocabulary or over "
                     f"{limits.max_prompt_length} tokens")
    request = rollout_pb2.GenerateRequest(request_id=uuid.uuid4().hex)
    for p, ids in enumerate(prompts):
        request.prompts.add(prompt_id=f"p{p}", token_ids=ids, first_sample_index=0)
    params = request.sampling_params
    params.n, params.temperature, params.seed = args.n, args.temperature, args.seed
    params.max_new_tokens = 0  # the replica's maximum
    samples = generate(rollout, request)
    problems = []
    for s in samples:
        ids = prompts[int(s.prompt_id[1:])]
        total = len(ids) + len(s.sample.token_ids)
        if total > limits.max_model_len or len(s.sample.token_ids) > limits.max_new_tokens:
            problems.append(f"{s.prompt_id}/{s.sample_index}: {total} tokens")
        if len(s.sample.logprobs) != len(s.sample.token_ids):
            problems.append(f"{s.prompt_id}/{s.sample_index}: logprobs do not match tokens")
    groups = sorted({(s.prompt_id, s.sample_index) for s in samples})
    print(f"Generate: {len(samples)} samples in {len(prompts)} groups of {args.n}, "
          f"weight version {samples[0].sample.weight_version if samples else '-'}")
    for s in sorted(samples, key=lambda s: (s.prompt_id, s.sample_index)):
        print(f"  {s.prompt_id}/{s.sample_index}: {list(s.sample.token_ids)} "
              f"({common_pb2.FinishReason.Name(s.sample.finish_reason)}, "
              f"{s.sample.generation_seconds:.3f} s)")

    max_logprob_diff = None
    if args.reference:
        reference_channel = grpc.insecure_channel(args.reference, options=OPTIONS)
        wait_serving(reference_channel, "reference", args.wait_s)
        reference = reference_pb2_grpc.ReferenceServiceStub(reference_channel)
        scored = reference_pb2.ComputeLogProbsRequest(temperature=args.temperature)
        for s in samples:
            ids = prompts[int(s.prompt_id[1:])]
            scored.sequences.add(id=f"{s.prompt_id}/{s.sample_index}",
                                 token_ids=ids + list(s.sample.token_ids),
                                 prompt_length=len(ids))
        result = reference.ComputeLogProbs(scored, timeout=120)
        max_logprob_diff = 0.0
        for s, r in zip(samples, result.results):
            for a, b in zip(s.sample.logprobs, r.logprobs):
                max_logprob_diff = max(max_logprob_diff, abs(a - b))
        print(f"reference log-probs of the same {len(result.results)} sequences: largest "
              f"difference from the rollout's {max_logprob_diff:.2e}")

    summary = {"samples": len(samples), "distinct": len(groups), "groups": len(prompts),
               "n": args.n, "vocab_size": info.vocab_size,
               "max_model_len": limits.max_model_len,
               "tokenizer_sha256": info.tokenizer_sha256,
               "tokenizer_matches": tokenizer_matches, "problems": problems,
               "max_logprob_diff": max_logprob_diff,
               "tokens": {f"{s.prompt_id}/{s.sample_index}": list(s.sample.token_ids)
                          for s in samples}}
    print(json.dumps(summary, sort_keys=True))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
