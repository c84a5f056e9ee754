"""Scores with a verl reward file: `compute_score(data_source, solution_str, ground_truth,
extra_info)` from any Python file, served as an rlmesh.v1.RewardService.

rlmesh-reward starts rlmesh.reward.python_workers of these when custom_reward_function.path
is set (docs/reward.md, "Reward files"), each on its own Unix socket:

    python3 -m rlmesh.reward_worker --reward-file FILE [--reward-name NAME]
        [--reward-kwargs JSON] --listen unix:PATH

--reward-kwargs is custom_reward_function.reward_kwargs as a JSON object: keyword arguments
added to every call, as verl does.

One item at a time: the reward service sends one item per call and kills a worker whose call
runs past its deadline. The worker prints "rlmesh-reward-worker: ready" once it serves, or
"rlmesh-reward-worker: error: <why>" and exits 2 when the file cannot be loaded.

The same functions serve a RewardService of your own (examples/python/reward_server.py):
load_function() loads a reward file as verl does, with_kwargs() adds reward_kwargs to it,
score_into() scores one item into a RewardResult.
"""

import argparse
import asyncio
import concurrent.futures
import functools
import importlib.util
import inspect
import json
import math
import os
import signal
import sys
import threading
import traceback

import grpc

from rlmesh.v1 import reward_pb2, reward_pb2_grpc

READY = "rlmesh-reward-worker: ready"
ERROR = "rlmesh-reward-worker: error: "


class LoadError(Exception):
    """The reward file cannot be used; the message says why, on one line."""


def last_line(error, reward_file=None):
    """The last line of the error's traceback ("ValueError: bad input"), and where in
    `reward_file` it was raised, when it was."""
    text = traceback.format_exception_only(type(error), error)[-1].strip()
    if reward_file is not None:
        target = os.path.realpath(reward_file)
        frames = [f for f in traceback.extract_tb(error.__traceback__)
                  if os.path.realpath(f.filename) == target]
        if frames:
            f = frames[-1]
            text += f" ({os.path.basename(f.filename)}, line {f.lineno}, in {f.name})"
    return text


def load_function(path, name):
    """`name` from the Python file at `path`, as verl's custom_reward_function loads it. The
    file's folder is put first on sys.path so that it can import the modules beside it."""
    if not os.path.isfile(path):
        raise LoadError(f"custom_reward_function.path={path}: no such file")
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location("custom_module", path)
    if spec is None or spec.loader is None:
        raise LoadError(f"custom_reward_function.path={path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules["custom_module"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # a SyntaxError or an import that fails: say which, and stop
        raise LoadError(f"custom_reward_function.path={path} failed to load: "
                        f"{last_line(e, path)}") from e
    function = getattr(module, name, None)
    if function is None:
        raise LoadError(f"custom_reward_function.name={name}: {path} defines no {name}")
    if not callable(function):
        raise LoadError(f"custom_reward_function.name={name}: {name} in {path} is a "
                        f"{type(function).__name__}, not a function")
    return function


# The arguments rlmesh passes each call itself (score_into).
PER_ITEM = ("data_source", "solution_str", "ground_truth", "extra_info")


def with_kwargs(function, kwargs, name):
    """`function` with `kwargs` (custom_reward_function.reward_kwargs) added to every call, as
    verl's custom reward functions get them. LoadError when one is an argument rlmesh passes
    per item, or one the function does not take (it would fail every item)."""
    if not kwargs:
        return function
    for key in sorted(kwargs):
        if key in PER_ITEM:
            raise LoadError(f"custom_reward_function.reward_kwargs.{key}: rlmesh passes {key} "
                            f"to {name} itself, for each item")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: its calls will tell
        signature = None
    if signature is not None:
        try:
            signature.bind_partial(**kwargs)
        except TypeError as e:
            raise LoadError(f"custom_reward_function.reward_kwargs: {name}{signature} cannot "
                            f"take them: {e}") from e
    return functools.partial(function, **kwargs)


def _number(value):
    """float(value) for a real number (bool, int, float, numpy and 0-d tensor scalars), else
    None."""
    if isinstance(value, (str, bytes)) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number


def score_into(compute_score, item, result, reward_file=None, loop=None):
    """Calls compute_score on one rlmesh.v1.RewardItem as verl's reward managers do (keyword
    arguments; extra_info a dict) and fills `result`: the score and the dict's other numeric
    values (verl's reward_extra_info), or `error` and `error_kind` ("exception" when the
    function raised or returned something that is not a score, "invalid" for unreadable
    extra_info_json). A coroutine function is run to completion on `loop`."""
    extra_info = dict(item.extra_info)
    if item.extra_info_json:
        try:
            extra_info.update(json.loads(item.extra_info_json))
        except ValueError as e:
            result.error, result.error_kind = f"extra_info_json: {e}", "invalid"
            return
    try:
        value = compute_score(data_source=item.data_source, solution_str=item.response,
                              ground_truth=item.ground_truth, extra_info=extra_info)
        if inspect.isawaitable(value):
            value = (loop or asyncio.new_event_loop()).run_until_complete(value)
    except Exception as e:  # the function's failure is this item's, not the call's
        result.error, result.error_kind = last_line(e, reward_file), "exception"
        return
    extras = {}
    if isinstance(value, dict):
        if "score" not in value:
            result.error = f"returned a dict without \"score\" (keys: {sorted(value)})"
            result.error_kind = "exception"
            return
        score = _number(value["score"])
        for key, extra in value.items():
            number = _number(extra)
            # Only finite numbers can be metrics; text such as verl's "pred" is not one.
            if key != "score" and number is not None and math.isfinite(number):
                extras[str(key)] = number
    else:
        score = _number(value)
    if score is None or not math.isfinite(score):
        result.error = (f"returned {value!r:.80}, expected a finite number or a dict with "
                        f"a finite \"score\"")
        result.error_kind = "exception"
        return
    result.score = score
    for key, number in extras.items():
        result.extra_values[key] = number


class Worker(reward_pb2_grpc.RewardServiceServicer):
    """RewardService over one reward file; items are scored in order on the calling thread."""

    def __init__(self, compute_score, reward_file):
        self.compute_score = compute_score
        self.reward_file = reward_file
        self.loop = asyncio.new_event_loop()

    def Score(self, request, context):
        response = reward_pb2.ScoreResponse()
        for item in request.items:
            score_into(self.compute_score, item, response.results.add(id=item.id),
                       self.reward_file, self.loop)
        return response


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reward-file", required=True)
    parser.add_argument("--reward-name", default="compute_score")
    parser.add_argument("--reward-kwargs", default="{}",
                        help="a JSON object of keyword arguments added to every call")
    parser.add_argument("--listen", required=True, help="unix:PATH or host:port")
    args = parser.parse_args()
    try:
        kwargs = json.loads(args.reward_kwargs)
        if not isinstance(kwargs, dict):
            raise LoadError(f"custom_reward_function.reward_kwargs: expected a mapping, got "
                            f"{args.reward_kwargs:.80}")
        compute_score = with_kwargs(load_function(args.reward_file, args.reward_name), kwargs,
                                    args.reward_name)
    except ValueError as e:
        print(ERROR + f"custom_reward_function.reward_kwargs: not JSON: {e}", flush=True)
        sys.exit(2)
    except LoadError as e:
        print(ERROR + str(e), flush=True)
        sys.exit(2)
    # One thread: the reward service sends one call at a time and kills a worker that hangs.
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=1),
                         options=[("grpc.max_receive_message_length", 1 << 30),
                                  ("grpc.max_send_message_length", 1 << 30)])
    reward_pb2_grpc.add_RewardServiceServicer_to_server(
        Worker(compute_score, args.reward_file), server)
    if server.add_insecure_port(args.listen) == 0:
        print(ERROR + f"cannot listen on {args.listen}", flush=True)
        sys.exit(2)
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(READY, flush=True)
    stop.wait()
    server.stop(grace=None)


if __name__ == "__main__":
    main()
