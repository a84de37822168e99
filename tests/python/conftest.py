"""Shared fixtures: a fresh seed per run (printed; FLASHATTN_SEED=<n> repeats a run), each test
seeded from it and its own name, and the `gpu` marker for tests that need a CUDA device."""
import os
import random
import zlib

import pytest
import torch

SEED = int(os.environ.get("FLASHATTN_SEED", random.SystemRandom().randrange(2**31)))
HAVE_CUDA = torch.cuda.is_available()


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")


def pytest_report_header(config):
    return f"flashattn seed {SEED} (FLASHATTN_SEED={SEED} repeats it)"


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"flashattn seed {SEED} (FLASHATTN_SEED={SEED} repeats it)")


def pytest_collection_modifyitems(config, items):
    if HAVE_CUDA:
        return
    skip = pytest.mark.skip(reason="no CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed(request):
    torch.manual_seed(SEED ^ zlib.crc32(request.node.nodeid.encode()))
