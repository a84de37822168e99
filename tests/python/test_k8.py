"""K8 through the Python API: flashattn.quantize_fp8 (the library's pre-pass: e4m3 with one fp32
descale per block of rows, optionally after the Hadamard rotation of q and k), flash_attn_func
with q_block_descale/k_block_descale/v_block_descale, and flash_attn_func(..., fp8=...) from
bf16/fp16 inputs ("per_tensor", "per_block", "per_block_hadamard").

On the CPU (the host pre-pass and the cpu family): quantize_fp8 bit for bit against fp8.h's
rule written out in torch (blocks, amax/448, rounding, the seeded rotation; strided inputs, odd
seqlens, GQA, a seed >= 2**63), the FP8 oracle of attn_ref on the dequantised blocks, the fp8=
modes equal to their two-step spelling, the argument errors, forward-only, the fake
implementations and torch.compile(fullgraph=True). With the `gpu` marker: the GPU pre-pass
bitwise equal to the host's, k8 against the oracle over head dims 64/128/256 and the odd
shapes, `auto` is k8, the outlier accuracy ordering, reruns bitwise, CUDA graphs and compile."""
import pytest
import torch

import flashattn
from attn_ref import FP8_GPU_SHAPES, check_fp8
from flashattn import UnsupportedError, flash_attn_func, quantize_fp8
from flashattn import _lib

E4M3 = torch.float8_e4m3fn
MASK64 = 2**64 - 1


# ---- fp8.h's rule, written out in torch ---------------------------------------------------------
def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def hadamard(x, seed):
    """Rows x (..., d) fp32 times diag(s)·H/√d: the signs, the butterfly stages h = 1, 2, ...
    pairing j and j + h as (a + b, a - b), then 1/√d rounded to fp32, in fp32 (fp8.h)."""
    d = x.shape[-1]
    signs = torch.tensor([-1.0 if splitmix64((seed + j) & MASK64) & 1 else 1.0
                          for j in range(d)], device=x.device)
    x = x * signs
    h = 1
    while h < d:
        pairs = x.reshape(*x.shape[:-1], d // (2 * h), 2, h)
        a, b = pairs[..., 0, :], pairs[..., 1, :]
        x = torch.stack((a + b, a - b), dim=-2).reshape(x.shape)
        h *= 2
    return x * torch.tensor(d ** -0.5, dtype=torch.float32, device=x.device)


def quantise_blocks(x, rows, rotate=False, seed=0, power_of_two=False):
    """x (b, s, h, d) bf16/fp16 -> (e4m3 (b, s, h, d), fp32 (b, h, ceil(s / rows))): per block of
    rows amax (after the rotation), f = 448 / amax, e4m3(x * f) rounded to nearest even and
    saturated, descale amax / 448; an all-zero block has f = descale = 1. power_of_two (v): the
    descale is the power of two at or above amax / 448 and f = 1 / descale."""
    xf = x.float()
    if rotate:
        xf = hadamard(xf, seed)
    b, s, h, d = xf.shape
    blocks = -(-s // rows)
    padded = xf.new_zeros(b, blocks * rows, h, d)
    padded[:, :s] = xf.abs()
    amax = padded.reshape(b, blocks, rows, h, d).amax(dim=(2, 4)).transpose(1, 2).contiguous()
    one = torch.ones_like(amax)
    # A tensor divided by a tensor: `448.0 / amax` is reciprocal-then-multiply in torch, two
    # roundings where fp8.h has one division.
    f = torch.where(amax > 0, torch.full_like(amax, 448.0) / amax, one)
    descale = torch.where(amax > 0, amax / 448.0, one)
    if power_of_two:
        mant, exp = torch.frexp(descale)  # descale = mant * 2^exp, mant in [0.5, 1)
        descale = torch.where(mant == 0.5, descale, torch.ldexp(torch.ones_like(descale), exp))
        f = torch.where(amax > 0, 1.0 / descale, one)
    x8 = (xf * per_row(f, rows, s)).clamp(-448.0, 448.0).to(E4M3)
    return x8, descale


def per_row(block_values, rows, seqlen):
    """(b, h, blocks) -> (b, seqlen, h, 1): each row's block's value (attn_ref takes such a
    4-dimensional factor as a descale)."""
    return block_values.repeat_interleave(rows, dim=2)[:, :, :seqlen].transpose(1, 2)[..., None]


def block_rows(d):
    return _lib.fp8_block_rows(d)


def check_k8(out, lse, q8, k8, v8, qd, kd, vd, out_dtype=torch.bfloat16, causal=False,
             window=(-1, -1)):
    """The FP8 oracle of attn_ref on the block-dequantised inputs."""
    rq, rk = block_rows(q8.shape[3])
    sq, sk = q8.shape[1], k8.shape[1]
    return check_fp8(out, lse, q8, k8, v8, per_row(qd, rq, sq), per_row(kd, rk, sk),
                     per_row(vd, rk, sk), out_dtype, causal=causal, window=window)


def exact(q, k, v, causal=False, window=(-1, -1)):
    """fp64 attention of the original 16-bit inputs (b, s, h, d), for the RMSE report."""
    from attn_ref import visible_mask
    group = q.shape[2] // k.shape[2]
    qf, kf, vf = (t.double().repeat_interleave(g, dim=2).transpose(1, 2)
                  for t, g in ((q, 1), (k, group), (v, group)))
    mask = visible_mask(q.shape[1], k.shape[1], causal, window, q.device)
    s = (qf @ kf.transpose(-1, -2)) * q.shape[3] ** -0.5
    p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)
    return (p @ vf).transpose(1, 2)


def rmse(out, ref):
    return (out.double() - ref).pow(2).mean().sqrt().item()


def inputs(b, sq, sk, hq, hkv, d, dtype=torch.bfloat16, device="cpu", dist="normal",
           q_sigma=1.0):
    def data(s, h):
        x = torch.randn(b, s, h, d, device=device)
        if dist == "outliers":  # FlashAttention-3's N(0, 1) + N(0, 100)·Bernoulli(0.001)
            x += torch.randn_like(x) * 10 * (torch.rand_like(x) < 1e-3)
        return x.to(dtype)
    return data(sq, hq) * q_sigma, data(sk, hkv), data(sk, hkv)


def bits(t):
    return t.view(torch.uint8) if t.dtype == E4M3 else t.view(torch.int32)


def assert_bitwise(got, want):
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        assert torch.equal(bits(g), bits(w))


# ---- CPU: quantize_fp8 --------------------------------------------------------------------------
QUANT_SHAPES = [  # b, sq, sk, hq, hkv, d
    (2, 113, 203, 4, 2, 64),
    (1, 1, 1, 2, 1, 128),
    (3, 239, 300, 6, 3, 256),
    (1, 300, 129, 2, 2, 128),
]


@pytest.mark.parametrize("shape", QUANT_SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rotation,seed", [(None, 0), ("hadamard", 0),
                                           ("hadamard", 2**64 - 12345)])
def test_quantize_fp8_is_the_documented_rule(shape, dtype, rotation, seed):
    b, sq, sk, hq, hkv, d = shape
    q, k, v = inputs(b, sq, sk, hq, hkv, d, dtype, dist="outliers")
    got = quantize_fp8(q, k, v, rotation=rotation, seed=seed)
    rq, rk = block_rows(d)
    rotate = rotation == "hadamard"
    (q8, qd), (k8, kd), (v8, vd) = (quantise_blocks(q, rq, rotate, seed),
                                    quantise_blocks(k, rk, rotate, seed),
                                    quantise_blocks(v, rk, power_of_two=True))  # never rotated
    assert_bitwise(got, (q8, k8, v8, qd, kd, vd))
    assert all(t.is_contiguous() for t in got)


def test_quantize_fp8_reads_strided_inputs_and_zero_blocks():
    # q a view of a wider tensor (padded heads and dims), k transposed heads-major, v all zeros
    # in its first block: descale 1 there, and the bytes 0.
    b, s, hq, hkv, d = 2, 200, 4, 2, 64
    q, k, v = inputs(b, s, s, hq, hkv, d)
    wide = torch.zeros(b, s, hq + 1, d + 32, dtype=q.dtype)
    wide[:, :, :hq, :d] = q
    kt = k.transpose(1, 2).contiguous().transpose(1, 2)
    rq, rk = block_rows(d)
    v[:, :rk] = 0
    got = quantize_fp8(wide[:, :, :hq, :d], kt, v, rotation="hadamard", seed=7)
    want = quantize_fp8(q, k, v, rotation="hadamard", seed=7)
    assert_bitwise(got, want)
    assert (got[5][:, :, 0] == 1).all() and (got[2][:, :rk].view(torch.uint8) == 0).all()


def test_quantize_fp8_rotation_keeps_scores_and_the_seed_matters():
    q, k, v = inputs(1, 64, 64, 2, 2, 128, torch.float16)
    a = quantize_fp8(q, k, v, rotation="hadamard", seed=1)
    c = quantize_fp8(q, k, v, rotation="hadamard", seed=2)
    assert not torch.equal(bits(a[0]), bits(c[0]))
    assert torch.equal(bits(a[2]), bits(c[2]))  # v is not rotated

    # (qM)(kM)^T = q k^T: M is orthogonal, so the dequantised rotated rows' scores are the
    # originals' up to e4m3's rounding. Measured as RMS over the 8192 scores, which is stable:
    # 0.036-0.038 of the scores' RMS over 200 draws, and 1.41 when q and k are rotated with
    # different seeds. (A max-error bound was flaky: the worst score's error reached 0.054 of
    # the largest score, above the 0.05 it once asserted.)
    rq, rk = block_rows(128)
    qr = a[0].float() * per_row(a[3], rq, 64)
    kr = a[1].float() * per_row(a[4], rk, 64)
    kc = c[1].float() * per_row(c[4], rk, 64)
    want = torch.einsum("bihd,bjhd->bhij", q.float(), k.float())

    def rms(x):
        return x.pow(2).mean().sqrt()

    assert rms(torch.einsum("bihd,bjhd->bhij", qr, kr) - want) < 0.1 * rms(want)
    assert rms(torch.einsum("bihd,bjhd->bhij", qr, kc) - want) > 0.5 * rms(want)  # seeds differ


def test_quantize_fp8_shapes_fake_and_opcheck():
    q, k, v = inputs(2, 130, 70, 4, 2, 256)
    rq, rk = block_rows(256)
    args = (q, k, v, "hadamard", -5)  # the op's int64 seed: 2**64 - 5's bits
    real = torch.ops.flashattn.quantize_fp8(*args)
    assert [tuple(t.shape) for t in real[3:]] == [(2, 4, -(-130 // rq)), (2, 2, -(-70 // rk)),
                                                  (2, 2, -(-70 // rk))]
    assert_bitwise(real, quantize_fp8(q, k, v, rotation="hadamard", seed=2**64 - 5))
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fake = torch.ops.flashattn.quantize_fp8(
            *(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args))
    for r, f in zip(real, fake):
        assert (r.shape, r.dtype, r.stride()) == (f.shape, f.dtype, f.stride())
    # test_schema compares the outputs with torch.allclose, which float8 lacks on the CPU.
    utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(torch.ops.flashattn.quantize_fp8.default, args, test_utils=utils)
    # The forward op with the block descales (its trailing arguments).
    fwd_args = (*real[:3], 0.0, True, -1, -1, "cpu", None, False, 0.0, None, None, None,
                torch.float16, *real[3:])
    torch.library.opcheck(torch.ops.flashattn.fwd.default, fwd_args, test_utils=utils)
    with FakeTensorMode() as mode:
        fake = torch.ops.flashattn.fwd(
            *(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in fwd_args))
    assert fake[0].shape == (2, 130, 4, 256) and fake[0].dtype == torch.float16


def test_quantize_fp8_argument_errors():
    q, k, v = inputs(1, 16, 16, 2, 2, 64)
    with pytest.raises(ValueError, match=r"rotation: must be None or 'hadamard', got 'walsh'"):
        quantize_fp8(q, k, v, rotation="walsh")
    for seed in (-1, 2**64, 1.5, True):
        with pytest.raises(ValueError, match=r"seed: must be an integer in \[0, 2\*\*64\)"):
            quantize_fp8(q, k, v, seed=seed)
    with pytest.raises(ValueError, match=r"q\.dtype: quantize_fp8 takes torch\.bfloat16 or "
                                         r"torch\.float16 inputs, got torch\.float8_e4m3fn"):
        quantize_fp8(*(t.to(E4M3) for t in (q, k, v)))
    with pytest.raises(ValueError, match=r"q\.dtype: must be torch\.bfloat16"):
        quantize_fp8(q.float(), k.float(), v.float())
    with pytest.raises(ValueError, match=r"k\.dtype: must equal q\.dtype"):
        quantize_fp8(q, k.half(), v)
    with pytest.raises(ValueError, match=r"rotation: must be 'none' or 'hadamard'"):
        torch.ops.flashattn.quantize_fp8(q, k, v, "hadamard ", 0)
    # The library's rules: FP8 head dims only, head_dim_v equal.
    q96, k96, v96 = inputs(1, 16, 16, 2, 2, 96)
    with pytest.raises(ValueError, match=r"head_dim: must be 64, 128 or 256 \(the FP8 forward's "
                                         r"head dims\), got 96"):
        quantize_fp8(q96, k96, v96)
    with pytest.raises(ValueError, match=r"head_dim_v: must be 0 or head_dim"):
        quantize_fp8(q, k, torch.randn(1, 16, 2, 128).bfloat16())


def test_quantize_fp8_is_forward_only():
    q, k, v = inputs(1, 16, 16, 2, 2, 64)
    with pytest.raises(UnsupportedError, match=r"k: requires grad, but fp8='per_block' "
                                               r"attention is forward-only"):
        quantize_fp8(q, k.clone().requires_grad_(), v)
    with torch.no_grad():
        out = quantize_fp8(q, k.clone().requires_grad_(), v)
    assert not any(t.requires_grad for t in out)


# ---- CPU: attention on block descales and fp8= ---------------------------------------------------
CPU_SHAPES = [  # b, sq, sk, hq, hkv, d, causal, window
    (2, 113, 203, 4, 2, 64, False, (-1, -1)),
    (2, 300, 203, 4, 2, 128, True, (-1, -1)),
    (3, 239, 1, 4, 1, 128, True, (-1, -1)),  # MQA; rows that see no key
    (1, 300, 255, 2, 2, 256, False, (37, 5)),
]


@pytest.mark.parametrize("shape", CPU_SHAPES)
@pytest.mark.parametrize("rotation", [None, "hadamard"])
def test_cpu_block_descales_pass_the_oracle(shape, rotation):
    b, sq, sk, hq, hkv, d, causal, window = shape
    q, k, v = inputs(b, sq, sk, hq, hkv, d, q_sigma=4.0)
    q8, k8, v8, qd, kd, vd = quantize_fp8(q, k, v, rotation=rotation, seed=3)
    out, lse = flash_attn_func(q8, k8, v8, causal=causal, window_size=window, return_lse=True,
                               kernel="cpu", q_block_descale=qd, k_block_descale=kd,
                               v_block_descale=vd)
    assert out.dtype == torch.bfloat16
    check_k8(out, lse, q8, k8, v8, qd, kd, vd, causal=causal, window=window)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cpu_fp8_modes_equal_their_two_step_spelling(dtype):
    b, sq, sk, hq, hkv, d = 2, 150, 260, 6, 2, 128
    q, k, v = inputs(b, sq, sk, hq, hkv, d, dtype)
    for mode, rotation in (("per_block", None), ("per_block_hadamard", "hadamard")):
        out, lse = flash_attn_func(q, k, v, causal=True, fp8=mode, return_lse=True)
        assert out.dtype == dtype  # the inputs' dtype
        q8, k8, v8, qd, kd, vd = quantize_fp8(q, k, v, rotation=rotation, seed=0)
        want, want_lse = flash_attn_func(q8, k8, v8, causal=True, return_lse=True,
                                         out_dtype=dtype, q_block_descale=qd,
                                         k_block_descale=kd, v_block_descale=vd)
        assert torch.equal(out, want) and torch.equal(lse, want_lse)
        check_k8(out, lse, q8, k8, v8, qd, kd, vd, dtype, causal=True)
    out = flash_attn_func(q, k, v, causal=True, fp8="per_tensor", out_dtype=torch.bfloat16)
    (q8, qd), (k8, kd), (v8, vd) = (flashattn.fp8.quantize_per_kv_head(t, hkv) for t in (q, k, v))
    want = flash_attn_func(q8, k8, v8, causal=True, q_descale=qd, k_descale=kd, v_descale=vd)
    assert out.dtype == torch.bfloat16 and torch.equal(out, want)
    check_fp8(out, None, q8, k8, v8, qd, kd, vd, causal=True)


def test_cpu_per_tensor_descales_are_amax_over_each_kv_head():
    q, _, _ = inputs(2, 40, 40, 6, 2, 64)
    q[1, 3, 4, 7] = 50.0  # batch 1, query head 4: KV head 2's group
    q8, qd = flashattn.fp8.quantize_per_kv_head(q, 2)
    amax = q.float().abs().reshape(2, 40, 2, 3, 64).amax(dim=(1, 3, 4))
    assert torch.equal(qd, amax / 448.0) and qd[1, 1] == 50.0 / 448.0
    assert q8.float().abs().max() == 448.0


def test_cpu_hadamard_helps_on_outliers():
    # FlashAttention-3's Table 3 distribution: the rotation spreads the outliers before rounding,
    # so per_block_hadamard is closer to fp64 attention of the original data than per_tensor.
    q, k, v = inputs(1, 512, 512, 4, 4, 128, dist="outliers")
    ref = exact(q, k, v)
    errors = {mode: rmse(flash_attn_func(q, k, v, fp8=mode), ref)
              for mode in ("per_tensor", "per_block", "per_block_hadamard")}
    assert errors["per_block_hadamard"] < errors["per_tensor"], errors


def test_fp8_mode_errors():
    q, k, v = inputs(2, 16, 16, 4, 2, 64)
    with pytest.raises(ValueError, match=r"fp8: must be None or one of 'per_tensor', "
                                         r"'per_block', 'per_block_hadamard', got 'block'"):
        flash_attn_func(q, k, v, fp8="block")
    with pytest.raises(ValueError, match=r"fp8: quantises torch\.bfloat16 or torch\.float16 "
                                         r"inputs, got q\.dtype torch\.float8_e4m3fn"):
        flash_attn_func(*(t.to(E4M3) for t in (q, k, v)), fp8="per_block")
    with pytest.raises(ValueError, match=r"q_descale: not with fp8='per_tensor', which computes "
                                         r"the descales itself"):
        flash_attn_func(q, k, v, fp8="per_tensor", q_descale=torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"v_block_descale: not with fp8='per_block'"):
        flash_attn_func(q, k, v, fp8="per_block", v_block_descale=torch.ones(2, 2, 1))
    with pytest.raises(ValueError, match=r"out_dtype: must be torch\.bfloat16 or torch\.float16 "
                                         r"with FP8 inputs, got torch\.float32"):
        flash_attn_func(q, k, v, fp8="per_block", out_dtype=torch.float32)
    assert flash_attn_func(q, k, v, fp8="per_block", out_dtype=torch.float16).dtype == (
        torch.float16)
    with pytest.raises(ValueError, match=r"heads_q: must be a multiple of heads_kv \(4 is not "
                                         r"a multiple of 3\)"):
        flash_attn_func(q, *(torch.randn(2, 16, 3, 64).bfloat16() for _ in range(2)),
                        fp8="per_tensor")


def test_fp8_mode_is_forward_only():
    q, k, v = inputs(1, 16, 16, 2, 2, 64)
    for mode in ("per_tensor", "per_block_hadamard"):
        with pytest.raises(UnsupportedError, match=rf"q: requires grad, but fp8='{mode}' "
                                                   r"attention is forward-only"):
            flash_attn_func(q.clone().requires_grad_(), k, v, fp8=mode)
        with torch.no_grad():
            out = flash_attn_func(q.clone().requires_grad_(), k, v, fp8=mode)
        assert not out.requires_grad


def test_block_descale_argument_errors():
    q, k, v = inputs(2, 130, 70, 4, 2, 128)
    q8, k8, v8, qd, kd, vd = quantize_fp8(q, k, v)
    blocks = dict(q_block_descale=qd, k_block_descale=kd, v_block_descale=vd)
    with pytest.raises(ValueError, match=r"q_block_descale: only with FP8 inputs "
                                         r"\(torch\.float8_e4m3fn\), got q\.dtype torch\.bfloat16"):
        flash_attn_func(q, k, v, **blocks)
    cases = [
        (dict(blocks, k_block_descale=kd.double()),
         r"k_block_descale\.dtype: must be torch\.float32, got torch\.float64"),
        (dict(blocks, q_block_descale=qd[0]),
         r"q_block_descale: expected 3 dimensions \(batch, heads_q, blocks\)"),
        (dict(blocks, v_block_descale=vd[:, :, :1].contiguous() if vd.shape[2] > 1
              else torch.ones(2, 2, 5)),
         r"v_block_descale\.shape: must equal \(batch, heads_kv, ceil\(seqlen_k / rows\.kv\)\)"),
        (dict(blocks, q_block_descale=torch.ones(2, 2, qd.shape[2])),  # heads_kv, not heads_q
         r"q_block_descale\.shape: must equal \(batch, heads_q, ceil\(seqlen_q / rows\.q\)\)"),
        (dict(blocks, k_block_descale=kd.to("meta")), r"k_block_descale\.device: must equal"),
    ]
    for kw, msg in cases:
        with pytest.raises(ValueError, match=msg):
            flash_attn_func(q8, k8, v8, **kw)
    # The library's rules: all three or none, not beside the per-head descales, values > 0.
    with pytest.raises(ValueError, match=r"v_block_descale: null while q_block_descale is set"):
        flash_attn_func(q8, k8, v8, q_block_descale=qd, k_block_descale=kd)
    with pytest.raises(ValueError, match=r"q_descale: must be null with block descales"):
        flash_attn_func(q8, k8, v8, q_descale=torch.ones(2, 2), **blocks)
    bad = kd.clone()
    bad[1, 0, 0] = 0.0
    with pytest.raises(ValueError, match=r"k_block_descale\[\d+\] \(batch 1, kv head 0, block 0\)"
                                         r": must be finite and > 0, got 0"):
        flash_attn_func(q8, k8, v8, **dict(blocks, k_block_descale=bad))


def test_block_descales_are_forward_only():
    q, k, v = inputs(1, 16, 16, 2, 2, 64)
    q8, k8, v8, qd, kd, vd = quantize_fp8(q, k, v)
    with pytest.raises(UnsupportedError, match=r"v_block_descale: requires grad, but FP8"):
        flash_attn_func(q8, k8, v8, q_block_descale=qd, k_block_descale=kd,
                        v_block_descale=vd.clone().requires_grad_())


# ---- the custom ops in PyTorch's machinery ------------------------------------------------------
def k8_model(q, k, v, mode):
    # Work on both sides of the calls, so that they sit inside a larger graph.
    out, lse = flash_attn_func(q * 2, k, v, causal=True, return_lse=True, fp8=mode)
    return out, lse, out.float().sum(-1) + lse.transpose(1, 2)


def two_step_model(q, k, v):
    q8, k8, v8, qd, kd, vd = quantize_fp8(q, k, v, rotation="hadamard", seed=11)
    out = flash_attn_func(q8, k8, v8, window_size=(40, 3), q_block_descale=qd * 2,
                          k_block_descale=kd, v_block_descale=vd, out_dtype=torch.float16)
    return out, qd, out.float().mean(-1)


def assert_same(got, want):
    torch.testing.assert_close(got[:2], want[:2], rtol=0, atol=0)  # the ops' outputs, bitwise
    torch.testing.assert_close(got[2], want[2])


@pytest.mark.parametrize("mode", ["per_tensor", "per_block_hadamard"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_cpu_compile_fullgraph(mode, dynamic):
    torch._dynamo.reset()
    compiled = torch.compile(k8_model, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    args = inputs(2, 48, 80, 4, 2, 64)
    with torch.no_grad():
        assert_same(compiled(*args, mode), k8_model(*args, mode))
        if dynamic:  # a second shape reuses the symbolic graph
            args = inputs(1, 33, 70, 4, 2, 64)
            assert_same(compiled(*args, mode), k8_model(*args, mode))
        explained = torch._dynamo.explain(k8_model)(*args, mode)
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def test_cpu_compile_two_step_fullgraph():
    torch._dynamo.reset()
    args = inputs(1, 200, 150, 4, 4, 128)
    compiled = torch.compile(two_step_model, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        assert_same(compiled(*args), two_step_model(*args))


# ---- GPU: the pre-pass and k8 -------------------------------------------------------------------
ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
K8_SKIP = "k8 needs an sm_90 device and a build with it"


def k8_ready():
    return ON_SM90 and flashattn.kernel_is_built("k8")


def gpu_run(q8, k8, v8, qd, kd, vd, kernel="k8", **kw):
    """flash_attn_func on the GPU with NaN-poisoned memory freed under the outputs (an element
    the kernel never writes fails check_fp8's finiteness check)."""
    b, sq, hq, _ = q8.shape
    blocks = [torch.full((b, sq, hq, v8.shape[-1]), float("nan"), device="cuda")
              for _ in range(2)]
    del blocks
    out, lse = flash_attn_func(q8, k8, v8, kernel=kernel, return_lse=True, q_block_descale=qd,
                               k_block_descale=kd, v_block_descale=vd, **kw)
    torch.cuda.synchronize()
    return out, lse


@pytest.mark.gpu
@pytest.mark.skipif(not k8_ready(), reason=K8_SKIP)
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("rotation", [None, "hadamard"])
def test_gpu_quantize_fp8_equals_the_host_bitwise(d, rotation):
    q, k, v = inputs(2, 1000, 777, 6, 2, d, dist="outliers")
    wide = torch.zeros(2, 1000, 8, d, dtype=q.dtype)  # q read through padded head strides
    wide[:, :, :6] = q
    got = quantize_fp8(wide.cuda()[:, :, :6], k.cuda(), v.cuda(), rotation=rotation,
                       seed=2**63 + 9)
    torch.cuda.synchronize()
    assert_bitwise([t.cpu() for t in got],
                   quantize_fp8(q, k, v, rotation=rotation, seed=2**63 + 9))


@pytest.mark.gpu
@pytest.mark.skipif(not k8_ready(), reason=K8_SKIP)
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("shape", FP8_GPU_SHAPES)
@pytest.mark.parametrize("rotation,out_dtype", [(None, torch.bfloat16),
                                                ("hadamard", torch.float16)])
def test_gpu_k8_passes_the_fp8_oracle(d, shape, rotation, out_dtype):
    b, sq, sk, hq, hkv, causal, window = shape
    q, k, v = inputs(b, sq, sk, hq, hkv, d, device="cuda", q_sigma=4.0)
    quant = quantize_fp8(q, k, v, rotation=rotation, seed=5)
    out, lse = gpu_run(*quant, causal=causal, window_size=window, out_dtype=out_dtype)
    check_k8(out, lse, *quant, out_dtype, causal=causal, window=window)


@pytest.mark.gpu
@pytest.mark.skipif(not k8_ready(), reason=K8_SKIP)
@pytest.mark.parametrize("d", [64, 128, 256])
def test_gpu_fp8_modes_auto_and_accuracy_on_outliers(d):
    q, k, v = inputs(1, 2048, 2048, 8, 2, d, device="cuda", dist="outliers")
    quant = quantize_fp8(q, k, v, rotation="hadamard", seed=0)
    auto, auto_lse = gpu_run(*quant, kernel="auto")
    out, lse = gpu_run(*quant)
    assert torch.equal(auto, out) and torch.equal(auto_lse, lse)  # auto picks k8
    got = flash_attn_func(q, k, v, fp8="per_block_hadamard")
    assert got.dtype == torch.bfloat16 and torch.equal(got, out)
    (q8, qd), (k8, kd), (v8, vd) = (flashattn.fp8.quantize_per_kv_head(t, 2) for t in (q, k, v))
    k7 = flash_attn_func(q8, k8, v8, kernel="k7", q_descale=qd, k_descale=kd, v_descale=vd)
    assert torch.equal(flash_attn_func(q, k, v, fp8="per_tensor"), k7)
    ref = exact(q.cpu(), k.cpu(), v.cpu()).cuda()
    errors = {mode: rmse(flash_attn_func(q, k, v, fp8=mode), ref)
              for mode in ("per_tensor", "per_block", "per_block_hadamard")}
    assert errors["per_block_hadamard"] < errors["per_tensor"], errors


@pytest.mark.gpu
@pytest.mark.skipif(not k8_ready(), reason=K8_SKIP)
def test_gpu_k8_reruns_are_bitwise_identical():
    q, k, v = inputs(2, 1000, 1000, 8, 2, 128, device="cuda")
    first = flash_attn_func(q, k, v, causal=True, fp8="per_block_hadamard", return_lse=True)
    for _ in range(50):
        again = flash_attn_func(q, k, v, causal=True, fp8="per_block_hadamard", return_lse=True)
        assert torch.equal(again[0], first[0]) and torch.equal(again[1], first[1])


@pytest.mark.gpu
@pytest.mark.skipif(not k8_ready(), reason=K8_SKIP)
def test_gpu_block_descale_on_another_device_is_refused():
    q8, k8, v8, qd, kd, vd = quantize_fp8(*inputs(1, 16, 16, 2, 2, 64, device="cuda"))
    with pytest.raises(ValueError, match=r"q_block_descale\.device: must equal q\.device"):
        flash_attn_func(q8, k8, v8, q_block_descale=qd.cpu(), k_block_descale=kd,
                        v_block_descale=vd)


@pytest.mark.gpu
@pytest.mark.skipif(not k8_ready(), reason=K8_SKIP)
def test_gpu_cuda_graph_and_compile():
    args = inputs(2, 300, 500, 4, 2, 128, device="cuda")
    with torch.no_grad():
        want = k8_model(*args, "per_block_hadamard")
        torch._dynamo.reset()
        compiled = torch.compile(k8_model, fullgraph=True)
        assert_same(compiled(*args, "per_block_hadamard"), want)
        assert_same(torch.compile(two_step_model, fullgraph=True)(*args), two_step_model(*args))
        # Captured into a CUDA graph (no host synchronisation in the pre-pass or the forward).
        static = [t.clone() for t in args]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            k8_model(*static, "per_block")  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = k8_model(*static, "per_block")
        fresh = inputs(2, 300, 500, 4, 2, 128, device="cuda")
        for s, f in zip(static, fresh):
            s.copy_(f)
        graph.replay()
        torch.cuda.synchronize()
        assert_same(captured, k8_model(*fresh, "per_block"))
