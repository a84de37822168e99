"""bench/train_check.py as a CPU smoke test: a tiny GPT trained a few steps with flashattn's
attention (the cpu kernel, forward and backward) and with PyTorch SDPA from the same weights and
batches; the script must succeed and the two loss curves agree within its tolerance."""
import json
import math
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")


@pytest.fixture
def train_check():
    sys.path.insert(0, BENCH)
    try:
        import train_check
        yield train_check
    finally:
        sys.path.remove(BENCH)


def test_train_check_cpu_smoke(train_check, tmp_path):
    out = tmp_path / "train_check.json"
    steps = 5
    # Five steps learn nothing: the learning bar is lifted (--learn-frac 10) for the smoke test;
    # the GPU run keeps the default (the final loss below 0.6 ln(vocab)).
    assert train_check.main(["--device", "cpu", "--steps", str(steps), "--log-every", "0",
                             "--learn-frac", "10", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    ours, theirs = result["loss_flashattn"], result["loss_sdpa"]
    assert len(ours) == len(theirs) == len(result["rel_diff"]) == steps
    assert all(math.isfinite(x) for x in ours + theirs)
    # Step 0 is the untrained model on the same batch: about ln(vocab) for both.
    vocab = result["config"]["vocab"]
    assert abs(theirs[0] - math.log(vocab)) < 1.0
    assert result["ok"] and result["max_rel_diff"] <= result["config"]["tol"]
    assert result["learned"] and result["learn_bar"] == 10 * math.log(vocab)
    assert result["max_rel_diff"] == max(abs(a - b) / abs(b) for a, b in zip(ours, theirs))
    # The curves are of two trainings, not one: the weights moved.
    assert ours[-1] != ours[0]
