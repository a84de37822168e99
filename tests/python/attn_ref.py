"""Reference attention in torch and FlashAttention's oracle (TESTING.md), for the pytest suites.

ref: SDPA's math backend in fp32 on the upcast inputs (GQA by expanding the KV heads, the
     bottom-right aligned mask built explicitly, fully masked rows set to 0).
pt:  the same computation the way a kernel in the input precision does it: fp32 logits and
     softmax, P rounded to the input dtype before P·V, the output rounded to the input dtype.
A kernel passes when max|out - ref| <= 2·max|pt - ref| + atol, atol twice the largest rounding
step of the output dtype at the reference values; the LSE against torch.logsumexp in fp32 with a
relative floor of 1e-4 (the C++ oracle's), and -inf exactly where a row sees no key.
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

LSE_REL_TOL = 1e-4


def visible_mask(seqlen_q, seqlen_k, causal, window, device):
    """(seqlen_q, seqlen_k) bool: key j visible from query i (bottom-right aligned)."""
    left, right = window
    if causal:
        right = 0
    i = torch.arange(seqlen_q, device=device).unsqueeze(1)
    j = torch.arange(seqlen_k, device=device).unsqueeze(0)
    diag = i + seqlen_k - seqlen_q
    mask = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if left >= 0:
        mask &= j >= diag - left
    if right >= 0:
        mask &= j <= diag + right
    return mask


def _heads_first(q, k, v):
    """(b, s, h, d) -> (b, h, s, d) fp32, KV heads expanded to the query heads."""
    group = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    return tuple(t.float().transpose(1, 2) for t in (q, k, v))


def reference(q, k, v, scale=None, causal=False, window=(-1, -1)):
    """(ref_out fp32 (b, sq, hq, dv), ref_lse fp32 (b, hq, sq), pt_out fp32)."""
    sq, sk, d = q.shape[1], k.shape[1], q.shape[3]
    scale = d ** -0.5 if scale is None else scale
    qf, kf, vf = _heads_first(q, k, v)
    mask = visible_mask(sq, sk, causal, window, q.device)
    seen = mask.any(dim=1).view(1, 1, sq, 1)

    if sk > 0:
        with sdpa_kernel([SDPBackend.MATH]):
            ref = F.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, scale=scale)
    else:
        ref = qf.new_zeros(qf.shape[:3] + (vf.shape[3],))
    ref = torch.where(seen, ref, 0.0)

    logits = (qf @ kf.transpose(-1, -2)) * scale
    logits = logits.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(logits, dim=-1) if sk > 0 else logits.new_full(logits.shape[:3],
                                                                          float("-inf"))
    p = torch.where(seen, torch.softmax(logits, dim=-1), 0.0) if sk > 0 else logits
    pt = (p.to(q.dtype).float() @ vf).to(q.dtype).float()
    return ref.transpose(1, 2), lse, pt.transpose(1, 2)


def rounding_floor(ref, dtype):
    """Largest rounding step of `dtype` at the reference values (the C++ oracle's atol / 2)."""
    up = (ref + 0.3).to(dtype).float()
    back = (up - 0.3).to(dtype).float()
    return (back - ref).abs().max().item() if ref.numel() else 0.0


def assert_out(out, ref, pt, atol):
    """FlashAttention's rule on an output: max|out - ref| <= 2·max|pt - ref| + atol (out, ref
    and pt of one dtype, not empty). Returns (max|out - ref|, max|pt - ref|)."""
    err = (out - ref).abs().max().item()
    err_pt = (pt - ref).abs().max().item()
    assert err <= 2 * err_pt + atol, (
        f"max|out-ref| {err:.3g} > 2*max|pt-ref| {2 * err_pt:.3g} + atol {atol:.3g}")
    return err, err_pt


def assert_lse(lse, ref_lse, budget=lambda finite: 0.0):
    """The LSE rule: fp32 of ref_lse's shape, -inf exactly where ref_lse is (a row that sees no
    key), no NaN or +inf, and max|lse - ref| <= 1e-4·(1 + max|ref|) + budget(finite rows' mask)."""
    assert lse.shape == ref_lse.shape and lse.dtype == torch.float32
    lse = lse.to(ref_lse.dtype)
    masked = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), masked), "LSE -inf rows differ from the reference"
    assert not torch.isnan(lse).any() and not torch.isposinf(lse).any()
    finite = ~masked
    if finite.any():
        lse_err = (lse[finite] - ref_lse[finite]).abs().max().item()
        lse_atol = LSE_REL_TOL * (1 + ref_lse[finite].abs().max().item()) + budget(finite)
        assert lse_err <= lse_atol, f"max|lse-ref| {lse_err:.3g} > {lse_atol:.3g}"


def check(out, lse, q, k, v, scale=None, causal=False, window=(-1, -1)):
    """Asserts the oracle for out (and lse when given); returns the errors for printing."""
    ref, ref_lse, pt = reference(q, k, v, scale, causal, window)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert out.dtype == q.dtype
    out = out.float()
    assert torch.isfinite(out).all(), "output has NaN/inf (unwritten or overflow)"
    atol = 2 * rounding_floor(ref, q.dtype)
    err, err_pt = assert_out(out, ref, pt, atol) if out.numel() else (0.0, 0.0)
    if lse is not None:
        assert_lse(lse, ref_lse)
    return err, err_pt, atol


# ---- backward ------------------------------------------------------------------------------------
def _probs(logits, sinks):
    """Softmax over the visible keys (-inf elsewhere) and the sink column when given: (P over the
    keys, P of the sink or None). A row that sees nothing gets P = 0 (and no NaN in autograd: its
    logits are replaced by finite ones before the softmax, and the mask zeroes their gradient)."""
    b, h, sq, sk = logits.shape
    if sinks is not None:
        col = sinks.to(logits.dtype).view(1, h, 1, 1).expand(b, h, sq, 1)
        logits = torch.cat([logits, col], dim=-1)
    visible = ~torch.isneginf(logits)
    seen = visible.any(dim=-1, keepdim=True)
    p = torch.softmax(torch.where(seen, logits, 0.0), dim=-1)
    p = torch.where(visible, p, 0.0)
    return (p[..., :sk], p[..., sk]) if sinks is not None else (p, None)


def _logits(qf, kf, scale, causal, window, softcap=0.0):
    """scale * q k (softcap * tanh(scale * q k / softcap) with softcap), -inf where masked."""
    sq, sk = qf.shape[2], kf.shape[2]
    mask = visible_mask(sq, sk, causal, window, qf.device)
    logits = (qf @ kf.transpose(-1, -2)) * scale
    if softcap:
        logits = softcap * torch.tanh(logits / softcap)
    return logits.masked_fill(~mask, float("-inf"))


def reference_grads(q, k, v, dout, scale=None, causal=False, window=(-1, -1), sinks=None,
                    softcap=0.0):
    """Exact gradients: attention in fp64 on the (rounded) inputs, differentiated by autograd.
    Returns {"dq", "dk", "dv"[, "dsinks"]} fp64 in the inputs' layouts."""
    scale = q.shape[3] ** -0.5 if scale is None else scale
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    qd, kd, vd = leaves
    if sinks is not None:
        leaves.append(sinks.detach().double().requires_grad_())
    group = q.shape[2] // k.shape[2]
    qf = qd.transpose(1, 2)
    kf = kd.repeat_interleave(group, dim=2).transpose(1, 2)
    vf = vd.repeat_interleave(group, dim=2).transpose(1, 2)
    p, _ = _probs(_logits(qf, kf, scale, causal, window, softcap),
                  leaves[3] if sinks is not None else None)
    out = (p @ vf).transpose(1, 2)
    grads = torch.autograd.grad(out, leaves, dout.double())
    return dict(zip(("dq", "dk", "dv", "dsinks"), grads))


def pt_grads(q, k, v, dout, scale=None, causal=False, window=(-1, -1), sinks=None, out=None,
             softcap=0.0):
    """The backward as a kernel in the input precision computes it: fp32 math on the rounded
    inputs; D = rowsum(dO * O) from the output as the forward stored it (`out`, the forward
    under test's, when given; else computed here with P rounded before P V and O rounded to the
    dtype); P rounded before dV = P^T dO; dS = P * (dP - D) rounded before dQ = dS K and
    dK = dS^T Q; dq, dk, dv rounded to the dtype; GQA's dK/dV summed over the group in fp32;
    dsinks = -sum over rows of P_sink * D; with softcap, dS also times 1 - t^2 (t the tanh)
    before its rounding. Returns fp32 tensors."""
    dt = q.dtype
    scale = q.shape[3] ** -0.5 if scale is None else scale
    b, sq, hq, _ = q.shape
    hkv = k.shape[2]
    group = hq // hkv
    qf = q.float().transpose(1, 2)
    kf = k.float().repeat_interleave(group, dim=2).transpose(1, 2)
    vf = v.float().repeat_interleave(group, dim=2).transpose(1, 2)
    dof = dout.float().transpose(1, 2)
    p, p_sink = _probs(_logits(qf, kf, scale, causal, window, softcap), sinks)
    if out is None:
        o = (p.to(dt).float() @ vf).to(dt).float()
    else:
        o = out.float().transpose(1, 2)
    d = (dof * o).sum(-1, keepdim=True)
    dv = p.to(dt).float().transpose(-1, -2) @ dof
    ds = p * (dof @ vf.transpose(-1, -2) - d)
    if softcap:
        ds = ds * (1 - torch.tanh((qf @ kf.transpose(-1, -2)) * (scale / softcap)) ** 2)
    ds = ds.to(dt).float()
    dq = scale * (ds @ kf)
    dk = scale * (ds.transpose(-1, -2) @ qf)

    def kv_heads(t):  # (b, hq, sk, x) -> (b, sk, hkv, x), the group summed
        return t.view(b, hkv, group, *t.shape[2:]).sum(2).transpose(1, 2)

    grads = {"dq": dq.transpose(1, 2).to(dt).float(), "dk": kv_heads(dk).to(dt).float(),
             "dv": kv_heads(dv).to(dt).float()}
    if sinks is not None:
        grads["dsinks"] = -(p_sink.unsqueeze(-1) * d).sum(dim=(0, 2, 3))
    return grads


def check_grads(got, q, k, v, dout, scale=None, causal=False, window=(-1, -1), sinks=None,
                out=None, softcap=0.0):
    """Asserts FlashAttention's rule max|g - ref| <= 2 max|g_pt - ref| + atol for every gradient
    in `got` (a dict with some of dq, dk, dv, dsinks), atol twice the dtype's rounding step at
    the reference values (fp32 dsinks: a relative 1e-4). `out`, the forward's output that the
    backward read, makes g_pt's D that of the kernel (required for dsinks: a sum over every row
    of D, which the rounding of O moves more than the rule's atol).
    Returns {name: (err, err_pt, atol)}."""
    assert out is not None or "dsinks" not in got, "check_grads: dsinks needs the forward's out"
    ref = reference_grads(q, k, v, dout, scale, causal, window, sinks, softcap)
    pt = pt_grads(q, k, v, dout, scale, causal, window, sinks, out, softcap)
    errors = {}
    for name, g in got.items():
        r = ref[name]
        assert g.shape == r.shape, (name, g.shape, r.shape)
        g = g.double()
        assert torch.isfinite(g).all(), f"{name} has NaN/inf"
        if g.numel() == 0:
            continue
        err = (g - r).abs().max().item()
        err_pt = (pt[name].double() - r).abs().max().item()
        if name == "dsinks":  # fp32
            atol = 1e-4 * (1 + r.abs().max().item())
        else:
            assert got[name].dtype == q.dtype, (name, got[name].dtype)
            atol = 2 * rounding_floor(r.float(), q.dtype)
        assert err <= 2 * err_pt + atol, (
            f"{name}: max|g-ref| {err:.3g} > 2*max|g_pt-ref| {2 * err_pt:.3g} + atol {atol:.3g}")
        errors[name] = (err, err_pt, atol)
    return errors


# ---- FP8 (e4m3) forward -------------------------------------------------------------------------
FP8_P_OFFSET = 256.0  # reference.h's kFp8POffset: P in [0, 256] before its rounding to e4m3
E4M3_MAX = 448.0
# Hopper's FP8 tensor cores accumulate Q·Kᵀ with about 14 bits, not fp32's 24 (check.cpp's
# kFp8ScoreRelTol): the LSE budget adds 2^-12 of the largest |scale|·Σ_i |q_i·k_i| of a visible
# (row, key) pair, on the dequantised inputs.
FP8_SCORE_REL_TOL = 1.0 / 4096


# The GPU grid of the FP8 forward tests (test_fp8.py: K7; test_k8.py: K8).
FP8_GPU_SHAPES = [  # b, sq, sk, hq, hkv, causal, window
    (2, 1, 1, 4, 2, False, (-1, -1)),
    (2, 1, 239, 4, 4, False, (-1, -1)),
    (2, 113, 203, 4, 2, True, (-1, -1)),
    (3, 239, 1, 4, 1, True, (-1, -1)),  # MQA; rows that see no key
    (1, 1024, 1023, 6, 1, False, (-1, -1)),
    (1, 1023, 1024, 4, 2, True, (-1, -1)),
    (2, 255, 1000, 2, 2, False, (100, 7)),
    (1, 2048, 2048, 4, 2, False, (-1, -1)),
]


def per_query_head(descale, heads):
    """A (batch, heads_kv) descale as a factor broadcast over (batch, seqlen, heads, dim): query
    head h uses KV head h // (heads / heads_kv)'s value. None: 1. A 4-dimensional descale is
    such a factor already (K8's block descales per row: test_k8.py's per_row)."""
    if descale is None:
        return 1.0
    if descale.dim() == 4:
        return descale
    return descale.repeat_interleave(heads // descale.shape[1], dim=1)[:, None, :, None]


def dequantise(x8, descale, dtype):
    """descale * float(x8), in `dtype` (exact in bf16/fp16 for descales of a few bits)."""
    return (x8.float() * per_query_head(descale, x8.shape[2])).to(dtype)


def fp8_reference(q8, k8, v8, q_descale, k_descale, v_descale, out_dtype, scale=None,
                  causal=False, window=(-1, -1)):
    """FlashAttention-3's FP8 oracle (reference.h): (ref out fp64 (b, sq, hq, dv), ref lse fp64
    (b, hq, sq), pt out fp64, pt lse fp64, the largest visible |scale|·Σ|q_i·k_i|). ref: exact
    attention in fp64 on the dequantised inputs. pt: the
    same math in bf16 on them (descale * x rounded to bf16, fp32 logits and sums), P = exp(s - m)
    scaled by 256 and rounded to e4m3 before P·V, the row sum of the unrounded P, o rounded to
    out_dtype. Rows that see no key: 0 (lse -inf)."""
    sq, sk, d = q8.shape[1], k8.shape[1], q8.shape[3]
    scale = d ** -0.5 if scale is None else scale
    mask = visible_mask(sq, sk, causal, window, q8.device)
    seen = mask.any(dim=1).view(1, 1, sq, 1)
    descales = (q_descale, k_descale, v_descale)

    def logits_of(q, k):
        s = (q @ k.transpose(-1, -2)) * scale
        return s.masked_fill(~mask, float("-inf"))

    group = q8.shape[2] // k8.shape[2]
    qd, kd, vd = (
        (x.double() * (per_query_head(ds, x.shape[2]) if ds is not None else 1.0))
        .repeat_interleave(1 if i == 0 else group, dim=2).transpose(1, 2)
        for i, (x, ds) in enumerate(zip((q8, k8, v8), descales)))
    s = logits_of(qd, kd)
    lse = torch.logsumexp(s, dim=-1) if sk > 0 else s.new_full(s.shape[:3], float("-inf"))
    p = torch.where(seen, torch.softmax(torch.where(seen, s, 0.0), dim=-1), 0.0)
    p = torch.where(mask, p, 0.0)
    ref = p @ vd
    score_abs = ((qd.abs() @ kd.abs().transpose(-1, -2)) * abs(scale)).masked_fill(~mask, 0.0)
    score_abs = score_abs.max().item() if score_abs.numel() else 0.0

    qb, kb, vb = _heads_first(*(dequantise(x, ds, torch.bfloat16)
                                for x, ds in zip((q8, k8, v8), descales)))
    s32 = logits_of(qb, kb)
    m = (torch.where(seen, s32.amax(dim=-1, keepdim=True), 0.0) if sk > 0
         else s32.new_zeros(s32.shape[:3] + (1,)))
    w = torch.where(mask, torch.exp(s32 - m), 0.0)
    total = w.sum(dim=-1, keepdim=True)
    w8 = (w * FP8_P_OFFSET).to(torch.float8_e4m3fn).float()
    pt = (w8 @ vb) / torch.where(seen, total * FP8_P_OFFSET, 1.0)
    pt = torch.where(seen, pt, 0.0).to(out_dtype).double()
    pt_lse = (m + torch.log(total)).squeeze(-1).double()
    return ref.transpose(1, 2), lse, pt.transpose(1, 2), pt_lse, score_abs


def check_fp8(out, lse, q8, k8, v8, q_descale=None, k_descale=None, v_descale=None,
              out_dtype=torch.bfloat16, scale=None, causal=False, window=(-1, -1)):
    """Asserts the FP8 oracle max|out - ref| <= 2·max|pt - ref| + atol (atol twice out_dtype's
    rounding step at the reference values) and the C++ oracle's LSE rule, in true units:
    max|lse - ref| <= 2·max|pt_lse - ref| + 1e-4·(1 + max|ref|) + 2^-12·score_abs, -inf exactly
    where a row sees no key. Returns (err, err_pt, atol, rmse against ref)."""
    ref, ref_lse, pt, pt_lse, score_abs = fp8_reference(
        q8, k8, v8, q_descale, k_descale, v_descale, out_dtype, scale, causal, window)
    assert out.shape == ref.shape and out.dtype == out_dtype, (out.shape, out.dtype)
    out = out.double()
    assert torch.isfinite(out).all(), "output has NaN/inf (unwritten or overflow)"
    if out.numel() == 0:
        return 0.0, 0.0, 0.0, 0.0
    atol = 2 * rounding_floor(ref.float(), out_dtype)
    rmse = (out - ref).pow(2).mean().sqrt().item()
    err, err_pt = assert_out(out, ref, pt, atol)
    if lse is not None:
        assert_lse(lse, ref_lse, lambda finite: (
            2 * (pt_lse[finite] - ref_lse[finite]).abs().max().item()
            + FP8_SCORE_REL_TOL * score_abs))
    return err, err_pt, atol, rmse
