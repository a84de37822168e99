"""FP8 (e4m3) forward through flash_attn_func / flash_attn_varlen_func: torch.float8_e4m3fn q, k, v
with fp32 (batch, heads_kv) q/k/v descales and out_dtype bf16 or fp16.

On the CPU (the cpu family): bitwise equal to the 16-bit run on the dequantised inputs (exact
descales make descale * x exact in bf16 and fp16), FlashAttention-3's FP8 oracle (attn_ref's
check_fp8, reference.h's rule), descales honoured (a dropped or swapped one fails the oracle),
the argument errors, forward-only, and torch.compile(fullgraph=True). With the `gpu` marker: k7
(Hopper) against the oracle over head dims 64/128/256, odd seqlens, GQA/MQA, causal and windows,
descale kinds and both out dtypes; varlen with empty sequences; outlier inputs; reruns bitwise;
`auto` is k7; CUDA graphs and torch.compile."""
import pytest
import torch

import flashattn
from attn_ref import E4M3_MAX, FP8_GPU_SHAPES, check_fp8, dequantise, per_query_head
from flashattn import UnsupportedError, flash_attn_func, flash_attn_varlen_func

E4M3 = torch.float8_e4m3fn
OUT_DTYPES = [torch.bfloat16, torch.float16]
EXACT_DESCALES = torch.tensor([0.5, 0.75, 1.0, 1.25, 1.5, 2.0])  # a few bits each


def quantise(x, heads_kv, mode):
    """x (b, s, h, d) -> (e4m3 tensor, fp32 (b, heads_kv) descale or None). mode: "none" (x
    rounded to e4m3, no descale), "exact" (descales of a few bits), "random" (descales in
    [0.5, 2]) or "amax" (FlashAttention-3's per-(batch, KV head) amax / 448)."""
    b, _, h, _ = x.shape
    if mode == "none":
        return x.to(E4M3), None
    if mode == "exact":
        idx = torch.randint(len(EXACT_DESCALES), (b, heads_kv))
        descale = EXACT_DESCALES[idx].to(x.device)
    elif mode == "random":
        descale = torch.empty(b, heads_kv, device=x.device).uniform_(0.5, 2.0)
    else:
        amax = x.float().abs().view(b, x.shape[1], heads_kv, h // heads_kv, -1).amax(dim=(1, 3, 4))
        descale = torch.where(amax > 0, amax / E4M3_MAX, 1.0)
    return (x.float() / per_query_head(descale, h)).to(E4M3), descale


def fp8_inputs(b, sq, sk, hq, hkv, d, mode, device="cpu", q_sigma=1.0, dist="normal"):
    """(q8, k8, v8, q_descale, k_descale, v_descale): normal (or outlier) data quantised per
    `mode`; q scaled by q_sigma for large logits."""
    def data(s, h):
        x = torch.randn(b, s, h, d, device=device)
        if dist == "outliers":  # N(0, 1) + N(0, 100) on 0.1% of the elements
            x += torch.randn_like(x) * 10 * (torch.rand_like(x) < 1e-3)
        return x

    q8, qd = quantise(data(sq, hq) * q_sigma, hkv, mode)
    k8, kd = quantise(data(sk, hkv), hkv, mode)
    v8, vd = quantise(data(sk, hkv), hkv, mode)
    return q8, k8, v8, qd, kd, vd


def descale_kw(qd, kd, vd):
    return dict(q_descale=qd, k_descale=kd, v_descale=vd)


# ---- CPU: the cpu family ------------------------------------------------------------------------
CPU_SHAPES = [  # b, sq, sk, hq, hkv, d, causal, window
    (2, 113, 203, 4, 2, 64, False, (-1, -1)),
    (2, 113, 203, 4, 2, 64, True, (-1, -1)),
    (3, 239, 1, 4, 1, 128, True, (-1, -1)),  # MQA; causal with sq > sk: rows that see no key
    (1, 300, 255, 2, 2, 256, False, (37, 5)),
    (2, 1, 1, 6, 3, 64, False, (-1, -1)),
]


@pytest.mark.parametrize("shape", CPU_SHAPES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("mode", ["exact", "none"])
def test_cpu_equals_16bit_run_on_dequantised_inputs(shape, out_dtype, mode):
    b, sq, sk, hq, hkv, d, causal, window = shape
    q8, k8, v8, qd, kd, vd = fp8_inputs(b, sq, sk, hq, hkv, d, mode)
    out, lse = flash_attn_func(q8, k8, v8, causal=causal, window_size=window, return_lse=True,
                               kernel="cpu", out_dtype=out_dtype, **descale_kw(qd, kd, vd))
    assert out.dtype == out_dtype and lse.dtype == torch.float32
    q, k, v = (dequantise(x, ds, out_dtype) for x, ds in ((q8, qd), (k8, kd), (v8, vd)))
    want, want_lse = flash_attn_func(q, k, v, causal=causal, window_size=window,
                                     return_lse=True, kernel="cpu")
    assert torch.equal(out, want)
    assert torch.equal(lse, want_lse)  # true units: the dequantised scores' LSE
    check_fp8(out, lse, q8, k8, v8, qd, kd, vd, out_dtype, causal=causal, window=window)


def test_cpu_default_out_dtype_auto_and_padded_strides():
    # auto runs CPU tensors on cpu; out_dtype defaults to bf16; q, k, v as views of wider
    # tensors (padded heads and rows) are read through their strides.
    b, s, hq, hkv, d = 2, 70, 4, 2, 64
    q8, k8, v8, qd, kd, vd = fp8_inputs(b, s, s, hq, hkv, d, "exact")
    wide = [torch.zeros(b, s + 3, h + 1, d + 32, dtype=E4M3) for h in (hq, hkv, hkv)]
    views = [w[:, :s, :h, :d] for w, h in zip(wide, (hq, hkv, hkv))]
    for view, x in zip(views, (q8, k8, v8)):
        view.copy_(x)
    assert not views[0].is_contiguous()
    out = flash_attn_func(*views, causal=True, **descale_kw(qd, kd, vd))
    assert out.dtype == torch.bfloat16 and out.is_contiguous()
    want = flash_attn_func(q8, k8, v8, causal=True, kernel="cpu", **descale_kw(qd, kd, vd))
    assert torch.equal(out, want)


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_cpu_varlen_with_empty_sequences(out_dtype):
    lens = [(0, 5), (17, 33), (113, 239), (70, 0), (1, 1)]
    hq, hkv, d = 4, 2, 128
    nseq = len(lens)
    cu_q = torch.tensor([0] + [sum(q for q, _ in lens[:i + 1]) for i in range(nseq)],
                        dtype=torch.int32)
    cu_k = torch.tensor([0] + [sum(k for _, k in lens[:i + 1]) for i in range(nseq)],
                        dtype=torch.int32)
    q8 = torch.randn(int(cu_q[-1]), hq, d).to(E4M3)
    k8, v8 = (torch.randn(int(cu_k[-1]), hkv, d).to(E4M3) for _ in range(2))
    qd, kd, vd = (EXACT_DESCALES[torch.randint(6, (nseq, hkv))] for _ in range(3))
    max_q, max_k = max(q for q, _ in lens), max(k for _, k in lens)
    out, lse = flash_attn_varlen_func(q8, k8, v8, cu_q, cu_k, max_q, max_k, causal=True,
                                      return_lse=True, out_dtype=out_dtype,
                                      **descale_kw(qd, kd, vd))
    assert out.dtype == out_dtype and out.shape == (int(cu_q[-1]), hq, d)

    def per_token(x8, ds, cu):  # dequantised with each token's sequence's descale
        seq = torch.repeat_interleave(torch.arange(nseq), cu.diff().long())
        per_head = ds[seq].repeat_interleave(x8.shape[1] // hkv, dim=1)  # (tokens, heads)
        return (x8.float() * per_head[:, :, None]).to(out_dtype)

    want, want_lse = flash_attn_varlen_func(per_token(q8, qd, cu_q), per_token(k8, kd, cu_k),
                                            per_token(v8, vd, cu_k), cu_q, cu_k, max_q, max_k,
                                            causal=True, return_lse=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    for i, (a, e) in enumerate(zip(cu_q.tolist(), cu_q.tolist()[1:])):
        ka, ke = cu_k[i].item(), cu_k[i + 1].item()
        one = [t.unsqueeze(0) for t in (q8[a:e], k8[ka:ke], v8[ka:ke])]
        check_fp8(out[a:e].unsqueeze(0), lse[:, a:e].unsqueeze(0), *one, qd[i:i + 1],
                  kd[i:i + 1], vd[i:i + 1], out_dtype, causal=True)


@pytest.mark.parametrize("mode,q_sigma,dist", [("random", 1.0, "normal"),
                                               ("amax", 6.0, "normal"),
                                               ("amax", 1.0, "outliers")])
def test_cpu_passes_the_fp8_oracle(mode, q_sigma, dist):
    q8, k8, v8, qd, kd, vd = fp8_inputs(2, 200, 500, 4, 2, 128, mode, q_sigma=q_sigma, dist=dist)
    out, lse = flash_attn_func(q8, k8, v8, return_lse=True, **descale_kw(qd, kd, vd))
    check_fp8(out, lse, q8, k8, v8, qd, kd, vd)


def test_descales_are_honoured():
    # Descales far from 1 and from each other: dropping any one, or swapping q's and v's, moves
    # the output off the oracle of the intended call (so neither the binding nor the library
    # may lose or misplace one).
    q8, k8, v8, _, _, _ = fp8_inputs(2, 65, 130, 4, 2, 64, "none")
    qd = torch.tensor([[0.5, 2.0], [1.75, 0.625]])
    kd = torch.tensor([[1.875, 0.5], [0.75, 2.0]])
    vd = torch.tensor([[2.0, 0.625], [0.5, 1.5]])
    right = flash_attn_func(q8, k8, v8, **descale_kw(qd, kd, vd))
    check_fp8(right, None, q8, k8, v8, qd, kd, vd)
    wrong = [descale_kw(None, kd, vd), descale_kw(qd, None, vd), descale_kw(qd, kd, None),
             descale_kw(vd, kd, qd), descale_kw(qd.flip(1), kd, vd)]
    for kw in wrong:
        out = flash_attn_func(q8, k8, v8, **kw)
        assert not torch.equal(out, right)
        with pytest.raises(AssertionError, match="max.out-ref"):
            check_fp8(out, None, q8, k8, v8, qd, kd, vd)


# ---- argument errors ----------------------------------------------------------------------------
def small(dtype=E4M3, b=2, hq=4, hkv=2):
    return tuple(torch.randn(b, 16, h, 64).to(dtype) for h in (hq, hkv, hkv))


def test_descales_and_out_dtype_need_fp8_inputs():
    q, k, v = small(torch.bfloat16)
    ones = torch.ones(2, 2)
    for name in ("q_descale", "k_descale", "v_descale"):
        with pytest.raises(ValueError, match=rf"{name}: only with FP8 inputs \(torch.float8_e4m3fn"
                                             r"\), got q.dtype torch.bfloat16"):
            flash_attn_func(q, k, v, **{name: ones})
    with pytest.raises(ValueError, match=r"out_dtype: only with FP8 inputs .* got "
                                         r"out_dtype=torch.float16"):
        flash_attn_func(q, k, v, out_dtype=torch.float16)
    assert flash_attn_func(q, k, v, out_dtype=torch.bfloat16).dtype == torch.bfloat16


def test_bad_out_dtype_and_mixed_dtypes_with_fp8():
    q, k, v = small()
    for bad in (torch.float32, E4M3):
        with pytest.raises(ValueError, match=rf"out_dtype: must be torch.bfloat16 or "
                                             rf"torch.float16 with FP8 inputs, got {bad}"):
            flash_attn_func(q, k, v, out_dtype=bad)
    with pytest.raises(ValueError, match=r"k\.dtype: must equal q\.dtype"):
        flash_attn_func(q, k.bfloat16(), v)


def test_bad_descale_tensors():
    q, k, v = small()
    cases = [
        (dict(q_descale=torch.ones(2, 2, dtype=torch.float16)),
         r"q_descale\.dtype: must be torch\.float32, got torch\.float16"),
        (dict(k_descale=torch.ones(2)), r"k_descale: expected 2 dimensions \(batch, heads_kv\)"),
        (dict(v_descale=torch.ones(2, 4)),  # heads_q instead of heads_kv
         r"v_descale\.shape: must equal \(batch, heads_kv\) \(\(2, 2\)\), got \(2, 4\)"),
        (dict(q_descale=torch.ones(1, 2)), r"q_descale\.shape: must equal"),
        (dict(k_descale=torch.ones(2, 2, device="meta")),
         r"k_descale\.device: must equal q\.device"),
        (dict(q_descale=[[1.0, 1.0]] * 2), r"q_descale: expected a torch\.Tensor, got list"),
    ]
    for kw, msg in cases:
        with pytest.raises(ValueError, match=msg):
            flash_attn_func(q, k, v, **kw)
    # The library's host rule: each descale finite and > 0.
    with pytest.raises(ValueError, match=r"q_descale\[1\] \(batch 0, kv head 1\): must be finite "
                                         r"and > 0, got 0"):
        flash_attn_func(q, k, v, q_descale=torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    with pytest.raises(ValueError, match=r"v_descale\[2\] .*got inf"):
        flash_attn_func(q, k, v, v_descale=torch.tensor([[1.0, 1.0], [float("inf"), 1.0]]))


def test_varlen_descales_are_per_sequence():
    q, k, v = (t[0] for t in small(b=1))
    cu = torch.tensor([0, 5, 16], dtype=torch.int32)
    out = flash_attn_varlen_func(q, k, v, cu, cu, 11, 11, q_descale=torch.ones(2, 2))
    assert out.dtype == torch.bfloat16
    with pytest.raises(ValueError, match=r"q_descale\.shape: must equal \(batch, heads_kv\) "
                                         r"\(\(2, 2\)\), got \(1, 2\)"):
        flash_attn_varlen_func(q, k, v, cu, cu, 11, 11, q_descale=torch.ones(1, 2))


def test_fp8_features_the_library_refuses():
    q, k, v = small()
    with pytest.raises(UnsupportedError, match=r"sinks: attention sinks are not supported with "
                                               r"FP8 inputs \(dtype e4m3\)"):
        flash_attn_func(q, k, v, sinks=torch.zeros(4))
    with pytest.raises(UnsupportedError, match=r"softcap: soft-capping is not supported with FP8"):
        flash_attn_func(q, k, v, softcap=30.0)


def test_fp8_is_forward_only():
    q, k, v = small()
    grad = lambda t: t.clone().requires_grad_()  # noqa: E731
    calls = [("q", (grad(q), k, v), {}), ("v", (q, k, grad(v)), {}),
             ("q_descale", (q, k, v), dict(q_descale=grad(torch.ones(2, 2))))]
    for name, args, kw in calls:
        with pytest.raises(UnsupportedError, match=rf"{name}: requires grad, but FP8 .* is "
                                                   r"forward-only"):
            flash_attn_func(*args, **kw)
        with torch.no_grad():  # nothing recorded: runs
            out = flash_attn_func(*args, **kw)
        assert not out.requires_grad
    # The custom op called directly refuses it too (its autograd formula).
    with pytest.raises(UnsupportedError, match=r"q: requires grad"):
        torch.ops.flashattn.fwd(q.clone().requires_grad_(), k, v, 0.0, False, -1, -1, "cpu")


# ---- the custom ops in PyTorch's machinery ------------------------------------------------------
def fp8_model(q8, k8, v8, qd, kd, vd):
    # Work on both sides of the op, so that it sits inside a larger graph.
    out, lse = flash_attn_func(q8, k8, v8, causal=True, return_lse=True, out_dtype=torch.float16,
                               q_descale=qd * 2, k_descale=kd, v_descale=vd)
    return out, lse, out.float().sum(-1) + lse.transpose(1, 2)


def assert_same(got, want):
    torch.testing.assert_close(got[:2], want[:2], rtol=0, atol=0)  # the op's outputs, bitwise
    torch.testing.assert_close(got[2], want[2])


def test_opcheck_and_fake_metadata():
    q8, k8, v8, qd, kd, vd = fp8_inputs(2, 48, 80, 4, 2, 64, "exact")
    args = (q8, k8, v8, 0.0, True, 5, -1, "cpu", None, False, 0.0, qd, kd, vd, torch.float16)
    # test_schema compares the inputs before and after with torch.allclose, which PyTorch does
    # not implement for float8 on the CPU; the op mutates nothing (mutates_args=()).
    torch.library.opcheck(torch.ops.flashattn.fwd.default, args,
                          test_utils=("test_autograd_registration", "test_faketensor",
                                      "test_aot_dispatch_dynamic"))
    from torch._subclasses.fake_tensor import FakeTensorMode
    real = torch.ops.flashattn.fwd(*args)
    with FakeTensorMode() as mode:
        fake = torch.ops.flashattn.fwd(*(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a
                                         for a in args))
    for r, f in zip(real, fake):
        assert (r.shape, r.dtype, r.stride()) == (f.shape, f.dtype, f.stride())
    assert real[0].dtype == torch.float16


@pytest.mark.parametrize("backend,dynamic", [("aot_eager", False), ("aot_eager", True),
                                             ("inductor", False)])
def test_cpu_compile_fullgraph(backend, dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(fp8_model, fullgraph=True, backend=backend, dynamic=dynamic)
    inputs = fp8_inputs(2, 48, 80, 4, 2, 64, "random")
    assert_same(compiled(*inputs), fp8_model(*inputs))
    if dynamic:  # a second shape reuses the symbolic graph
        inputs = fp8_inputs(1, 33, 70, 4, 2, 64, "random")
        assert_same(compiled(*inputs), fp8_model(*inputs))
    explained = torch._dynamo.explain(fp8_model)(*inputs)
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def test_cpu_compile_varlen_fullgraph():
    torch._dynamo.reset()
    q8, k8, v8, _, _, _ = fp8_inputs(1, 48, 80, 4, 4, 64, "none")
    q8, k8, v8 = (t[0] for t in (q8, k8, v8))
    cu_q = torch.tensor([0, 20, 20, 48], dtype=torch.int32)
    cu_k = torch.tensor([0, 30, 50, 80], dtype=torch.int32)
    kd = torch.rand(3, 4) + 0.5

    def f(q, k, v, kd):
        return flash_attn_varlen_func(q, k, v, cu_q, cu_k, 28, 30, causal=True, k_descale=kd,
                                      out_dtype=torch.float16) * 2

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q8, k8, v8, kd)
    torch.testing.assert_close(got, f(q8, k8, v8, kd), rtol=0, atol=0)


# ---- GPU: k7 ------------------------------------------------------------------------------------
ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
K7_SKIP = "k7 needs an sm_90 device and a build with it"


def k7_ready():
    return ON_SM90 and flashattn.kernel_is_built("k7")


def gpu_run(q8, k8, v8, kernel="k7", **kw):
    """flash_attn_func on the GPU with NaN-poisoned memory under the outputs (an element the
    kernel never writes fails check_fp8's finiteness check)."""
    b, sq, hq, _ = q8.shape
    blocks = [torch.full((b, sq, hq, v8.shape[-1]), float("nan"), device="cuda")
              for _ in range(2)]
    del blocks
    out, lse = flash_attn_func(q8, k8, v8, kernel=kernel, return_lse=True, **kw)
    torch.cuda.synchronize()
    return out, lse


@pytest.mark.gpu
@pytest.mark.skipif(not k7_ready(), reason=K7_SKIP)
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("shape", FP8_GPU_SHAPES)
@pytest.mark.parametrize("mode,out_dtype", [("amax", torch.bfloat16), ("random", torch.float16),
                                            ("none", torch.bfloat16)])
def test_k7_passes_the_fp8_oracle(d, shape, mode, out_dtype):
    b, sq, sk, hq, hkv, causal, window = shape
    q8, k8, v8, qd, kd, vd = fp8_inputs(b, sq, sk, hq, hkv, d, mode, device="cuda",
                                        q_sigma=4.0 if mode == "amax" else 1.0)
    out, lse = gpu_run(q8, k8, v8, causal=causal, window_size=window, out_dtype=out_dtype,
                       **descale_kw(qd, kd, vd))
    check_fp8(out, lse, q8, k8, v8, qd, kd, vd, out_dtype, causal=causal, window=window)


@pytest.mark.gpu
@pytest.mark.skipif(not k7_ready(), reason=K7_SKIP)
@pytest.mark.parametrize("d", [64, 128, 256])
def test_k7_outliers_padded_strides_and_auto(d):
    b, s, hq, hkv = 2, 600, 4, 2
    q8, k8, v8, qd, kd, vd = fp8_inputs(b, s, s, hq, hkv, d, "amax", device="cuda",
                                        dist="outliers")
    # q a view of a wider tensor: padded heads (the stride stays a multiple of 16 bytes).
    wide = torch.zeros(b, s, hq + 2, d, dtype=E4M3, device="cuda")
    wide[:, :, :hq] = q8
    qv = wide[:, :, :hq]
    out, lse = gpu_run(qv, k8, v8, out_dtype=torch.bfloat16, **descale_kw(qd, kd, vd))
    check_fp8(out, lse, q8, k8, v8, qd, kd, vd)
    auto, auto_lse = gpu_run(qv, k8, v8, kernel="auto", **descale_kw(qd, kd, vd))
    assert torch.equal(auto, out) and torch.equal(auto_lse, lse)  # auto picks k7 for e4m3


@pytest.mark.gpu
@pytest.mark.skipif(not k7_ready(), reason=K7_SKIP)
@pytest.mark.parametrize("d", [64, 128, 256])
def test_k7_varlen_with_empty_sequences(d):
    lens = [(0, 5), (17, 33), (113, 239), (70, 0), (1, 1), (300, 257)]
    hq, hkv = 4, 2
    nseq = len(lens)
    cu_q = torch.tensor([0] + [sum(q for q, _ in lens[:i + 1]) for i in range(nseq)],
                        dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + [sum(k for _, k in lens[:i + 1]) for i in range(nseq)],
                        dtype=torch.int32, device="cuda")
    q8 = torch.randn(int(cu_q[-1]), hq, d, device="cuda").to(E4M3)
    k8, v8 = (torch.randn(int(cu_k[-1]), hkv, d, device="cuda").to(E4M3) for _ in range(2))
    qd, kd, vd = (torch.empty(nseq, hkv, device="cuda").uniform_(0.5, 2) for _ in range(3))
    max_q, max_k = max(q for q, _ in lens), max(k for _, k in lens)
    out, lse = flash_attn_varlen_func(q8, k8, v8, cu_q, cu_k, max_q, max_k, causal=True,
                                      return_lse=True, out_dtype=torch.float16, kernel="k7",
                                      **descale_kw(qd, kd, vd))
    torch.cuda.synchronize()
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for i in range(nseq):
        one = [t.unsqueeze(0) for t in (q8[cq[i]:cq[i + 1]], k8[ck[i]:ck[i + 1]],
                                        v8[ck[i]:ck[i + 1]])]
        check_fp8(out[cq[i]:cq[i + 1]].unsqueeze(0), lse[:, cq[i]:cq[i + 1]].unsqueeze(0), *one,
                  qd[i:i + 1], kd[i:i + 1], vd[i:i + 1], torch.float16, causal=True)


@pytest.mark.gpu
@pytest.mark.skipif(not k7_ready(), reason=K7_SKIP)
def test_k7_reruns_are_bitwise_identical():
    inputs = fp8_inputs(2, 1000, 1000, 8, 2, 128, "random", device="cuda")
    kw = descale_kw(*inputs[3:])
    first, first_lse = gpu_run(*inputs[:3], causal=True, **kw)
    for _ in range(50):
        out, lse = flash_attn_func(*inputs[:3], causal=True, kernel="k7", return_lse=True, **kw)
        assert torch.equal(out, first) and torch.equal(lse, first_lse)


@pytest.mark.gpu
@pytest.mark.skipif(not k7_ready(), reason=K7_SKIP)
def test_k7_descale_on_another_device_is_refused():
    q8, k8, v8, qd, _, _ = fp8_inputs(1, 16, 16, 2, 2, 64, "random", device="cuda")
    with pytest.raises(ValueError, match=r"q_descale\.device: must equal q\.device"):
        flash_attn_func(q8, k8, v8, q_descale=qd.cpu())


@pytest.mark.gpu
@pytest.mark.skipif(not k7_ready(), reason=K7_SKIP)
def test_k7_cuda_graph_and_compile():
    inputs = fp8_inputs(2, 300, 500, 4, 2, 128, "random", device="cuda")
    want = fp8_model(*inputs)
    torch._dynamo.reset()
    compiled = torch.compile(fp8_model, fullgraph=True)
    assert_same(compiled(*inputs), want)
    # Captured into a CUDA graph (no host synchronisation in the call) and replayed.
    static = [t.clone() for t in inputs]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fp8_model(*static)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fp8_model(*static)
    fresh = fp8_inputs(2, 300, 500, 4, 2, 128, "random", device="cuda")
    for s, f in zip(static, fresh):
        s.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    assert_same(captured, fp8_model(*fresh))
