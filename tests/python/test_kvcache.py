"""flash_attn_with_kvcache (flashattn::fwd_kvcache over the C ABI's flashattn_c_decode): argument
errors and the struct mirror on any machine; on CUDA, every batch entry against the torch
reference of attn_ref (FlashAttention's oracle) over its first cache_seqlens[b] + seqlen_new keys
of the expected cache, and the caches after the append equal to the expected ones bit for bit.
Cache slots no sequence owns hold NaN, so a kernel that reads one fails the oracle."""
import ctypes

import pytest
import torch

import flashattn
from attn_ref import check
from flashattn import _lib, flash_attn_with_kvcache


def test_decode_struct_mirrors_the_library():
    assert _lib.lib().flashattn_c_decode_params_size() == ctypes.sizeof(_lib.DecodeParams) == 376


def test_decode_struct_reaches_the_validation():
    code, msg = _lib.decode_can_implement(_lib.DecodeParams(batch=0))
    assert code == _lib.INVALID_ARGUMENT and "batch" in msg, msg
    code, msg = _lib.decode_can_implement(_lib.DecodeParams(check_indices=2))
    assert code == _lib.INVALID_ARGUMENT and "check_indices" in msg, msg


def test_cpu_tensors_are_refused():
    q = torch.zeros(2, 1, 8, 64, dtype=torch.bfloat16)
    cache = torch.zeros(2, 32, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="runs on CUDA tensors"):
        flash_attn_with_kvcache(q, cache, cache.clone(), cache_seqlens=3)


@pytest.mark.gpu
@pytest.mark.parametrize("change, says", [
    (dict(seqlens_dtype=torch.int64), "cache_seqlens.dtype"),
    (dict(only_k=True), "give both or neither"),
    (dict(cache_stride=True), "last dimension must be contiguous"),
])
def test_bad_arguments_raise_value_error(change, says):
    q = torch.zeros(2, 1, 8, 64, dtype=torch.bfloat16, device="cuda")
    cache = torch.zeros(2, 32, 2, 64, dtype=torch.bfloat16, device="cuda")
    if change.get("cache_stride"):
        cache = torch.zeros(2, 32, 2, 128, dtype=torch.bfloat16, device="cuda")[..., ::2]
    seqlens = torch.zeros(2, dtype=change.get("seqlens_dtype", torch.int32), device="cuda")
    k = torch.zeros(2, 1, 2, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match=says):
        flash_attn_with_kvcache(q, cache, cache.clone(), k=k if change.get("only_k") else None,
                                cache_seqlens=seqlens)


def _randn(*shape, dtype, scale=1.0):
    return (torch.randn(*shape, device="cuda") * scale).to(dtype)


def _case(batch, hq, hkv, d, sq, seqlens, seqlen_new, page_size, batch_idx, dtype, q_scale=1.0):
    """Inputs of one call and the caches expected after it. Returns (kwargs, expected caches,
    per-entry cache rows of every key the entry attends to)."""
    cap = max(seqlens) + seqlen_new + 5
    if page_size:
        max_pages = (cap + page_size - 1) // page_size
        num_pages = batch * max_pages + 2
        perm = torch.randperm(num_pages, device="cuda").to(torch.int32)
        block_table = perm[:batch * max_pages].view(batch, max_pages).contiguous()
        shape = (num_pages, page_size, hkv, d)
    else:
        block_table = None
        cache_rows = batch + 2 if batch_idx else batch
        shape = (cache_rows, cap, hkv, d)
    k_cache = torch.full(shape, float("nan"), device="cuda").to(dtype)
    v_cache = k_cache.clone()
    rows = (torch.randperm(batch + 2, device="cuda")[:batch].to(torch.int32) if batch_idx
            else None)

    def where(b, j):  # (cache row or page, position in it) of key j of entry b
        if page_size:
            return block_table[b, j // page_size].item(), j % page_size
        return (rows[b].item() if batch_idx else b), j

    for b in range(batch):
        for j in range(seqlens[b]):
            r, i = where(b, j)
            k_cache[r, i] = _randn(hkv, d, dtype=dtype)
            v_cache[r, i] = _randn(hkv, d, dtype=dtype)
    q = _randn(batch, sq, hq, d, dtype=dtype, scale=q_scale)
    k = _randn(batch, seqlen_new, hkv, d, dtype=dtype) if seqlen_new else None
    v = _randn(batch, seqlen_new, hkv, d, dtype=dtype) if seqlen_new else None
    k_expect, v_expect = k_cache.clone(), v_cache.clone()
    keys = []
    for b in range(batch):
        for n in range(seqlen_new):
            r, i = where(b, seqlens[b] + n)
            k_expect[r, i], v_expect[r, i] = k[b, n], v[b, n]
        keys.append([where(b, j) for j in range(seqlens[b] + seqlen_new)])
    kwargs = dict(q=q, k_cache=k_cache, v_cache=v_cache, k=k, v=v,
                  cache_seqlens=torch.tensor(seqlens, dtype=torch.int32, device="cuda"),
                  cache_batch_idx=rows, block_table=block_table)
    return kwargs, (k_expect, v_expect), keys


def _check_entries(out, lse, kwargs, expected, keys, scale, causal, window):
    k_expect, v_expect = expected
    for b, where in enumerate(keys):
        idx_r = torch.tensor([r for r, _ in where], dtype=torch.long, device="cuda")
        idx_i = torch.tensor([i for _, i in where], dtype=torch.long, device="cuda")
        kb = k_expect[idx_r, idx_i].unsqueeze(0)  # (1, L, hkv, d)
        vb = v_expect[idx_r, idx_i].unsqueeze(0)
        check(out[b:b + 1], None if lse is None else lse[b:b + 1], kwargs["q"][b:b + 1], kb, vb,
              scale=scale, causal=causal, window=window)


CASES = [
    # batch, hq, hkv, d, sq, seqlens, seqlen_new, page_size, batch_idx, dtype, causal, window,
    # num_splits
    (3, 8, 2, 128, 1, [300, 0, 1000], 1, 0, False, torch.bfloat16, False, (-1, -1), 0),
    (2, 32, 8, 128, 1, [4000, 17], 0, 16, False, torch.bfloat16, False, (-1, -1), 0),
    (2, 6, 1, 64, 3, [200, 513], 2, 0, True, torch.float16, True, (-1, -1), 3),
    (4, 16, 16, 256, 2, [64, 1, 700, 90], 1, 64, False, torch.float16, True, (40, 0), 1),
    (1, 8, 2, 64, 16, [2047], 0, 256, False, torch.bfloat16, False, (100, 3), 0),
]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"b{c[0]}_h{c[1]}x{c[2]}_d{c[3]}_q{c[4]}_new{c[6]}_page{c[7]}_"
                                 f"idx{int(c[8])}_c{int(c[10])}_w{c[11][0]}_s{c[12]}")
def test_matches_reference_and_appends_exactly(case):
    batch, hq, hkv, d, sq, seqlens, new, page, idx, dtype, causal, window, splits = case
    kwargs, expected, keys = _case(batch, hq, hkv, d, sq, seqlens, new, page, idx, dtype,
                                   q_scale=4.0 if splits == 3 else 1.0)
    out, lse = flash_attn_with_kvcache(**kwargs, causal=causal, window_size=window,
                                       num_splits=splits, return_softmax_lse=True,
                                       check_indices=True)
    torch.cuda.synchronize()
    assert torch.equal(kwargs["k_cache"].view(torch.int16), expected[0].view(torch.int16))
    assert torch.equal(kwargs["v_cache"].view(torch.int16), expected[1].view(torch.int16))
    _check_entries(out, lse, kwargs, expected, keys, None, causal, window)


@pytest.mark.gpu
def test_int_cache_seqlens_and_whole_cache():
    kwargs, expected, keys = _case(2, 8, 2, 128, 1, [333, 333], 0, 0, False, torch.bfloat16)
    kwargs["cache_seqlens"] = 333
    out = flash_attn_with_kvcache(**kwargs, softmax_scale=0.05)
    _check_entries(out, None, kwargs, expected, keys, 0.05, False, (-1, -1))
    # cache_seqlens=None attends to the whole cache: fill the NaN tail first.
    full = kwargs["k_cache"].shape[1]
    kwargs["k_cache"][:, 333:] = 0.5
    kwargs["v_cache"][:, 333:] = -0.25
    kwargs["cache_seqlens"] = None
    out = flash_attn_with_kvcache(**kwargs)
    ref = flash_attn_with_kvcache(**{**kwargs, "cache_seqlens": full})
    assert torch.equal(out, ref)


@pytest.mark.gpu
def test_bad_indices_refused_when_checked():
    kwargs, _, _ = _case(2, 8, 2, 64, 1, [10, 20], 1, 16, False, torch.bfloat16)
    kwargs["block_table"][1, 0] = 99999
    k_before = kwargs["k_cache"].clone()
    with pytest.raises(ValueError, match="page_table"):
        flash_attn_with_kvcache(**kwargs, check_indices=True)
    assert torch.equal(kwargs["k_cache"].view(torch.int16), k_before.view(torch.int16))


@pytest.mark.gpu
def test_repeated_calls_are_bitwise_identical():
    kwargs, _, _ = _case(1, 32, 8, 128, 1, [9000], 0, 0, False, torch.float16)
    first = flash_attn_with_kvcache(**kwargs)
    for _ in range(3):
        assert torch.equal(flash_attn_with_kvcache(**kwargs), first)


@pytest.mark.gpu
def test_custom_op_declares_its_mutations():
    kwargs, _, _ = _case(2, 8, 2, 64, 1, [40, 7], 1, 0, False, torch.bfloat16)
    args = (kwargs["q"], kwargs["k_cache"], kwargs["v_cache"], kwargs["k"], kwargs["v"],
            kwargs["cache_seqlens"], None, None, 0.0, False, -1, -1, 0, False)
    torch.library.opcheck(torch.ops.flashattn.fwd_kvcache.default, args,
                          test_utils=("test_schema", "test_faketensor"))


def test_package_exports_it():
    assert "flash_attn_with_kvcache" in flashattn.__all__
