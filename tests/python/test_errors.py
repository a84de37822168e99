"""Refused arguments: ValueError (or its subclass flashattn.UnsupportedError) whose message names
the argument; the library's own messages come through unchanged."""
import pytest
import torch

import flashattn
from flashattn import UnsupportedError, flash_attn_func


def t(*shape, dtype=torch.bfloat16, device="cpu"):
    return torch.randn(*shape, device=device).to(dtype)


def qkv(hq=4, hkv=4, d=64, dtype=torch.bfloat16):
    return (t(1, 16, hq, d, dtype=dtype), t(1, 16, hkv, d, dtype=dtype),
            t(1, 16, hkv, d, dtype=dtype))


def test_heads_not_a_multiple_carries_the_library_message():
    q, k, v = qkv(hq=6, hkv=4)
    with pytest.raises(ValueError, match=r"heads_q: must be a multiple of heads_kv "
                                         r"\(6 is not a multiple of 4\)"):
        flash_attn_func(q, k, v)


def test_float32_is_refused():
    q, k, v = qkv(dtype=torch.float32)
    with pytest.raises(ValueError, match=r"q\.dtype: must be torch\.bfloat16, torch\.float16 or "
                                         r"torch\.float8_e4m3fn, got torch\.float32"):
        flash_attn_func(q, k, v)


def test_e5m2_is_a_dtype_without_a_kernel():
    # e5m2 tensors reach the library, which refuses them as unsupported (not a bad argument);
    # e4m3 runs (test_fp8.py).
    q, k, v = qkv(dtype=torch.float8_e5m2)
    with pytest.raises(UnsupportedError, match=r"dtype: e5m2 has no kernel in this build"):
        flash_attn_func(q, k, v)


def test_mixed_dtypes():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"k\.dtype: must equal q\.dtype"):
        flash_attn_func(q, k.half(), v)


def test_mismatched_devices():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"v\.device: must equal q\.device"):
        flash_attn_func(q, k, v.to("meta"))
    with pytest.raises(ValueError, match=r"q\.device: must be a CUDA or CPU device"):
        flash_attn_func(*(x.to("meta") for x in (q, k, v)))


def test_shape_mismatches():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"q: expected 4 dimensions"):
        flash_attn_func(q[0], k, v)
    with pytest.raises(ValueError, match=r"k\.shape\[0\] \(batch\)"):
        flash_attn_func(q, torch.cat([k, k]), torch.cat([v, v]))
    with pytest.raises(ValueError, match=r"k\.shape\[3\] \(head_dim\)"):
        flash_attn_func(q, t(1, 16, 4, 128), t(1, 16, 4, 128))
    with pytest.raises(ValueError, match=r"v\.shape\[:3\]"):
        flash_attn_func(q, k, v[:, :8])
    with pytest.raises(ValueError, match=r"q: expected a torch\.Tensor"):
        flash_attn_func([1.0], k, v)


def test_library_rules():
    q, k, v = qkv(d=80)
    with pytest.raises(ValueError, match=r"head_dim: must be 64, 96, 128, 192 or 256"):
        flash_attn_func(q, k, v)
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"window_right: must be -1 or 0 when causal"):
        flash_attn_func(q, k, v, causal=True, window_size=(-1, 4))
    with pytest.raises(ValueError, match=r"window_left: must be >= -1"):
        flash_attn_func(q, k, v, window_size=(-2, -1))
    with pytest.raises(ValueError, match=r"window_size: expected \(left, right\)"):
        flash_attn_func(q, k, v, window_size=(1,))
    with pytest.raises(ValueError, match=r"softmax_scale: must be finite"):
        flash_attn_func(q, k, v, softmax_scale=float("inf"))
    # A row stride of 68 elements is not a multiple of 8 (16 bytes): the kernels load vectors.
    q68 = t(1, 16, 4, 68)[..., :64]
    with pytest.raises(ValueError, match=r"q\.stride\[2\]: must be a multiple of 8"):
        flash_attn_func(q68, k, v)


def test_kernel_names():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"kernel: unknown kernel 'k99' \(known: auto, cpu"):
        flash_attn_func(q, k, v, kernel="k99")
    # A GPU family is refused for CPU tensors whether or not this machine has a GPU.
    with pytest.raises(ValueError, match=r"kernel: 'k2' runs on the GPU"):
        flash_attn_func(q, k, v, kernel="k2")


def test_unbuilt_family_is_unsupported():
    missing = [n for n in ("k3", "k4", "k5", "k6", "k7", "k8") if not flashattn.kernel_is_built(n)]
    if not missing:
        pytest.skip("every family is built")
    q, k, v = qkv()
    # A family that is not built is not a host kernel either: the CPU-tensor rule answers first.
    with pytest.raises(ValueError, match=rf"kernel: '{missing[0]}' runs on the GPU"):
        flash_attn_func(q, k, v, kernel=missing[0])
    assert issubclass(UnsupportedError, ValueError)
