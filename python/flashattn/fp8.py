"""FP8 (e4m3) inputs from bf16/fp16 tensors: K8's block quantisation (the library's pre-pass,
flashattn.quantize_fp8) and the per-(batch, KV head) quantisation K7 takes, which
flash_attn_func(..., fp8=...) call for the user.

    q8, k8, v8, qd, kd, vd = flashattn.quantize_fp8(q, k, v, rotation="hadamard")
    out = flash_attn_func(q8, k8, v8, q_block_descale=qd, k_block_descale=kd, v_block_descale=vd)
    out = flash_attn_func(q, k, v, fp8="per_block_hadamard")   # the same, in one call
"""
import torch

from . import _checks, _lib, ops

E4M3_MAX = 448.0  # largest finite torch.float8_e4m3fn
_SEED_RANGE = 2**64


def quantize_fp8(q, k, v, rotation=None, seed=0):
    """K8's pre-pass (C++ flashattn::quantize_fp8): bf16/fp16 q, k, v (batch, seqlen, heads,
    head_dim; flash_attn_func's layout, on one CUDA device or all on the CPU) to
    torch.float8_e4m3fn with one fp32 descale per block of rows.

    The blocks are the FP8 kernel's tiles: rows [i * rows, (i + 1) * rows) of each (sequence,
    head), rows.q for q and rows.kv for k and v (per head dim; flashattn._lib.fp8_block_rows).
    A block's descale is amax / 448 (1 for an all-zero block) and each element becomes
    e4m3(x * 448 / amax), rounded to nearest even and saturated to +-448.
    rotation: None, or "hadamard": q and k are first multiplied by the same orthogonal matrix
    diag(s) H / sqrt(head_dim) (H the Hadamard matrix, s random signs from `seed`, an int in
    [0, 2**64)), which leaves q k^T, and so attention, unchanged while spreading outliers across
    channels before rounding (FlashAttention-3's incoherent processing). v is never rotated.
    Head dims 64, 128 and 256 (the FP8 kernel's), head_dim_v equal to head_dim.

    Returns (q8, k8, v8, q_block_descale, k_block_descale, v_block_descale): the e4m3 tensors
    contiguous in the inputs' shapes; the descales fp32 (batch, heads_q, ceil(seqlen_q /
    rows.q)) and (batch, heads_kv, ceil(seqlen_k / rows.kv)), what flash_attn_func's
    q_block_descale, k_block_descale and v_block_descale take. Forward-only: inputs that require
    grad raise flashattn.UnsupportedError while grad mode is on. A custom op
    (torch.ops.flashattn.quantize_fp8), traced by torch.compile.
    """
    _checks.dense(q, k, v)
    if rotation not in (None, "hadamard"):
        raise ValueError(f"rotation: must be None or 'hadamard', got {rotation!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < _SEED_RANGE:
        raise ValueError(f"seed: must be an integer in [0, 2**64), got {seed!r}")
    if torch.is_grad_enabled():
        _checks.fp8_forward_only("per_block", q, k, v)
    # The schema's int is int64: the seed's bits, two's complement (the op masks them back).
    signed = seed - _SEED_RANGE if seed >= _SEED_RANGE // 2 else seed
    return ops.quantize_fp8(q, k, v, rotation or "none", signed)


def quantize_per_kv_head(x, heads_kv):
    """x (batch, seqlen, heads, dim) bf16/fp16 -> (e4m3 x8, fp32 (batch, heads_kv) descale): one
    descale = amax / 448 (1 where all are 0) per sequence and KV head, over the query heads of
    its group for q (FlashAttention-3's convention, K7's descales); x8 = x / descale rounded to
    e4m3, saturated to +-448. Plain torch, so torch.compile traces it."""
    batch, seqlen, heads, dim = x.shape
    if heads_kv <= 0 or heads % heads_kv != 0:  # the library's rule, needed before its call
        raise ValueError(f"heads_q: must be a multiple of heads_kv ({heads} is not a multiple of "
                         f"{heads_kv})")
    xf = x.float()
    groups = xf.abs().reshape(batch, seqlen, heads_kv, heads // heads_kv * dim)
    if seqlen == 0 or dim == 0:  # amax of nothing
        amax = xf.new_zeros(batch, heads_kv)
    else:
        amax = groups.amax(dim=(1, 3))
    descale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    per_head = descale.repeat_interleave(heads // heads_kv, dim=1)
    x8 = (xf / per_head[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return x8, descale
