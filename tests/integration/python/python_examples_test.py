#!/usr/bin/env python3
"""The Python examples against the real binaries, with the generated package rlmesh.

Starts rlmesh-rollout and rlmesh-reference on a tiny model and runs
examples/python/rollout_client.py against them; starts examples/python/reward_server.py and an
rlmesh-reward whose rlmesh.reward.custom_address points at it, and scores items of both the
Python scorer's data source and a built-in one through rlmesh-reward. Run by ctest:

    python_examples_test.py --build-dir BUILD --source-dir SOURCE
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ARGS = None


def python_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ARGS.build_dir, "python")
    return env


class Process:
    """A child whose output is echoed with a prefix; waits for its "listening on" line."""

    def __init__(self, name, argv, env=None):
        self.name = name
        self.lines = []
        self.listening = threading.Event()
        self.address = None
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            sys.stderr.write(f"[{self.name}] {line}")
            m = re.search(r"listening on (\S+)", line)
            if m and not self.listening.is_set():
                self.address = m.group(1)
                self.listening.set()

    def wait_listening(self, timeout_s=180):
        if not self.listening.wait(timeout_s):
            raise AssertionError(f"{self.name} did not listen within {timeout_s} s")
        return self.address

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(10)


def service(name, model, *overrides):
    """An rlmesh service binary on free ports with the quickstart config."""
    argv = [os.path.join(ARGS.build_dir, "bin", name), "--config",
            os.path.join(ARGS.source_dir, "deploy/configs/quickstart.yaml"), "--port", "0",
            "--metrics_port", "0", f"actor_rollout_ref.model.path={model}", *overrides]
    return Process(name, argv)


class PythonExamplesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="rlmesh_python_examples_")
        cls.model = os.path.join(cls.dir, "model")
        subprocess.run([os.path.join(ARGS.build_dir, "bin", "rlmesh"), "make-tiny-model",
                        "--arch", "qwen3", "--out", cls.model, "--hidden", "32", "--layers",
                        "1", "--heads", "2", "--kv-heads", "1", "--intermediate", "64",
                        "--max-position", "64", "--seed", "3"],
                       check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(cls.model, "config.json")) as f:
            cls.vocab = json.load(f)["vocab_size"]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_client(self, *argv):
        client = os.path.join(ARGS.source_dir, "examples/python/rollout_client.py")
        done = subprocess.run([sys.executable, client, *argv], env=python_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
        sys.stderr.write(done.stdout)
        self.assertEqual(done.returncode, 0, done.stdout)
        return json.loads(done.stdout.strip().splitlines()[-1])

    def test_client_generates_within_the_limits_and_matches_the_reference(self):
        rollout = service("rlmesh-rollout", self.model)
        reference = service("rlmesh-reference", self.model)
        try:
            tokenizer = os.path.join(self.model, "tokenizer.json")
            argv = ["--rollout", rollout.wait_listening(), "--reference",
                    reference.wait_listening(), "--tokenizer", tokenizer, "--n", "4",
                    "--seed", "11"]
            summary = self.run_client(*argv)
            self.assertEqual(summary["samples"], 8)
            self.assertEqual(summary["distinct"], 8)  # every (prompt, index) once
            self.assertEqual(summary["vocab_size"], self.vocab)
            self.assertEqual(summary["max_model_len"], 24)  # quickstart: 16 + 8
            with open(tokenizer, "rb") as f:
                self.assertEqual(summary["tokenizer_sha256"], hashlib.sha256(f.read()).hexdigest())
            self.assertTrue(summary["tokenizer_matches"])
            self.assertEqual(summary["problems"], [])
            for tokens in summary["tokens"].values():
                self.assertTrue(all(0 <= t < self.vocab for t in tokens))
            # The same weights give the same log-probs, up to float32 rounding.
            self.assertLess(summary["max_logprob_diff"], 1e-3)
            # A fixed seed draws the same samples again.
            self.assertEqual(self.run_client(*argv)["tokens"], summary["tokens"])
        finally:
            rollout.stop()
            reference.stop()

    def test_reward_server_scores_through_rlmesh_reward(self):
        server = Process("reward_server", [
            sys.executable, os.path.join(ARGS.source_dir, "examples/python/reward_server.py"),
            "--port", "0"], env=python_env())
        try:
            python_address = server.wait_listening(60)
            reward = service("rlmesh-reward", self.model,
                             f"rlmesh.reward.custom_address={python_address}",
                             "rlmesh.reward.custom_data_sources=[python/exact_match]")
            try:
                self.check_scores(reward.wait_listening(), python_address)
            finally:
                reward.stop()
        finally:
            server.stop()

    def check_scores(self, reward_address, python_address):
        sys.path.insert(0, os.path.join(ARGS.build_dir, "python"))
        import grpc
        from rlmesh.v1 import reward_pb2, reward_pb2_grpc

        def item(i, source, response, truth):
            return reward_pb2.RewardItem(id=f"i{i}", data_source=source, prompt="p",
                                         response=response, ground_truth=truth)

        request = reward_pb2.ScoreRequest(items=[
            item(0, "python/exact_match", " 42 ", "42"),
            item(1, "python/exact_match", "41", "42"),
            item(2, "rlmesh/reverse_digits", "4321", "4321"),
            item(3, "rlmesh/reverse_digits", "4300", "4321"),
            item(4, "python/exact_match", "boom", "42"),
        ])
        stub = reward_pb2_grpc.RewardServiceStub(grpc.insecure_channel(reward_address))
        deadline = time.monotonic() + 60
        while True:  # rlmesh-reward's health turns SERVING right after "listening on"
            try:
                response = stub.Score(request, timeout=30)
                break
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        results = {r.id: r for r in response.results}
        self.assertEqual([r.id for r in response.results], [f"i{i}" for i in range(5)])
        # Python's exact match, through rlmesh-reward: "acc" is the Python scorer's value.
        self.assertEqual((results["i0"].score, results["i0"].extra_values["acc"]), (1.0, 1.0))
        self.assertEqual((results["i1"].score, results["i1"].error), (0.0, ""))
        # The built-in reverse_digits scorer: 2 of 4 characters right.
        self.assertEqual(results["i2"].score, 1.0)
        self.assertEqual(results["i3"].score, 0.5)
        # The Python scorer's exception is that item's error, reported as remote.
        self.assertEqual(results["i4"].error_kind, "remote")
        self.assertIn("ValueError", results["i4"].error)
        # Straight to the Python server: a malformed request is INVALID_ARGUMENT naming the
        # field.
        direct = reward_pb2_grpc.RewardServiceStub(grpc.insecure_channel(python_address))
        with self.assertRaises(grpc.RpcError) as refused:
            direct.Score(reward_pb2.ScoreRequest(items=[item(0, "x", "a", "b"),
                                                        item(0, "x", "a", "b")]), timeout=30)
        self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn('items[1].id: duplicate id "i0"', refused.exception.details())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--source-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])
