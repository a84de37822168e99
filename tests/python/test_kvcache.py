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
    assert _lib.lib().flashattn_c_decode_params_size() == ctypes.sizeof(_lib.DecodeParams) == 440


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
    (3, 8, 2, 96, 1, [300, 0, 1000], 1, 0, True, torch.bfloat16, True, (-1, -1), 3),
    (2, 12, 4, 192, 2, [700, 33], 2, 16, False, torch.float16, False, (-1, -1), 0),
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
def test_unchecked_bad_indices_are_reported_by_kvcache_check_errors():
    """check_indices=False (the default) runs bad indices as zeros; the kernel records the first
    bad entry and kvcache_check_errors() reports it once (then the record is clear)."""
    try:
        flashattn.kvcache_check_errors()  # whatever an earlier test left
    except ValueError:
        pass
    kwargs, _, _ = _case(2, 8, 2, 64, 1, [10, 20], 1, 16, False, torch.bfloat16)
    flash_attn_with_kvcache(**kwargs)
    flashattn.kvcache_check_errors()  # good indices: nothing recorded
    kwargs["block_table"][1, 0] = 99999
    flash_attn_with_kvcache(**kwargs)  # runs: the bad page reads as zeros
    with pytest.raises(ValueError, match=r"page_table\[1\]\[0\]: page 99999 is outside"):
        flashattn.kvcache_check_errors()
    flashattn.kvcache_check_errors()
    kwargs["block_table"][1, 0] = 0
    kwargs["cache_seqlens"][0] = -4
    flash_attn_with_kvcache(**kwargs)
    with pytest.raises(ValueError, match=r"cache_seqlens\[0\]: must be >= 0, got -4"):
        flashattn.kvcache_check_errors()


def test_kvcache_check_errors_needs_a_device():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present (the GPU test above covers it)")
    with pytest.raises(flashattn.UnsupportedError, match="decode_check_errors: needs a CUDA device"):
        flashattn.kvcache_check_errors()
    assert _lib.lib().flashattn_c_decode_check_errors(None, None, 0) == _lib.UNSUPPORTED


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


# ---- rotary (rotary_cos, rotary_sin, rotary_interleaved) ------------------------------------------
def _rotary_tables(seqlen_ro, rotary_dim, dtype):
    """Standard tables (theta 10000): cos/sin of t * 10000^(-2p / rotary_dim), (seqlen_ro,
    rotary_dim / 2) in dtype."""
    inv = 10000.0 ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.outer(torch.arange(seqlen_ro, dtype=torch.float64), inv)
    return angles.cos().to(dtype).cuda(), angles.sin().to(dtype).cuda()


def _rotate(x, cos, sin, pos, interleaved):
    """Rotary of x (..., d) at positions pos (x.shape[:-2] or broadcastable, long), the torch
    version of decode's arithmetic: the products x*cos and x*sin of two 16-bit values are exact
    in fp64 (and in fp32), so x0*c - x1*s formed in fp64 and rounded to fp32 is the kernel's
    single-rounding fma; then one more rounding to the element type. Bitwise the kernel's."""
    rd = 2 * cos.shape[1]
    c, s = cos[pos].double().unsqueeze(-2), sin[pos].double().unsqueeze(-2)
    xd = x.double()
    i0, i1 = ((slice(0, rd, 2), slice(1, rd, 2)) if interleaved
              else (slice(0, rd // 2), slice(rd // 2, rd)))
    x0, x1 = xd[..., i0], xd[..., i1]
    out = x.clone()
    out[..., i0] = (x0 * c - x1 * s).float().to(x.dtype)
    out[..., i1] = (x1 * c + x0 * s).float().to(x.dtype)
    return out


ROTARY_CASES = [
    # batch, hq, hkv, d, sq, seqlens, seqlen_new, page_size, dtype, causal, window, rotary_dim,
    # num_splits
    (3, 8, 2, 128, 1, [300, 0, 1000], 1, 0, torch.bfloat16, True, (-1, -1), 128, 0),
    (2, 8, 2, 128, 3, [200, 513], 3, 16, torch.float16, True, (-1, -1), 64, 3),
    (2, 6, 1, 64, 3, [200, 513], 3, 0, torch.bfloat16, False, (-1, -1), 32, 0),  # q at seqlens
    (2, 16, 16, 256, 2, [64, 700], 0, 64, torch.float16, False, (40, 0), 256, 1),  # local
    (1, 8, 2, 64, 4, [2047], 2, 1, torch.bfloat16, False, (-1, -1), 6, 0),
]


@pytest.mark.gpu
@pytest.mark.parametrize("interleaved", [True, False], ids=["interleaved", "halves"])
@pytest.mark.parametrize(
    "case", ROTARY_CASES, ids=lambda c: f"b{c[0]}_h{c[1]}x{c[2]}_d{c[3]}_q{c[4]}_new{c[6]}_"
                                       f"page{c[7]}_c{int(c[9])}_w{c[10][0]}_rd{c[11]}")
def test_rotary_matches_torch_and_appends_rotated_keys_exactly(case, interleaved):
    batch, hq, hkv, d, sq, seqlens, new, page, dtype, causal, window, rd, splits = case
    kwargs, (k_expect, v_expect), keys = _case(batch, hq, hkv, d, sq, seqlens, new, page, False,
                                               dtype)
    cos, sin = _rotary_tables(max(seqlens) + max(new, sq) + 3, rd, dtype)
    q_in = kwargs["q"].clone()
    k_in = None if kwargs["k"] is None else kwargs["k"].clone()
    out, lse = flash_attn_with_kvcache(**kwargs, rotary_cos=cos, rotary_sin=sin,
                                       rotary_interleaved=interleaved, causal=causal,
                                       window_size=window, num_splits=splits,
                                       return_softmax_lse=True, check_indices=True)
    torch.cuda.synchronize()
    assert torch.equal(kwargs["q"], q_in), "q was modified"
    if k_in is not None:
        assert torch.equal(kwargs["k"], k_in), "k was modified"
    lens = torch.tensor(seqlens, dtype=torch.long, device="cuda")
    local = causal or window != (-1, -1)
    tok = torch.arange(sq, device="cuda") if local else torch.zeros(sq, dtype=torch.long,
                                                                     device="cuda")
    q_rot = _rotate(q_in, cos, sin, lens[:, None] + tok[None, :], interleaved)
    if new:
        k_rot = _rotate(k_in, cos, sin, lens[:, None] + torch.arange(new, device="cuda"),
                        interleaved)
        for b in range(batch):
            for n in range(new):
                r, i = keys[b][seqlens[b] + n]
                k_expect[r, i] = k_rot[b, n]
    assert torch.equal(kwargs["k_cache"].view(torch.int16), k_expect.view(torch.int16))
    assert torch.equal(kwargs["v_cache"].view(torch.int16), v_expect.view(torch.int16))
    _check_entries(out, lse, {**kwargs, "q": q_rot}, (k_expect, v_expect), keys, None, causal,
                   window)


@pytest.mark.gpu
def test_rotary_under_graph_capture_and_compile():
    """No host synchronisation with check_indices off: the call captures into a CUDA graph and
    compiles with fullgraph; both equal the eager call bitwise."""
    kwargs, _, _ = _case(2, 8, 2, 128, 2, [100, 37], 0, 16, False, torch.bfloat16)
    cos, sin = _rotary_tables(140, 64, torch.bfloat16)

    def step(q):
        return flash_attn_with_kvcache(q, kwargs["k_cache"], kwargs["v_cache"], rotary_cos=cos,
                                       rotary_sin=sin, cache_seqlens=kwargs["cache_seqlens"],
                                       block_table=kwargs["block_table"], causal=True,
                                       rotary_interleaved=False)
    eager = step(kwargs["q"])
    compiled = torch.compile(step, fullgraph=True)(kwargs["q"])
    assert torch.equal(compiled, eager)
    static_q = kwargs["q"].clone()
    step(static_q)  # warm-up outside the capture (pool, occupancy query)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        captured = step(static_q)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)


@pytest.mark.gpu
@pytest.mark.parametrize("change, says", [
    (dict(no_sin=True), "rotary_cos/rotary_sin: give both or neither"),
    (dict(rd=130), "rotary_dim: must be even and in \\[2, head_dim = 128\\]"),
    (dict(rows=100), "uses rotary positions up to 100, beyond the tables' seqlen_ro 100"),
    (dict(dtype=torch.float16), "rotary_cos.dtype: must equal q.dtype"),
])
def test_rotary_bad_arguments(change, says):
    kwargs, _, _ = _case(1, 8, 2, 128, 1, [100], 1, 0, False, torch.bfloat16)
    cos, sin = _rotary_tables(change.get("rows", 200), change.get("rd", 64),
                              change.get("dtype", torch.bfloat16))
    k_before = kwargs["k_cache"].clone()
    with pytest.raises(ValueError, match=says):
        flash_attn_with_kvcache(**kwargs, rotary_cos=cos,
                                rotary_sin=None if change.get("no_sin") else sin,
                                check_indices=True)
    assert torch.equal(kwargs["k_cache"].view(torch.int16), k_before.view(torch.int16))


@pytest.mark.gpu
def test_rotary_custom_op_schema_and_fake():
    kwargs, _, _ = _case(2, 8, 2, 64, 1, [40, 7], 1, 0, False, torch.bfloat16)
    cos, sin = _rotary_tables(64, 32, torch.bfloat16)
    args = (kwargs["q"], kwargs["k_cache"], kwargs["v_cache"], kwargs["k"], kwargs["v"],
            kwargs["cache_seqlens"], None, None, 0.0, True, -1, -1, 0, False, None, 0.0, cos, sin,
            False)
    torch.library.opcheck(torch.ops.flashattn.fwd_kvcache.default, args,
                          test_utils=("test_schema", "test_faketensor"))


def test_package_exports_it():
    assert "flash_attn_with_kvcache" in flashattn.__all__
    assert "kvcache_check_errors" in flashattn.__all__


# ---- FP8 (e4m3) KV cache: k_scale / v_scale ----------------------------------------------------
@pytest.mark.parametrize("change, says", [
    (dict(no_scales=True), "k_scale, v_scale: required with a torch.float8_e4m3fn cache"),
    (dict(sixteen=True), "k_scale, v_scale: only with a torch.float8_e4m3fn cache"),
    (dict(scale_len=3), r"k_scale.shape\[0\]: must be 1 \(per tensor\) or heads_kv = 2"),
    (dict(scale_dtype=torch.float16), "k_scale.dtype: must be torch.float32"),
])
def test_fp8_cache_bad_arguments(change, says):
    """The torch-side rules of an FP8 cache, checked before anything touches a device."""
    q = torch.zeros(2, 1, 8, 64, dtype=torch.bfloat16)
    dtype = torch.bfloat16 if change.get("sixteen") else torch.float8_e4m3fn
    cache = torch.zeros(2, 32, 2, 64, dtype=dtype)
    scale = torch.ones(change.get("scale_len", 1), dtype=change.get("scale_dtype", torch.float32))
    scales = {} if change.get("no_scales") else dict(k_scale=scale, v_scale=scale.clone())
    with pytest.raises(ValueError, match=says):
        flash_attn_with_kvcache(q, cache, cache.clone(), cache_seqlens=3, **scales)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [128, 96, 192])
@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("page_size", [0, 16])
def test_fp8_cache_matches_the_reference_on_the_dequantised_cache(per_head, page_size, d):
    """With power-of-two scales the e4m3 cache's values are exact in bf16: the FP8 call and the
    bf16 call on the dequantised cache must both meet the oracle on that cache (not bitwise
    equal: the FP8 kernel sums its MMAs in another order and runs P·V in fp16), and the appended
    rows must be e4m3 of (k / scale) rounded to nearest even (torch's cast; values kept inside
    +-448)."""
    torch.manual_seed(20)
    b, hq, hkv, cap = 2, 8, 2, 96
    ks = torch.tensor([0.5, 2.0] if per_head else [0.5], device="cuda")
    vs = torch.tensor([0.25, 1.0] if per_head else [0.25], device="cuda")
    rows = b * cap // page_size if page_size else b
    per_row = page_size if page_size else cap
    shape = (rows, per_row, hkv, d)
    head_k = ks.view(1, 1, -1, 1) if per_head else ks
    head_v = vs.view(1, 1, -1, 1) if per_head else vs
    k8 = (torch.randn(shape, device="cuda") / head_k).to(torch.float8_e4m3fn)
    v8 = (torch.randn(shape, device="cuda") / head_v).to(torch.float8_e4m3fn)
    q = torch.randn(b, 1, hq, d, device="cuda").to(torch.bfloat16)
    k_new = torch.randn(b, 1, hkv, d, device="cuda").to(torch.bfloat16)
    v_new = torch.randn(b, 1, hkv, d, device="cuda").to(torch.bfloat16)
    seqlens = torch.tensor([40, 77], dtype=torch.int32, device="cuda")
    table = (torch.randperm(rows, device="cuda").to(torch.int32).view(b, -1) if page_size
             else None)
    deq = lambda c, s: (c.float() * s).to(torch.bfloat16)  # noqa: E731
    out8 = flash_attn_with_kvcache(q, k8, v8, k=k_new, v=v_new, cache_seqlens=seqlens,
                                   block_table=table, causal=True, num_splits=3,
                                   k_scale=ks, v_scale=vs)
    # The appended rows: e4m3 of (k / scale).
    for i in range(b):
        j = int(seqlens[i])
        row, at = ((table[i, j // page_size], j % page_size) if page_size else (i, j))
        want_k = (k_new[i, 0].float() / head_k.view(-1, 1) if per_head else
                  k_new[i, 0].float() / ks).to(torch.float8_e4m3fn)
        assert torch.equal(k8[row, at].view(torch.uint8), want_k.view(torch.uint8))
    k16, v16 = deq(k8, head_k), deq(v8, head_v)  # the cache after the append, dequantised
    out16 = flash_attn_with_kvcache(q, k16, v16, cache_seqlens=seqlens + 1, block_table=table,
                                    causal=True, num_splits=3)
    for i in range(b):
        n = int(seqlens[i]) + 1
        if page_size:
            pages = table[i, :(n + page_size - 1) // page_size].long()
            kb = k16[pages].reshape(-1, hkv, d)[:n].unsqueeze(0)
            vb = v16[pages].reshape(-1, hkv, d)[:n].unsqueeze(0)
        else:
            kb, vb = k16[i:i + 1, :n], v16[i:i + 1, :n]
        check(out8[i:i + 1], None, q[i:i + 1], kb, vb, causal=True)
        check(out16[i:i + 1], None, q[i:i + 1], kb, vb, causal=True)
