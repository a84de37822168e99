"""flash_attn_varlen_func: argument checks and the refusal of families without variable-length
support run everywhere; the GPU comparison against per-sequence attention lives in test_gpu.py."""
import pytest
import torch

from flashattn import flash_attn_func, flash_attn_varlen_func


def packed(total_q=48, total_k=80, hq=4, hkv=2, d=64):
    return (torch.randn(total_q, hq, d).bfloat16(), torch.randn(total_k, hkv, d).bfloat16(),
            torch.randn(total_k, hkv, d).bfloat16())


CU_Q = torch.tensor([0, 20, 20, 48], dtype=torch.int32)
CU_K = torch.tensor([0, 30, 50, 80], dtype=torch.int32)


def test_cpu_kernel_runs_varlen_as_one_dense_call_per_sequence():
    # The cpu family tiles each sequence from its first row, as a dense call of that sequence
    # does: the outputs and LSEs are bitwise equal.
    q, k, v = packed()
    out, lse = flash_attn_varlen_func(q, k, v, CU_Q, CU_K, 28, 30, causal=True, return_lse=True)
    cq, ck = CU_Q.tolist(), CU_K.tolist()
    for b in range(3):
        o, l = flash_attn_func(q[None, cq[b]:cq[b + 1]], k[None, ck[b]:ck[b + 1]],
                               v[None, ck[b]:ck[b + 1]], causal=True, return_lse=True)
        assert torch.equal(out[cq[b]:cq[b + 1]], o[0])
        assert torch.equal(lse[:, cq[b]:cq[b + 1]], l[0])


def test_cpu_kernel_checks_host_cu_seqlens():
    q, k, v = packed()
    bad = torch.tensor([0, 20, 19, 48], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[2\]: must be >= cu_seqlens_q\[1\]"):
        flash_attn_varlen_func(q, k, v, bad, CU_K, 29, 30)
    with pytest.raises(ValueError, match=r"cu_seqlens_k: sequence 0 has 30 tokens, more than "
                                         r"seqlen_k \(29\)"):
        flash_attn_varlen_func(q, k, v, CU_Q, CU_K, 28, 29)


def test_argument_checks():
    q, k, v = packed()
    with pytest.raises(ValueError, match=r"cu_seqlens_q\.dtype: must be torch\.int32"):
        flash_attn_varlen_func(q, k, v, CU_Q.long(), CU_K, 28, 30)
    with pytest.raises(ValueError, match=r"cu_seqlens_k\.shape\[0\]: must equal"):
        flash_attn_varlen_func(q, k, v, CU_Q, CU_K[:3], 28, 30)
    with pytest.raises(ValueError, match=r"cu_seqlens_q: needs batch \+ 1 >= 2"):
        flash_attn_varlen_func(q, k, v, CU_Q[:1], CU_K[:1], 28, 30)
    with pytest.raises(ValueError, match=r"q: expected 3 dimensions \(total_tokens"):
        flash_attn_varlen_func(q[None], k, v, CU_Q, CU_K, 28, 30)
    with pytest.raises(ValueError, match=r"max_seqlen_k: expected an integer >= 0"):
        flash_attn_varlen_func(q, k, v, CU_Q, CU_K, 28, -1)
    with pytest.raises(ValueError, match=r"v\.shape\[:2\] \(total_k, heads_kv\)"):
        flash_attn_varlen_func(q, k, v[:10], CU_Q, CU_K, 28, 30)
    with pytest.raises(ValueError, match=r"cu_seqlens_q\.device: must equal q\.device"):
        flash_attn_varlen_func(q, k, v, CU_Q.to("meta"), CU_K, 28, 30)
    with pytest.raises(ValueError, match=r"heads_q: must be a multiple of heads_kv"):
        q6 = torch.randn(48, 6, 64).bfloat16()
        flash_attn_varlen_func(q6, torch.randn(80, 4, 64).bfloat16(),
                               torch.randn(80, 4, 64).bfloat16(), CU_Q, CU_K, 28, 30)
