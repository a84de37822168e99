"""The packed entry points (flash_attn_qkvpacked_func, flash_attn_kvpacked_func and their varlen
forms): the same result, bit for bit, as the unpacked call on the same data with the same kernel;
q, k and v handed on as views of the packed tensor (no copy); malformed packed shapes refused with
ValueError naming the argument. The dense equalities run on the CPU kernel; the varlen ones need a
family with variable-length support and run on CUDA (the `gpu` tests); on the CPU the varlen
functions are checked through a stand-in for flash_attn_varlen_func that records its arguments."""
import pytest
import torch

import flashattn
from flashattn import (flash_attn_func, flash_attn_kvpacked_func,
                       flash_attn_qkvpacked_func, flash_attn_varlen_func,
                       flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func)

HAVE_FA2 = flashattn.kernel_is_built("fa2")
FA2_SKIP = "fa2 (the first family with variable-length support) is not built in this library"
CAUSAL_WINDOW = [(False, (-1, -1)), (True, (-1, -1)), (False, (13, 5))]


def randn(*shape, device="cpu"):
    return torch.randn(*shape, device=device).bfloat16()


def cu(seqlens, device="cpu"):
    return torch.tensor([0] + seqlens, device=device).cumsum(0).to(torch.int32)


def inside(view, packed):
    """view's elements lie in packed's memory: the same storage, no copy."""
    start = packed.untyped_storage().data_ptr()
    end = start + packed.untyped_storage().nbytes()
    return (view.untyped_storage().data_ptr() == start
            and start <= view.data_ptr() < end and view.stride(-1) == 1)


def same(a, b):
    """Bitwise equality of the results (out, or (out, lse))."""
    a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.dtype == y.dtype
        assert torch.equal(x, y), f"max|diff| {(x.float() - y.float()).abs().max().item():.3g}"


class Recorder:
    """Stands in for an interface function: records the tensors and keywords it is given."""

    def __init__(self):
        self.args, self.kwargs = None, None

    def __call__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs
        return "result"


@pytest.fixture
def recorded(monkeypatch):
    dense, varlen = Recorder(), Recorder()
    monkeypatch.setattr(flashattn.interface, "flash_attn_func", dense)
    monkeypatch.setattr(flashattn.interface, "flash_attn_varlen_func", varlen)
    return dense, varlen


# ---- dense, on the CPU kernel --------------------------------------------------------------------
@pytest.mark.parametrize("causal,window", CAUSAL_WINDOW)
def test_qkvpacked_equals_unpacked(causal, window):
    qkv = randn(2, 67, 3, 4, 64)
    q, k, v = (qkv[:, :, i].contiguous() for i in range(3))
    kw = dict(causal=causal, window_size=window, return_lse=True, kernel="cpu")
    same(flash_attn_qkvpacked_func(qkv, **kw), flash_attn_func(q, k, v, **kw))


@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (6, 1)])
@pytest.mark.parametrize("causal,window", CAUSAL_WINDOW)
def test_qkvpacked_gqa_form_equals_unpacked(hq, hkv, causal, window):
    qkv = randn(2, 45, hq + 2 * hkv, 64)
    q = qkv[:, :, :hq].contiguous()
    k = qkv[:, :, hq:hq + hkv].contiguous()
    v = qkv[:, :, hq + hkv:].contiguous()
    kw = dict(causal=causal, window_size=window, return_lse=True, kernel="cpu")
    same(flash_attn_qkvpacked_func(qkv, num_heads_q=hq, **kw), flash_attn_func(q, k, v, **kw))


@pytest.mark.parametrize("hq,hkv", [(4, 4), (6, 2), (4, 1)])
@pytest.mark.parametrize("causal,window", CAUSAL_WINDOW)
def test_kvpacked_equals_unpacked(hq, hkv, causal, window):
    q, kv = randn(2, 33, hq, 64), randn(2, 71, 2, hkv, 64)
    k, v = kv[:, :, 0].contiguous(), kv[:, :, 1].contiguous()
    kw = dict(causal=causal, window_size=window, return_lse=True)  # auto: cpu for CPU tensors
    same(flash_attn_kvpacked_func(q, kv, **kw), flash_attn_func(q, k, v, **kw))


def test_positional_arguments_and_scale():
    # The arguments keep flash_attn_func's order after the packed tensors.
    qkv = randn(1, 20, 3, 2, 64)
    q, k, v = qkv.unbind(2)
    same(flash_attn_qkvpacked_func(qkv, 0.3, True, (4, 0), True, "cpu"),
         flash_attn_func(q, k, v, 0.3, True, (4, 0), True, "cpu"))
    kv = qkv[:, :, 1:]
    same(flash_attn_kvpacked_func(q, kv, 0.3, True), flash_attn_func(q, k, v, 0.3, True))


# ---- views, not copies -------------------------------------------------------------------------
def test_qkvpacked_passes_views(recorded):
    dense, _ = recorded
    qkv = randn(2, 9, 3, 4, 64)
    assert flash_attn_qkvpacked_func(qkv, causal=True, kernel="cpu") == "result"
    q, k, v = dense.args
    for i, t in enumerate((q, k, v)):
        assert inside(t, qkv) and t.shape == (2, 9, 4, 64)
        assert t.data_ptr() == qkv[:, :, i].data_ptr() and t.stride() == qkv[:, :, i].stride()
    assert dense.kwargs == dict(softmax_scale=None, causal=True, window_size=(-1, -1),
                                return_lse=False, kernel="cpu", deterministic=False, softcap=0.0)


def test_qkvpacked_gqa_form_passes_views(recorded):
    dense, _ = recorded
    qkv = randn(2, 9, 6 + 2 * 2, 64)
    flash_attn_qkvpacked_func(qkv, num_heads_q=6)
    q, k, v = dense.args
    assert [t.shape[2] for t in (q, k, v)] == [6, 2, 2]
    assert all(inside(t, qkv) for t in (q, k, v))
    assert (q.data_ptr(), k.data_ptr(), v.data_ptr()) == (
        qkv.data_ptr(), qkv[:, :, 6].data_ptr(), qkv[:, :, 8].data_ptr())


def test_kvpacked_passes_views(recorded):
    dense, _ = recorded
    q, kv = randn(2, 9, 4, 64), randn(2, 17, 2, 2, 64)
    flash_attn_kvpacked_func(q, kv)
    q_seen, k, v = dense.args
    assert q_seen is q and inside(k, kv) and inside(v, kv)
    assert (k.data_ptr(), v.data_ptr()) == (kv[:, :, 0].data_ptr(), kv[:, :, 1].data_ptr())


@pytest.mark.parametrize("gqa", [False, True])
def test_varlen_qkvpacked_passes_views(recorded, gqa):
    _, varlen = recorded
    cu_seqlens = cu([5, 0, 12])
    qkv = randn(17, 4 + 2 * 2, 64) if gqa else randn(17, 3, 4, 64)
    extra = dict(num_heads_q=4) if gqa else {}
    flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, 12, causal=True, window_size=(3, 0),
                                     **extra)
    q, k, v, cu_q, cu_k, max_q, max_k = varlen.args
    assert all(inside(t, qkv) for t in (q, k, v))
    assert (q.shape, k.shape) == ((17, 4, 64), (17, 2 if gqa else 4, 64))
    assert cu_q is cu_seqlens and cu_k is cu_seqlens and max_q == max_k == 12
    assert varlen.kwargs == dict(softmax_scale=None, causal=True, window_size=(3, 0),
                                 return_lse=False, kernel="auto", deterministic=False, softcap=0.0)


def test_varlen_kvpacked_passes_views(recorded):
    _, varlen = recorded
    q, kv = randn(17, 4, 64), randn(30, 2, 2, 64)
    cu_q, cu_k = cu([5, 12]), cu([10, 20])
    flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, 12, 20, 0.5, True, return_lse=True)
    q_seen, k, v, cu_q_seen, cu_k_seen, max_q, max_k = varlen.args
    assert q_seen is q and inside(k, kv) and inside(v, kv)
    assert (k.data_ptr(), v.data_ptr()) == (kv[:, 0].data_ptr(), kv[:, 1].data_ptr())
    assert cu_q_seen is cu_q and cu_k_seen is cu_k and (max_q, max_k) == (12, 20)
    assert varlen.kwargs["softmax_scale"] == 0.5 and varlen.kwargs["causal"] is True


def test_further_keywords_are_passed_through(recorded):
    # Options the interface gains later (sinks=, ...) reach it without a change here.
    dense, varlen = recorded
    marker = object()
    flash_attn_qkvpacked_func(randn(1, 4, 3, 2, 64), sinks=marker)
    assert dense.kwargs["sinks"] is marker
    flash_attn_kvpacked_func(randn(1, 4, 2, 64), randn(1, 4, 2, 2, 64), sinks=marker)
    assert dense.kwargs["sinks"] is marker
    flash_attn_varlen_qkvpacked_func(randn(4, 3, 2, 64), cu([4]), 4, sinks=marker)
    assert varlen.kwargs["sinks"] is marker
    flash_attn_varlen_kvpacked_func(randn(4, 2, 64), randn(4, 2, 2, 64), cu([4]), cu([4]), 4, 4,
                                    sinks=marker)
    assert varlen.kwargs["sinks"] is marker


def test_varlen_packed_on_the_cpu_kernel_equal_the_unpacked_call():
    # The views reach flash_attn_varlen_func, which the cpu kernel runs (variable length).
    qkv = randn(17, 3, 2, 64)
    got = flash_attn_varlen_qkvpacked_func(qkv, cu([5, 12]), 12, causal=True)
    want = flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu([5, 12]), cu([5, 12]), 12,
                                  12, causal=True)
    assert torch.equal(got, want)
    q, kv = randn(17, 2, 64), randn(30, 2, 2, 64)
    got = flash_attn_varlen_kvpacked_func(q, kv, cu([5, 12]), cu([10, 20]), 12, 20, kernel="cpu")
    want = flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu([5, 12]), cu([10, 20]), 12, 20)
    assert torch.equal(got, want)


# ---- malformed packed tensors ------------------------------------------------------------------
@pytest.mark.parametrize("shape,num_heads_q,message", [
    ((2, 9, 4, 64), None, r"num_heads_q: required when qkv has 4 dimensions"),
    ((2, 9, 3, 4, 64, 1), None, r"qkv: expected 5 dimensions .* or 4 .* got shape"),
    ((9, 3, 4, 64), None, r"num_heads_q: required when qkv has 4 dimensions"),
    ((2, 9, 2, 4, 64), None, r"qkv\.shape\[2\]: must be 3 .* got shape \(2, 9, 2, 4, 64\)"),
    ((2, 9, 3, 4, 64), 2, r"num_heads_q: must be None or the heads of qkv \(4\)"),
    ((2, 9, 9, 64), 4, r"num_heads_q: qkv\.shape\[2\] = 9 must be num_heads_q \(4\) \+ 2"),
    ((2, 9, 8, 64), 8, r"num_heads_q: qkv\.shape\[2\] = 8 must be num_heads_q \(8\) \+ 2"),
    ((2, 9, 14, 64), 6, r"num_heads_q: must be a multiple of heads_kv \(6 is not a multiple "
                        r"of 4"),
    ((2, 9, 8, 64), 0, r"num_heads_q: expected an integer > 0, got 0"),
    ((2, 9, 8, 64), 4.0, r"num_heads_q: expected an integer > 0, got 4\.0"),
])
def test_qkvpacked_bad_shapes(shape, num_heads_q, message):
    with pytest.raises(ValueError, match=message):
        flash_attn_qkvpacked_func(randn(*shape), num_heads_q=num_heads_q)


@pytest.mark.parametrize("shape,num_heads_q,message", [
    ((17, 3, 4, 64, 1), None, r"qkv: expected 4 dimensions \(total, 3, heads, head_dim\)"),
    ((17, 4, 4, 64), None, r"qkv\.shape\[1\]: must be 3 .* got shape \(17, 4, 4, 64\)"),
    ((17, 8, 64), None, r"num_heads_q: required when qkv has 3 dimensions \(total, heads_q"),
    ((17, 7, 64), 4, r"num_heads_q: qkv\.shape\[1\] = 7 must be"),
])
def test_varlen_qkvpacked_bad_shapes(shape, num_heads_q, message):
    with pytest.raises(ValueError, match=message):
        flash_attn_varlen_qkvpacked_func(randn(*shape), cu([17]), 17, num_heads_q=num_heads_q)


def test_kvpacked_bad_shapes():
    q = randn(2, 9, 4, 64)
    with pytest.raises(ValueError, match=r"kv: expected 5 dimensions \(batch, seqlen_k, 2, "
                                         r"heads_kv, head_dim\), got shape \(2, 9, 4, 64\)"):
        flash_attn_kvpacked_func(q, randn(2, 9, 4, 64))
    with pytest.raises(ValueError, match=r"kv\.shape\[2\]: must be 2 .* got shape"):
        flash_attn_kvpacked_func(q, randn(2, 9, 3, 4, 64))
    with pytest.raises(ValueError, match=r"kv: expected a torch\.Tensor, got list"):
        flash_attn_kvpacked_func(q, [1, 2])
    with pytest.raises(ValueError, match=r"kv: expected 4 dimensions \(total_k, 2, heads_kv"):
        flash_attn_varlen_kvpacked_func(randn(9, 4, 64), randn(9, 2, 4, 64, 1), cu([9]), cu([9]),
                                        9, 9)
    with pytest.raises(ValueError, match=r"kv\.shape\[1\]: must be 2"):
        flash_attn_varlen_kvpacked_func(randn(9, 4, 64), randn(9, 3, 4, 64), cu([9]), cu([9]),
                                        9, 9)
    with pytest.raises(ValueError, match=r"qkv: expected a torch\.Tensor, got NoneType"):
        flash_attn_qkvpacked_func(None)


def test_unpacked_rules_still_apply():
    # What the unpacked call checks is left to it: the library's GQA rule, the interface's
    # checks of q against the views.
    with pytest.raises(ValueError, match=r"k\.shape\[0\] \(batch\): must equal q's batch"):
        flash_attn_kvpacked_func(randn(3, 9, 4, 64), randn(2, 9, 2, 4, 64))
    with pytest.raises(ValueError, match=r"heads_q: must be a multiple of heads_kv"):
        flash_attn_kvpacked_func(randn(2, 9, 6, 64), randn(2, 9, 2, 4, 64))


# ---- CUDA: the same equalities on the GPU families -----------------------------------------------
def gpu_kernels():
    return ["auto"] + (["fa2"] if HAVE_FA2 else [])


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["auto", "fa2"])
@pytest.mark.parametrize("causal,window", CAUSAL_WINDOW)
def test_dense_on_cuda(kernel, causal, window):
    if kernel not in gpu_kernels():
        pytest.skip("fa2 is not built in this library")
    kw = dict(causal=causal, window_size=window, return_lse=True, kernel=kernel)
    qkv = randn(2, 301, 3, 4, 128, device="cuda")
    q, k, v = (qkv[:, :, i].contiguous() for i in range(3))
    same(flash_attn_qkvpacked_func(qkv, **kw), flash_attn_func(q, k, v, **kw))

    hq, hkv = 6, 2
    qkv = randn(2, 301, hq + 2 * hkv, 128, device="cuda")
    q, k, v = (t.contiguous() for t in qkv.split([hq, hkv, hkv], dim=2))
    same(flash_attn_qkvpacked_func(qkv, num_heads_q=hq, **kw), flash_attn_func(q, k, v, **kw))

    q, kv = randn(2, 113, hq, 128, device="cuda"), randn(2, 239, 2, hkv, 128, device="cuda")
    k, v = kv[:, :, 0].contiguous(), kv[:, :, 1].contiguous()
    same(flash_attn_kvpacked_func(q, kv, **kw), flash_attn_func(q, k, v, **kw))
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_FA2, reason=FA2_SKIP)
@pytest.mark.parametrize("kernel", ["auto", "fa2"])
@pytest.mark.parametrize("causal,window", CAUSAL_WINDOW)
def test_varlen_on_cuda(kernel, causal, window):
    kw = dict(causal=causal, window_size=window, return_lse=True, kernel=kernel)
    seqlens = [17, 0, 113, 239, 1]
    cu_seqlens, total, longest = cu(seqlens, device="cuda"), sum(seqlens), max(seqlens)
    qkv = randn(total, 3, 4, 128, device="cuda")
    q, k, v = (qkv[:, i].contiguous() for i in range(3))
    same(flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, longest, **kw),
         flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, longest, longest, **kw))

    hq, hkv = 6, 2
    qkv = randn(total, hq + 2 * hkv, 128, device="cuda")
    q, k, v = (t.contiguous() for t in qkv.split([hq, hkv, hkv], dim=1))
    same(flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, longest, num_heads_q=hq, **kw),
         flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, longest, longest, **kw))

    seqlens_k = [17, 40, 203, 1, 0]
    cu_k = cu(seqlens_k, device="cuda")
    q, kv = randn(total, hq, 128, device="cuda"), randn(sum(seqlens_k), 2, hkv, 128, device="cuda")
    k, v = kv[:, 0].contiguous(), kv[:, 1].contiguous()
    same(flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens, cu_k, longest, max(seqlens_k), **kw),
         flash_attn_varlen_func(q, k, v, cu_seqlens, cu_k, longest, max(seqlens_k), **kw))
    torch.cuda.synchronize()
