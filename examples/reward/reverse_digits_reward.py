"""The quickstart's reward as a verl reward file: the share of positions where the response
matches the reversed digits (rlmesh's built-in rlmesh/reverse_digits scorer, docs/reward.md).

    make quickstart ARGS=custom_reward_function.path=examples/reward/reverse_digits_reward.py

verl's signature; any file with a function like this one scores a run the same way.
"""

# Where a response ends when the tokenizer's special tokens were kept in the text.
END_MARKERS = ("<eos>", "</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>")


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if not ground_truth:
        raise ValueError("ground_truth is empty; expected the reversed digits")
    for marker in END_MARKERS:
        solution_str = solution_str.split(marker, 1)[0]
    right = sum(1 for a, b in zip(solution_str, ground_truth) if a == b)
    return {
        "score": right / max(len(ground_truth), len(solution_str)),
        "acc": float(solution_str == ground_truth),
        "length_match": float(len(solution_str) == len(ground_truth)),
    }
