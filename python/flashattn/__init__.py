"""flashattn: FlashAttention kernels in C++/CUDA, called from PyTorch.

    from flashattn import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True)       # q, k, v: (batch, seqlen, heads, head_dim)

The kernels live in libflashattn_c.so, reached through its C ABI with ctypes (no extension is
compiled against Python or PyTorch). The functions are torch.library custom ops
(torch.ops.flashattn.fwd / varlen_fwd / fwd_kvcache / quantize_fp8) with fake implementations, so
torch.compile traces them. The packed forms (flash_attn_qkvpacked_func, ...) slice one tensor
into views and call those functions.
"""
from . import _lib, distributed
from ._lib import UnsupportedError, library_path
from .fp8 import quantize_fp8
from .interface import (flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache,
                        kvcache_check_errors)
from .packed import (flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                     flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func)

__all__ = [
    "flash_attn_func",
    "flash_attn_varlen_func",
    "flash_attn_with_kvcache",
    "kvcache_check_errors",
    "quantize_fp8",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "UnsupportedError",
    "distributed",
    "built_kernels",
    "gpu_kernels",
    "kernel_is_built",
    "library_path",
    "library_version",
]

__version__ = "0.1.0"


def library_version():
    """Version of the loaded libflashattn_c.so."""
    return _lib.version()


def kernel_is_built(name):
    """True when the family `name` ("cpu", "k2", "fa2", ...) is in the loaded library."""
    return _lib.kernel_is_built(name)


def built_kernels():
    """Names of the families in the loaded library, "auto" excluded."""
    return [n for n in _lib.all_kernels() if n != "auto" and _lib.kernel_is_built(n)]


def gpu_kernels():
    """Names of the built families that run on a CUDA device."""
    return [n for n in built_kernels() if not _lib.kernel_runs_on_host(n)]
