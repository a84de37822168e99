"""flash_attn_func on CPU tensors (the library's cpu kernel) against SDPA with the oracle of
TESTING.md. Always runs; small shapes so the suite stays fast on two cores."""
import pytest
import torch

import flashattn
from attn_ref import check
from flashattn import flash_attn_func

DTYPES = [torch.bfloat16, torch.float16]


def randn(*shape, dtype=torch.bfloat16, scale=1.0):
    return (torch.randn(*shape) * scale).to(dtype)


def qkv(b, sq, sk, hq, hkv, d, dv=None, dtype=torch.bfloat16, q_scale=1.0):
    dv = d if dv is None else dv
    return (randn(b, sq, hq, d, dtype=dtype, scale=q_scale), randn(b, sk, hkv, d, dtype=dtype),
            randn(b, sk, hkv, dv, dtype=dtype))


def test_auto_picks_cpu_for_host_tensors():
    assert "cpu" in flashattn.built_kernels()
    q, k, v = qkv(1, 17, 17, 2, 2, 64)
    check(flash_attn_func(q, k, v), None, q, k, v)
    assert torch.equal(flash_attn_func(q, k, v), flash_attn_func(q, k, v, kernel="cpu"))


# Odd sequence lengths of TESTING.md (the large ones left to the GPU suite), both directions.
@pytest.mark.parametrize("sq,sk", [(1, 1), (1, 239), (113, 203), (239, 1), (128, 128),
                                   (203, 113), (799, 3)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_seqlens(sq, sk, causal, dtype):
    q, k, v = qkv(2, sq, sk, 2, 1, 64, dtype=dtype)
    out, lse = flash_attn_func(q, k, v, causal=causal, return_lse=True)
    check(out, lse, q, k, v, causal=causal)


@pytest.mark.parametrize("d,dv", [(64, 64), (96, 96), (128, 128), (192, 192), (256, 256),
                                  (192, 128)])
def test_head_dims(d, dv):
    q, k, v = qkv(1, 65, 97, 2, 2, d, dv)
    out, lse = flash_attn_func(q, k, v, return_lse=True)
    assert out.shape == (1, 65, 2, dv)
    check(out, lse, q, k, v)


@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (6, 1), (12, 2)])
def test_gqa_mqa(hq, hkv):
    q, k, v = qkv(2, 77, 91, hq, hkv, 64)
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)
    check(out, lse, q, k, v, causal=True)


def test_causal_bottom_right_fully_masked_rows():
    # seqlen_q > seqlen_k: the first sq - sk query rows see no key: out 0, LSE -inf.
    q, k, v = qkv(1, 100, 30, 2, 2, 64)
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)
    check(out, lse, q, k, v, causal=True)
    assert torch.isneginf(lse[:, :, :70]).all() and torch.isfinite(lse[:, :, 70:]).all()
    assert (out[:, :70] == 0).all()


@pytest.mark.parametrize("window,causal", [((17, 5), False), ((-1, 3), False), ((8, -1), False),
                                           ((0, 0), False), ((33, 0), True), ((10, -1), True)])
def test_window(window, causal):
    q, k, v = qkv(1, 113, 203, 4, 2, 64)
    out, lse = flash_attn_func(q, k, v, causal=causal, window_size=window, return_lse=True)
    check(out, lse, q, k, v, causal=causal, window=window)


def test_softmax_scale_and_large_logits():
    # Large logits make the running max move, exercising the online-softmax rescaling.
    q, k, v = qkv(1, 129, 257, 2, 2, 128, q_scale=8.0)
    out, lse = flash_attn_func(q, k, v, return_lse=True)
    check(out, lse, q, k, v)
    out, lse = flash_attn_func(q, k, v, softmax_scale=0.3, return_lse=True)
    check(out, lse, q, k, v, scale=0.3)


def test_seqlen_k_zero_and_empty_batch():
    q, k, v = qkv(1, 5, 0, 2, 2, 64)
    out, lse = flash_attn_func(q, k, v, return_lse=True)
    assert (out == 0).all() and torch.isneginf(lse).all()
    q, k, v = qkv(0, 5, 5, 2, 2, 64)
    out, lse = flash_attn_func(q, k, v, return_lse=True)
    assert out.shape == (0, 5, 2, 64) and lse.shape == (0, 2, 5)


# ---- strides -------------------------------------------------------------------------------------
def test_heads_major_and_padded_strides():
    b, s, h, d = 2, 67, 4, 64
    q = randn(b, h, s, d).transpose(1, 2)                 # (b, s, h, d) view of heads-major data
    k = randn(b, s, h, d + 32)[..., :d]                   # padded rows
    v = randn(s, b, h, d).transpose(0, 1)                 # sequence-major (batch inside)
    assert not (q.is_contiguous() or k.is_contiguous() or v.is_contiguous())
    out, lse = flash_attn_func(q, k, v, causal=True, return_lse=True)
    check(out, lse, q, k, v, causal=True)
    assert out.is_contiguous()


def test_packed_qkv_and_expanded_kv():
    b, s, h, d = 1, 50, 4, 64
    q, k, v = randn(b, s, 3, h, d).unbind(2)              # interleaved qkv, strides (.., 3hd, d, 1)
    check(flash_attn_func(q, k, v), None, q, k, v)
    k1, v1 = randn(b, s, 1, d), randn(b, s, 1, d)         # MQA expanded to 4 heads: head stride 0
    ke, ve = k1.expand(b, s, h, d), v1.expand(b, s, h, d)
    out = flash_attn_func(q, ke, ve)
    check(out, None, q, ke, ve)
    torch.testing.assert_close(out, flash_attn_func(q, k1, v1), rtol=0, atol=0)


def test_last_dim_strided_is_copied():
    q = randn(1, 33, 2, 64, 2)[..., 0]                    # stride(-1) == 2
    k, v = randn(1, 40, 2, 64), randn(1, 40, 2, 64)
    assert q.stride(-1) == 2
    check(flash_attn_func(q, k, v), None, q, k, v)


def test_deterministic():
    q, k, v = qkv(2, 150, 150, 4, 2, 128)
    a = flash_attn_func(q, k, v, causal=True)
    for _ in range(3):
        assert torch.equal(a, flash_attn_func(q, k, v, causal=True))
