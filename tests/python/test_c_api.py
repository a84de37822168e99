"""The C ABI as the package sees it: the struct mirror, names, versions, and the rules of the
boundary (struct_size, reserved, unknown ids, messages truncated into the caller's buffer)."""
import ctypes

import pytest

import flashattn
from flashattn import _lib


def test_library_loads_and_matches_the_package():
    lib = _lib.lib()
    assert lib.flashattn_c_fwd_params_size() == ctypes.sizeof(_lib.Params) == 256
    assert flashattn.library_version() == flashattn.__version__


def test_kernel_names_round_trip():
    names = _lib.all_kernels()
    assert names[:4] == ["auto", "cpu", "k1", "k2"] and "fa2" in names
    for i, name in enumerate(names):
        assert _lib.kernel_id(name) == i and _lib.kernel_name(i) == name
    assert _lib.lib().flashattn_c_kernel_from_name(b"nope") == -1
    assert _lib.kernel_name(len(names)) is None and _lib.kernel_name(-1) is None
    assert _lib.kernel_is_built("auto") and _lib.kernel_is_built("cpu")
    assert _lib.kernel_runs_on_host("cpu") and not _lib.kernel_runs_on_host("k2")
    assert _lib.lib().flashattn_c_kernel_is_built(99) == 0
    assert set(flashattn.gpu_kernels()) <= set(flashattn.built_kernels())


def test_struct_size_and_reserved_are_checked():
    p = _lib.Params()
    p.struct_size = 64
    code, msg = _lib.can_implement(p, 0)
    assert code == _lib.INVALID_ARGUMENT and msg.startswith("struct_size: must be at least 256")
    p = _lib.Params(reserved=1)
    code, msg = _lib.can_implement(p, 0)
    assert code == _lib.INVALID_ARGUMENT and msg.startswith("reserved: must be 0")
    p = _lib.Params(dtype=7)
    assert _lib.can_implement(p, 0)[1].startswith("dtype: must be FLASHATTN_C_BF16")
    p = _lib.Params(dtype=_lib.BF16)
    code, msg = _lib.can_implement(p, 42)
    assert code == _lib.INVALID_ARGUMENT and msg == "kernel: unknown kernel id 42"
    code, msg = _lib.can_implement(p, 0)
    assert code == _lib.INVALID_ARGUMENT and msg.startswith("batch: must be positive")
    assert _lib.select_kernel(p) == "auto"


def test_a_newer_callers_larger_struct_is_read_by_its_prefix():
    # A caller compiled against a later version appends fields; this library reads version 1.
    class Newer(ctypes.Structure):
        _fields_ = [("v1", _lib.Params), ("added", ctypes.c_int64 * 4)]

    p = Newer(v1=_lib.Params(dtype=_lib.BF16), added=(ctypes.c_int64 * 4)(7, 7, 7, 7))
    p.v1.struct_size = ctypes.sizeof(Newer)
    err = ctypes.create_string_buffer(256)
    code = _lib.lib().flashattn_c_can_implement(ctypes.cast(ctypes.byref(p), ctypes.POINTER(
        _lib.Params)), 0, err, 256)
    assert code == _lib.INVALID_ARGUMENT and err.value.startswith(b"batch: must be positive")


def test_null_params_and_truncated_message():
    lib = _lib.lib()
    assert lib.flashattn_c_forward(None, 0, None, 0) == _lib.INVALID_ARGUMENT
    buf = ctypes.create_string_buffer(8)
    p = _lib.Params(dtype=_lib.BF16)
    assert lib.flashattn_c_can_implement(ctypes.byref(p), 0, buf, 8) == _lib.INVALID_ARGUMENT
    assert buf.value == b"batch: "  # 7 characters and the NUL


def test_forward_errors_map_to_python_exceptions():
    with pytest.raises(ValueError, match="batch: must be positive"):
        _lib.forward(_lib.Params(dtype=_lib.BF16), 0)
    with pytest.raises(ValueError):
        _lib._raise_for(_lib.UNSUPPORTED, "x")
    with pytest.raises(flashattn.UnsupportedError):
        _lib._raise_for(_lib.UNSUPPORTED, "x")
    with pytest.raises(RuntimeError, match="CUDA error: boom"):
        _lib._raise_for(_lib.CUDA_ERROR, "boom")
    with pytest.raises(RuntimeError, match="internal error"):
        _lib._raise_for(_lib.INTERNAL_ERROR, "internal error: bad_alloc")
