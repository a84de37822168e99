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


def check(out, lse, q, k, v, scale=None, causal=False, window=(-1, -1)):
    """Asserts the oracle for out (and lse when given); returns the errors for printing."""
    ref, ref_lse, pt = reference(q, k, v, scale, causal, window)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert out.dtype == q.dtype
    out = out.float()
    assert torch.isfinite(out).all(), "output has NaN/inf (unwritten or overflow)"
    err = (out - ref).abs().max().item() if out.numel() else 0.0
    err_pt = (pt - ref).abs().max().item() if out.numel() else 0.0
    atol = 2 * rounding_floor(ref, q.dtype)
    assert err <= 2 * err_pt + atol, (
        f"max|out-ref| {err:.3g} > 2*max|pt-ref| {2 * err_pt:.3g} + atol {atol:.3g}")
    if lse is not None:
        assert lse.shape == ref_lse.shape and lse.dtype == torch.float32
        lse = lse.float()
        masked = torch.isneginf(ref_lse)
        assert torch.equal(torch.isneginf(lse), masked), "LSE -inf rows differ from the reference"
        assert not torch.isnan(lse).any() and not torch.isposinf(lse).any()
        finite = ~masked
        if finite.any():
            lse_err = (lse[finite] - ref_lse[finite]).abs().max().item()
            lse_atol = LSE_REL_TOL * (1 + ref_lse[finite].abs().max().item())
            assert lse_err <= lse_atol, f"max|lse-ref| {lse_err:.3g} > {lse_atol:.3g}"
    return err, err_pt, atol
