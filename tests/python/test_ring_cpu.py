"""flashattn.distributed (ring attention, forward) on 2 and 4 processes with the gloo backend and
the cpu kernel, against flash_attn_func on the full sequence in one process and FlashAttention's
oracle (attn_ref.check); the same on 2 GPUs with NCCL where a host has them.

One spawn per world size runs every case (spawning and importing torch is most of the time on
two cores); rank 0 writes the unsharded results to a file and the tests check them in this
process. Spawned children inherit os.environ (FLASHATTN_LIBRARY) and sys.path (PYTHONPATH and
this folder), so they load the same library and this module; not the seed, which conftest
draws afresh in each process, so the workers are given this process's.
"""
import zlib

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from attn_ref import LSE_REL_TOL, check
from conftest import SEED
from flashattn import flash_attn_func
from flashattn.distributed import ring_flash_attn_func, shard, unshard

# name: (causal, layout, heads_q, heads_kv, head_dim, head_dim_v, dtype, sinks, chunk)
# The full sequence is 2 * world * chunk tokens (odd chunks: no length is a multiple of 8).
CASES = {
    "causal_zigzag": (True, "zigzag", 4, 4, 64, 64, torch.bfloat16, False, 13),
    "causal_zigzag_gqa": (True, "zigzag", 6, 2, 128, 128, torch.bfloat16, False, 11),
    "causal_zigzag_fp16_d192_128": (True, "zigzag", 2, 1, 192, 128, torch.float16, False, 9),
    "causal_contiguous_gqa": (True, "contiguous", 4, 2, 64, 64, torch.bfloat16, False, 7),
    "noncausal_contiguous": (False, "contiguous", 2, 2, 96, 96, torch.bfloat16, False, 13),
    "noncausal_contiguous_mqa": (False, "contiguous", 4, 1, 64, 64, torch.bfloat16, False, 10),
    "noncausal_zigzag_gqa": (False, "zigzag", 4, 2, 256, 256, torch.bfloat16, False, 5),
    "causal_zigzag_sinks": (True, "zigzag", 4, 2, 64, 64, torch.bfloat16, True, 12),
}
BATCH = 2


def _inputs(name, world, device, seed=SEED):
    causal, layout, hq, hkv, d, dv, dtype, with_sinks, chunk = CASES[name]
    gen = torch.Generator().manual_seed(seed ^ zlib.crc32(f"{name}/{world}".encode()))
    s = 2 * world * chunk
    q, k, v = (torch.randn(BATCH, s, h, e, generator=gen).to(dtype).to(device)
               for h, e in ((hq, d), (hkv, d), (hkv, dv)))
    sinks = torch.randn(hq, generator=gen).to(device) if with_sinks else None
    return q, k, v, sinks


def _worker(rank, world, backend, init_file, result_file, seed):
    torch.set_num_threads(1)  # world processes share two cores
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    try:
        results = {}
        # Refused before any transfer: the odd local length (zigzag needs two equal chunks).
        q = torch.randn(1, 2 * world + 1, 2, 64, dtype=torch.bfloat16, device=device)
        try:
            ring_flash_attn_func(q, q, q, causal=True, layout="zigzag")
        except ValueError as e:
            results["odd_error"] = str(e)
        # Refused by the library inside step 0, after the step's transfers were posted: they
        # must still complete, so the ring keeps working after the error.
        q = torch.randn(1, 4, 2, 40, dtype=torch.bfloat16, device=device)
        try:
            ring_flash_attn_func(q, q, q)
        except ValueError as e:
            results["head_dim_error"] = str(e)
        for name, (causal, layout, *_rest) in CASES.items():
            q, k, v, sinks = _inputs(name, world, device, seed)
            local = [shard(t, rank, world, layout) for t in (q, k, v)]
            out, lse = ring_flash_attn_func(*local, causal=causal, layout=layout,
                                            return_lse=True, sinks=sinks)
            results[name] = (unshard(out, world, layout).cpu(),
                             unshard(lse, world, layout, dim=2).cpu())
        x = torch.randn(2, 4 * world, 3, 8 * world, generator=torch.Generator().manual_seed(seed))
        x = x.to(device)  # the same full tensor on every rank
        results["round_trip"] = all(
            torch.equal(unshard(shard(x, rank, world, layout, dim), world, layout, dim=dim), x)
            for layout in ("zigzag", "contiguous") for dim in (1, 3))
        q = torch.randn(1, 8, 2, 64, dtype=torch.bfloat16, device=device, requires_grad=True)
        try:
            ring_flash_attn_func(q, q.detach(), q.detach(), causal=True).float().sum().backward()
        except NotImplementedError as e:
            results["backward_error"] = str(e)
        if rank == 0:
            torch.save(results, result_file)
    finally:
        dist.destroy_process_group()


def _spawn(tmp_path_factory, world, backend):
    tmp = tmp_path_factory.mktemp(f"ring{world}{backend}")
    result_file = str(tmp / "results.pt")
    mp.spawn(_worker, args=(world, backend, str(tmp / "init"), result_file, SEED), nprocs=world)
    return torch.load(result_file)


@pytest.fixture(scope="module")
def ring_results(tmp_path_factory):
    """get(world, backend): the workers' results, one spawn per (world, backend) per module."""
    cache = {}

    def get(world, backend="gloo"):
        if (world, backend) not in cache:
            cache[world, backend] = _spawn(tmp_path_factory, world, backend)
        return cache[world, backend]
    return get


def _expect_matches(name, world, results, device):
    causal = CASES[name][0]
    q, k, v, sinks = _inputs(name, world, device)
    ring_out, ring_lse = results[name]
    ref_out, ref_lse = flash_attn_func(q, k, v, causal=causal, return_lse=True, sinks=sinks)
    ref_out, ref_lse = ref_out.cpu(), ref_lse.cpu()
    assert ring_out.shape == ref_out.shape and ring_out.dtype == ref_out.dtype
    # The ring rounds each partial output to bf16/fp16 (relative step 2^-8 at most, so an error
    # of 2^-9 * max|v| for a convex combination of values) and rounds the fp32 merge once more;
    # the single-process kernel rounds P before P.V in blocks of its own. Four steps of 2^-8
    # of max|v| bound the difference.
    tol = 4 * 2.0**-8 * v.float().abs().max().item()
    err = (ring_out.float() - ref_out.float()).abs().max().item()
    assert err <= tol, f"max|ring - single| {err:.3g} > {tol:.3g}"
    assert torch.equal(torch.isneginf(ring_lse), torch.isneginf(ref_lse))
    finite = torch.isfinite(ref_lse)
    lse_err = (ring_lse[finite] - ref_lse[finite]).abs().max().item()
    assert lse_err <= LSE_REL_TOL * (1 + ref_lse[finite].abs().max().item())
    if sinks is None:  # the oracle's reference has no sinks
        check(ring_out.to(device), ring_lse.to(device), q, k, v, causal=causal)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", list(CASES))
def test_ring_matches_single_process(ring_results, world, name):
    _expect_matches(name, world, ring_results(world), "cpu")


@pytest.mark.parametrize("world", [2, 4])
def test_ring_errors_and_round_trip(ring_results, world):
    results = ring_results(world)
    assert "q.shape[1]" in results["odd_error"] and "zigzag" in results["odd_error"]
    assert "head_dim" in results["head_dim_error"]
    assert results["round_trip"]
    assert "backward" in results["backward_error"]


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_shard_layout_and_odd_lengths(layout):
    world = 3
    x = torch.arange(2 * world * 5).view(1, -1, 1, 1)
    parts = [shard(x, r, world, layout) for r in range(world)]
    chunk = 5 if layout == "zigzag" else 10
    owned = [(r, 2 * world - 1 - r) if layout == "zigzag" else (r,) for r in range(world)]
    for r, part in enumerate(parts):
        want = torch.cat([x[:, c * chunk:(c + 1) * chunk] for c in owned[r]], dim=1)
        assert torch.equal(part, want)
    assert sorted(torch.cat(parts, dim=1).flatten().tolist()) == x.flatten().tolist()
    bad = torch.zeros(1, 2 * world * 5 + (1 if layout == "contiguous" else world), 1, 1)
    with pytest.raises(ValueError, match=r"x\.shape\[1\] \(seqlen\): must be divisible"):
        shard(bad, 0, world, layout)
    with pytest.raises(ValueError, match="layout"):
        shard(x, 0, world, "ring")
    with pytest.raises(ValueError, match="rank"):
        shard(x, world, world, layout)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
@pytest.mark.parametrize("name", list(CASES))
def test_ring_nccl_two_gpus(ring_results, name):
    results = ring_results(2, "nccl")
    assert "q.shape[1]" in results["odd_error"] and results["round_trip"]
    _expect_matches(name, 2, results, "cuda:0")
