"""Paged KV in prefill: flash_attn_varlen_func(..., block_table=...) (flash-attn's keyword). k and
v are a paged cache (num_blocks, page_size, heads_kv, head_dim); key j of sequence b is
k[block_table[b, j // page_size], j % page_size]. Each call is compared, bit for bit, with the
same batch passed with contiguous packed k and v on the same family, and against the fp64-grade
reference of attn_ref per sequence. The cache is shuffled (never the identity table), has spare
blocks and unused rows full of NaN, and unused table columns hold ids out of range, so reading
anything a sequence does not own shows. CPU tests always run (the cpu family gathers on the host);
the `gpu` ones need a CUDA device."""
import pytest
import torch

import flashattn
from attn_ref import check
from flashattn import UnsupportedError, flash_attn_varlen_func

LENS = [(17, 33), (0, 0), (1, 1), (113, 239), (5, 0), (239, 113), (0, 7), (64, 300)]
PAGE_SIZES = [1, 16, 256, 7]


def cu(lens):
    return torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)


def paged_cache(k, v, cu_k, page_size, spare_blocks=3, spare_columns=2):
    """(k_cache, v_cache, block_table) holding the packed k, v of each sequence in shuffled
    blocks; what no sequence owns is NaN, and unused table columns are out of range."""
    lens = (cu_k[1:] - cu_k[:-1]).tolist()
    blocks = [(n + page_size - 1) // page_size for n in lens]
    num_blocks = sum(blocks) + spare_blocks
    order = torch.randperm(num_blocks).tolist()
    table = torch.full((len(lens), max(blocks) + spare_columns), num_blocks + 7, dtype=torch.int32)
    caches = [torch.full((num_blocks, page_size) + t.shape[1:], float("nan"), dtype=t.dtype)
              for t in (k, v)]
    at = 0
    for b, n in enumerate(lens):
        for i in range(blocks[b]):
            table[b, i] = order[at]
            at += 1
        for j in range(n):
            token = cu_k[b].item() + j
            for cache, t in zip(caches, (k, v)):
                cache[table[b, j // page_size], j % page_size] = t[token]
    return caches[0], caches[1], table


def inputs(hq=4, hkv=2, d=64, dv=None, lens=LENS, dtype=torch.bfloat16, device="cpu"):
    dv = d if dv is None else dv
    total_q, total_k = sum(q for q, _ in lens), sum(k for _, k in lens)
    q = torch.randn(total_q, hq, d, dtype=dtype)
    k = torch.randn(total_k, hkv, d, dtype=dtype)
    v = torch.randn(total_k, hkv, dv, dtype=dtype)
    cu_q, cu_k = cu([q for q, _ in lens]), cu([k for _, k in lens])
    return q, k, v, cu_q, cu_k, max(q for q, _ in lens), max(k for _, k in lens)


def to(device, *tensors):
    return [t.to(device) for t in tensors]


def run_both(page_size, device="cpu", kernel="auto", causal=True, window=(-1, -1), **shape):
    """(paged out, paged lse, contiguous out, contiguous lse, the host inputs)."""
    q, k, v, cu_q, cu_k, max_q, max_k = inputs(**shape)
    kc, vc, table = paged_cache(k, v, cu_k, page_size)
    dq, dk, dv, dcq, dck, dkc, dvc, dt = to(device, q, k, v, cu_q, cu_k, kc, vc, table)
    kw = dict(causal=causal, window_size=window, return_lse=True, kernel=kernel)
    out_p, lse_p = flash_attn_varlen_func(dq, dkc, dvc, dcq, dck, max_q, max_k, block_table=dt,
                                          **kw)
    out_c, lse_c = flash_attn_varlen_func(dq, dk, dv, dcq, dck, max_q, max_k, **kw)
    return out_p.cpu(), lse_p.cpu(), out_c.cpu(), lse_c.cpu(), (q, k, v, cu_q, cu_k)


def check_sequences(out, lse, q, k, v, cu_q, cu_k, causal, window):
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for b in range(len(cq) - 1):
        if cq[b + 1] == cq[b]:
            continue
        rows, keys = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        check(out[None, rows], lse[None, :, rows], q[None, rows], k[None, keys], v[None, keys],
              causal=causal, window=window)


def assert_paged_equals_contiguous(page_size, causal=True, window=(-1, -1), **kw):
    out_p, lse_p, out_c, lse_c, (q, k, v, cu_q, cu_k) = run_both(page_size, causal=causal,
                                                                 window=window, **kw)
    assert torch.equal(out_p, out_c) and torch.equal(lse_p, lse_c)
    check_sequences(out_p, lse_p, q, k, v, cu_q, cu_k, causal, window)


# ---- CPU (the cpu family) ---------------------------------------------------------------------
@pytest.mark.parametrize("page_size", PAGE_SIZES)
@pytest.mark.parametrize("causal,window,hq,hkv", [(True, (-1, -1), 4, 2), (False, (-1, -1), 6, 1),
                                                  (False, (37, 5), 2, 2)])
def test_cpu_paged_equals_contiguous_and_reference(page_size, causal, window, hq, hkv):
    assert_paged_equals_contiguous(page_size, causal=causal, window=window, hq=hq, hkv=hkv)


def test_cpu_paged_fp16_head_dim_v():
    assert_paged_equals_contiguous(7, hq=6, hkv=2, d=192, dv=128, dtype=torch.float16)


def test_block_table_row_stride_and_non_contiguous_rows():
    # A column slice of a wider table: rows at the wider stride (passed as block_table_stride).
    q, k, v, cu_q, cu_k, max_q, max_k = inputs()
    kc, vc, table = paged_cache(k, v, cu_k, 16)
    wide = torch.full((table.shape[0], table.shape[1] + 5), -1, dtype=torch.int32)
    wide[:, :table.shape[1]] = table
    got = flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, max_q, max_k, causal=True,
                                 block_table=wide[:, :table.shape[1]])
    want = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)
    assert torch.equal(got, want)


def test_expanded_and_transposed_tables_are_read_as_their_values():
    # Two sequences sharing one table row (an expanded view, row stride 0), and a table stored
    # column-major: the values count, not the strides.
    lens = [(9, 40), (5, 40)]
    q, k, v, cu_q, cu_k, max_q, max_k = inputs(lens=lens)
    k[40:], v[40:] = k[:40], v[:40]  # both sequences see the same keys
    kc, vc, table = paged_cache(k[:40], v[:40], cu([40]), 16)
    want = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, causal=True)
    shared = table.expand(2, -1)
    assert shared.stride(0) == 0
    got = flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, max_q, max_k, causal=True,
                                 block_table=shared)
    assert torch.equal(got, want)
    column_major = shared.t().contiguous().t()
    got = flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, max_q, max_k, causal=True,
                                 block_table=column_major)
    assert torch.equal(got, want)


def test_argument_checks():
    q, k, v, cu_q, cu_k, max_q, max_k = inputs()
    kc, vc, table = paged_cache(k, v, cu_k, 16)
    call = lambda **kw: flash_attn_varlen_func(  # noqa: E731
        kw.get("q", q), kw.get("k", kc), kw.get("v", vc), cu_q, cu_k, max_q, max_k,
        block_table=kw.get("table", table))
    with pytest.raises(ValueError, match=r"block_table\.dtype: must be torch\.int32"):
        call(table=table.long())
    with pytest.raises(ValueError, match=r"block_table: expected 2 dimensions"):
        call(table=table[0])
    with pytest.raises(ValueError, match=r"block_table\.shape\[0\]: must equal the batch"):
        call(table=table[1:])
    with pytest.raises(ValueError, match=r"k: expected 4 dimensions \(num_blocks, page_size"):
        call(k=k)
    with pytest.raises(ValueError, match=r"v\.shape\[:3\] \(num_blocks, page_size, heads_kv\)"):
        call(v=vc[:, :8])
    with pytest.raises(ValueError, match=r"k\.shape\[3\] \(head_dim\): must equal q's head_dim"):
        call(k=torch.randn(kc.shape[:3] + (128,)).bfloat16())
    with pytest.raises(ValueError, match=r"block_table\.device: must equal q\.device"):
        call(table=table.to("meta"))
    # The library's rules: host block tables are checked (the cpu family reads them as given).
    bad = table.clone()
    bad[3, 1] = -2
    with pytest.raises(ValueError, match=r"block_table\[3\]\[1\]: block -2 is outside "
                                         r"\[0, num_blocks = \d+\)"):
        call(table=bad)
    with pytest.raises(ValueError, match=r"cu_seqlens_k: sequence 3 has 239 keys, more than its "
                                         r"block_table row holds"):
        call(table=table[:, :3].contiguous())


def test_backward_is_refused():
    q, k, v, cu_q, cu_k, max_q, max_k = inputs()
    kc, vc, table = paged_cache(k, v, cu_k, 16)
    q.requires_grad_()
    out = flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, max_q, max_k, block_table=table)
    with pytest.raises(UnsupportedError, match="block_table: the backward of a paged call is not "
                                               "supported"):
        out.float().sum().backward()
    with torch.no_grad():  # inference needs no backward
        flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, max_q, max_k, block_table=table)


def test_opcheck_and_compile_fullgraph():
    q, k, v, cu_q, cu_k, max_q, max_k = inputs(lens=[(9, 20), (0, 3), (30, 31)])
    kc, vc, table = paged_cache(k, v, cu_k, 7)
    torch.library.opcheck(torch.ops.flashattn.varlen_fwd.default,
                          (q, kc, vc, cu_q, cu_k, max_q, max_k, 0.0, True, -1, -1, "auto", None,
                           False, 0.0, table))

    def f(q, kc, vc):
        out = flash_attn_varlen_func(q * 0.5, kc, vc, cu_q, cu_k, max_q, max_k, causal=True,
                                     block_table=table)
        return out.float().sum(-1)

    torch._dynamo.reset()
    explained = torch._dynamo.explain(f)(q, kc, vc)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q, kc, vc)
    torch.testing.assert_close(got, f(q, kc, vc), rtol=0, atol=0)


# ---- GPU ----------------------------------------------------------------------------------------
gpu = pytest.mark.gpu


def gpu_kernels():
    names = ["auto"] + [k for k in ("k6", "fa2") if flashattn.kernel_is_built(k)]
    if torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0):
        names = [k for k in names if k != "k6"]  # the Hopper family runs on sm_90 only
    return names


@gpu
@pytest.mark.parametrize("page_size", PAGE_SIZES)
@pytest.mark.parametrize("kernel", gpu_kernels())
@pytest.mark.parametrize("causal,hq,hkv,d", [(True, 8, 2, 128), (False, 6, 1, 64)])
def test_gpu_paged_equals_contiguous_and_reference(page_size, kernel, causal, hq, hkv, d):
    assert_paged_equals_contiguous(page_size, device="cuda", kernel=kernel, causal=causal, hq=hq,
                                   hkv=hkv, d=d)


@gpu
def test_gpu_compile_fullgraph_and_graph_capture():
    q, k, v, cu_q, cu_k, max_q, max_k = inputs(lens=LENS)
    kc, vc, table = paged_cache(k, v, cu_k, 16)
    q, kc, vc, cu_q, cu_k, table = to("cuda", q, kc, vc, cu_q, cu_k, table)

    def f(q):
        return flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, max_q, max_k, causal=True,
                                      block_table=table)

    eager = f(q)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f, fullgraph=True)(q), eager, rtol=0, atol=0)
    graph = torch.cuda.CUDAGraph()
    f(q)  # warm-up outside the capture (the library's workspace pool exists by now)
    with torch.cuda.graph(graph):
        captured = f(q)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, eager, rtol=0, atol=0)
