"""flash_attn_func and flash_attn_varlen_func on CUDA tensors against SDPA (fp32, the oracle of
TESTING.md), for every built GPU family and `auto`; the current stream and device honoured;
torch.compile on CUDA. Skipped without a CUDA device."""
import pytest
import torch

import flashattn
from attn_ref import check
from flashattn import flash_attn_func, flash_attn_varlen_func

pytestmark = pytest.mark.gpu

HOPPER = ("k3", "k4", "k5", "k6")  # sm_90a code: compute capability 9.0 only
FP8_ONLY = ("k7", "k8")  # e4m3 inputs only: test_fp8.py and test_k8.py test them
ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
KERNELS = [k for k in flashattn.gpu_kernels()
           if (ON_SM90 or k not in HOPPER) and k not in FP8_ONLY] + ["auto"]
STORY_STEPS = ("k3", "k4", "k5")  # built for head dim 128 only
HAVE_VARLEN = flashattn.kernel_is_built("fa2")
VARLEN_SKIP = "fa2 (the first family with variable-length support) is not built in this library"


def randn(*shape, dtype=torch.bfloat16, scale=1.0, device="cuda"):
    return (torch.randn(*shape, device=device) * scale).to(dtype)


def qkv(b, sq, sk, hq, hkv, d, dv=None, dtype=torch.bfloat16, q_scale=1.0):
    dv = d if dv is None else dv
    return (randn(b, sq, hq, d, dtype=dtype, scale=q_scale), randn(b, sk, hkv, d, dtype=dtype),
            randn(b, sk, hkv, dv, dtype=dtype))


def poison(*shapes):
    """Fills and frees blocks of the outputs' sizes, so that the caching allocator hands the op
    NaN-filled memory and an element the kernel never writes fails the finiteness check."""
    blocks = [torch.full(s, float("nan"), device="cuda") for s in shapes]
    del blocks


def run(q, k, v, kernel, **kw):
    if kernel in STORY_STEPS and (q.shape[-1], v.shape[-1]) != (128, 128):
        pytest.skip(f"{kernel} is built for head dim 128 only")
    b, sq, hq, _ = q.shape
    poison((b, sq, hq, v.shape[-1] // 2), (b, hq, sq))  # fp32 NaNs: as many bytes as bf16 out
    out, lse = flash_attn_func(q, k, v, kernel=kernel, return_lse=True, **kw)
    torch.cuda.synchronize()
    return out, lse


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("sq,sk", [(1, 1), (1, 239), (113, 203), (239, 1), (799, 3),
                                   (1023, 1024), (1024, 1023), (4224, 4224)])
@pytest.mark.parametrize("causal", [False, True])
def test_seqlens(kernel, sq, sk, causal):
    q, k, v = qkv(1 if sq * sk > 2**20 else 2, sq, sk, 4, 2, 128)
    out, lse = run(q, k, v, kernel, causal=causal)
    check(out, lse, q, k, v, causal=causal)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("d,dv", [(64, 64), (96, 96), (128, 128), (192, 192), (256, 256),
                                  (192, 128)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_head_dims(kernel, d, dv, dtype):
    q, k, v = qkv(2, 257, 300, 2, 2, d, dv, dtype=dtype)
    try:
        out, lse = run(q, k, v, kernel)
    except flashattn.UnsupportedError as e:  # a family without the 192/128 pair says so
        assert dv != d and "head_dim_v" in str(e)
        pytest.skip(str(e))
    check(out, lse, q, k, v)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("hq,hkv", [(6, 6), (6, 3), (6, 1), (12, 2)])
def test_gqa_causal_fully_masked_rows(kernel, hq, hkv):
    q, k, v = qkv(2, 300, 130, hq, hkv, 64)  # seqlen_q > seqlen_k: 170 rows see no key
    out, lse = run(q, k, v, kernel, causal=True)
    check(out, lse, q, k, v, causal=True)
    assert torch.isneginf(lse[:, :, :170]).all() and (out[:, :170] == 0).all()


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("window,causal", [((17, 5), False), ((-1, 64), False), ((100, -1), False),
                                           ((0, 0), False), ((128, 0), True)])
def test_window(kernel, window, causal):
    q, k, v = qkv(2, 333, 517, 4, 2, 128)
    out, lse = run(q, k, v, kernel, causal=causal, window_size=window)
    check(out, lse, q, k, v, causal=causal, window=window)


@pytest.mark.parametrize("kernel", KERNELS)
def test_large_logits_and_scale(kernel):
    q, k, v = qkv(2, 520, 1030, 4, 4, 128, q_scale=8.0)
    out, lse = run(q, k, v, kernel)
    check(out, lse, q, k, v)
    out, lse = run(q, k, v, kernel, softmax_scale=0.05)
    check(out, lse, q, k, v, scale=0.05)


@pytest.mark.parametrize("kernel", KERNELS)
def test_strides(kernel):
    b, s, h, d = 2, 211, 4, 128
    q = randn(b, h, s, d).transpose(1, 2)                      # heads-major
    k = randn(b, s, h, d + 64)[..., :d]                        # padded rows
    v = randn(s, b, h, d).transpose(0, 1)                      # sequence-major
    out, lse = run(q, k, v, kernel, causal=True)
    check(out, lse, q, k, v, causal=True)
    q, k, v = randn(b, s, 3, h, d).unbind(2)                   # interleaved qkv
    out, lse = run(q, k, v, kernel)
    check(out, lse, q, k, v)
    q = randn(b, s, h, d, 2)[..., 0]                           # last dim strided: copied
    out, lse = run(q, k, v, kernel)
    check(out, lse, q, k, v)


@pytest.mark.parametrize("kernel", KERNELS)
def test_deterministic(kernel):
    q, k, v = qkv(2, 1000, 1000, 8, 2, 128)
    a = flash_attn_func(q, k, v, causal=True, kernel=kernel)
    for _ in range(5):
        assert torch.equal(a, flash_attn_func(q, k, v, causal=True, kernel=kernel))


# ---- streams and devices -------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", KERNELS)
def test_current_stream_is_used(kernel):
    # On a side stream: a long sleep, then q is overwritten, then attention. Only a launch on the
    # side stream (ordered after the copy) sees the new q; a launch on the default stream would
    # run during the sleep and read the old one. torch's side streams do not synchronise with
    # the legacy default stream.
    q, k, v = qkv(2, 512, 512, 4, 2, 128)
    q_new = randn(*q.shape)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of spinning at 2 GHz
        q.copy_(q_new)
        out = flash_attn_func(q, k, v, kernel=kernel)
        assert not side.query()  # enqueued behind the sleep, not run synchronously
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    check(out, None, q_new, k, v)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_tensors_on_a_non_current_device():
    q, k, v = qkv(1, 128, 128, 2, 2, 64)
    q1, k1, v1 = (t.to("cuda:1") for t in (q, k, v))
    with torch.cuda.device(0):
        out = flash_attn_func(q1, k1, v1)
    assert out.device == q1.device
    torch.testing.assert_close(out.cpu(), flash_attn_func(q, k, v).cpu(), rtol=0, atol=0)


def test_errors_on_cuda():
    q, k, v = qkv(1, 16, 16, 4, 4, 64)
    with pytest.raises(ValueError, match=r"k\.device: must equal q\.device"):
        flash_attn_func(q, k.cpu(), v)
    with pytest.raises(ValueError, match=r"q\.data: kernel cpu needs host memory"):
        flash_attn_func(q, k, v, kernel="cpu")


# ---- torch.compile -------------------------------------------------------------------------------
def test_compile_inductor_fullgraph():
    torch._dynamo.reset()
    q, k, v = qkv(2, 300, 400, 8, 2, 128)

    def model(q, k, v):
        out, lse = flash_attn_func(q * 0.5, k, v, causal=True, return_lse=True)
        return out, lse, out.float().sum(-1) + lse.transpose(1, 2)

    compiled = torch.compile(model, fullgraph=True)
    got, want = compiled(q, k, v), model(q, k, v)
    torch.testing.assert_close(got[:2], want[:2], rtol=0, atol=0)  # the op: bit for bit
    torch.testing.assert_close(got[2], want[2])  # inductor's fused sum: up to summation order
    explained = torch._dynamo.explain(model)(q, k, v)
    assert explained.graph_break_count == 0


# ---- variable length -----------------------------------------------------------------------------
def test_varlen_refused_without_a_varlen_family():
    if HAVE_VARLEN:
        pytest.skip("a variable-length family is built")
    q, k, v = randn(48, 4, 64), randn(80, 2, 64), randn(80, 2, 64)
    cu_q = torch.tensor([0, 20, 48], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 30, 80], dtype=torch.int32, device="cuda")
    with pytest.raises(flashattn.UnsupportedError, match="does not support variable length"):
        flash_attn_varlen_func(q, k, v, cu_q, cu_k, 28, 50)


@pytest.mark.skipif(not HAVE_VARLEN, reason=VARLEN_SKIP)
@pytest.mark.parametrize("kernel", ["fa2", "auto"])
@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (False, (37, 11))])
def test_varlen(kernel, causal, window):
    # Ragged batch with a zero-length query sequence, a zero-length key sequence, sq > sk rows.
    seqlens_q = [17, 0, 113, 239, 1, 300]
    seqlens_k = [17, 40, 203, 1, 0, 128]
    hq, hkv, d = 6, 2, 128
    cu_q = torch.tensor([0] + seqlens_q, device="cuda").cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0] + seqlens_k, device="cuda").cumsum(0).to(torch.int32)
    q = randn(sum(seqlens_q), hq, d)
    k, v = randn(sum(seqlens_k), hkv, d), randn(sum(seqlens_k), hkv, d)
    out, lse = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(seqlens_q), max(seqlens_k),
                                      causal=causal, window_size=window, return_lse=True,
                                      kernel=kernel)
    torch.cuda.synchronize()
    assert out.shape == q.shape and lse.shape == (hq, q.shape[0])
    for b in range(len(seqlens_q)):
        q0, q1 = cu_q[b].item(), cu_q[b + 1].item()
        k0, k1 = cu_k[b].item(), cu_k[b + 1].item()
        if q1 == q0:
            continue
        check(out[None, q0:q1], lse[None, :, q0:q1], q[None, q0:q1], k[None, k0:k1],
              v[None, k0:k1], causal=causal, window=window)
