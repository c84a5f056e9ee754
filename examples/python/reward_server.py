#!/usr/bin/env python3
"""A RewardService in Python: scores with a verl-style compute_score function.

rlmesh's reward service forwards items to it when rlmesh.reward.custom_address points here
(rlmesh.reward.custom_data_sources limits which data sources do; docs/reward.md). The function
has verl's signature, compute_score(data_source, solution_str, ground_truth, extra_info), and
returns a float or a dict with a "score" and extra values (reported as metrics). It scores
as rlmesh-reward's own Python workers do (rlmesh.reward_worker, custom_reward_function.path);
run it yourself to score on another machine or with your own interpreter:

    PYTHONPATH=build/python python3 examples/python/reward_server.py --port 50070 \
        [--reward-file my_reward.py --reward-name compute_score --reward-kwargs '{"scale": 2}']

Without --reward-file it scores "python/exact_match" items: 1.0 when the response, stripped,
equals the ground truth, else 0.0. Needs the generated package (PYTHONPATH=<build>/python)
and Debian's python3-grpcio and python3-protobuf.
"""

import argparse
import concurrent.futures
import json
import signal
import sys
import threading
import time

import grpc

from rlmesh.grpc_health.v1 import health_pb2, health_pb2_grpc
from rlmesh.reward_worker import LoadError, load_function, score_into, with_kwargs
from rlmesh.v1 import reward_pb2, reward_pb2_grpc


def exact_match(data_source, solution_str, ground_truth, extra_info=None):
    """The default scorer: exact match after stripping whitespace; raises on "boom" (so a
    test can see how a scorer's exception is reported)."""
    if solution_str.strip() == "boom":
        raise ValueError("the response asked the scorer to fail")
    matched = solution_str.strip() == ground_truth.strip()
    return {"score": 1.0 if matched else 0.0, "acc": 1.0 if matched else 0.0}


class RewardServicer(reward_pb2_grpc.RewardServiceServicer):
    def __init__(self, compute_score, reward_file=None):
        self.compute_score = compute_score
        self.reward_file = reward_file
        self.lock = threading.Lock()
        self.items_scored = 0

    def Score(self, request, context):
        if not request.items:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "items: expected at least one item")
        if not request.timeout_seconds >= 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"timeout_seconds: expected >= 0, got {request.timeout_seconds}")
        seen = {}
        for i, item in enumerate(request.items):
            if item.id in seen:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f'items[{i}].id: duplicate id "{item.id}" '
                              f"(also items[{seen[item.id]}].id)")
            seen[item.id] = i
        start = time.monotonic()
        deadline = start + request.timeout_seconds if request.timeout_seconds > 0 else None
        response = reward_pb2.ScoreResponse()
        for item in request.items:
            result = response.results.add(id=item.id)
            if deadline is not None and time.monotonic() > deadline:
                result.error, result.error_kind = "timeout", "timeout"
                continue
            # verl's call, and its exceptions as this item's error (rlmesh.reward_worker).
            score_into(self.compute_score, item, result, self.reward_file)
        with self.lock:
            self.items_scored += len(request.items)
        response.compute_seconds = time.monotonic() - start
        return response


class HealthServicer(health_pb2_grpc.HealthServicer):
    """SERVING from the start: this server has nothing to load."""

    def Check(self, request, context):
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=50070, help="0 = any free port")
    parser.add_argument("--workers", type=int, default=4, help="concurrent Score calls")
    parser.add_argument("--reward-file", help="Python file with the scoring function")
    parser.add_argument("--reward-name", default="compute_score",
                        help="the function's name in --reward-file")
    parser.add_argument("--reward-kwargs", type=json.loads, default={},
                        help="a JSON object of keyword arguments added to every call, as "
                             "custom_reward_function.reward_kwargs")
    args = parser.parse_args()
    try:
        compute_score = with_kwargs(load_function(args.reward_file, args.reward_name),
                                    args.reward_kwargs, args.reward_name) \
            if args.reward_file else exact_match
    except LoadError as e:
        sys.exit(f"reward_server: {e}")

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=args.workers),
                         options=[("grpc.max_receive_message_length", 1 << 30),
                                  ("grpc.max_send_message_length", 1 << 30)])
    reward_pb2_grpc.add_RewardServiceServicer_to_server(
        RewardServicer(compute_score, args.reward_file), server)
    health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(), server)
    port = server.add_insecure_port(f"{args.host}:{args.port}")
    if port == 0:
        sys.exit(f"reward_server: cannot listen on {args.host}:{args.port}")
    server.start()
    print(f"reward_server: listening on {args.host}:{port}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=5).wait()
    print("reward_server: stopped", flush=True)


if __name__ == "__main__":
    main()
