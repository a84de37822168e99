"""ctypes binding of the C ABI (include/flashattn/c_api.h) in libflashattn_c.so: forward, decode,
backward and K8's FP8 pre-pass (quantize_fp8).

The library is looked up, in order, at $FLASHATTN_LIBRARY (a path to the .so: how the tests use
the CMake build's copy without installing) and beside this file (where the wheel puts it).
Nothing here imports torch: this layer knows pointers, shapes and strides only.
"""
import ctypes
import os
import threading

# Status codes of c_api.h.
OK, INVALID_ARGUMENT, UNSUPPORTED, CUDA_ERROR, INTERNAL_ERROR = 0, 1, 2, 3, 4
# Element types of c_api.h (forward runs E4M3 inputs with an out_dtype; decode reads an E4M3
# cache; E5M2 has no kernel: UNSUPPORTED).
BF16, FP16, E4M3, E5M2 = 0, 1, 2, 3
# Rotations of the FP8 pre-pass (FLASHATTN_C_ROTATION_*).
ROTATION_NONE, ROTATION_HADAMARD = 0, 1

_LIB_NAME = "libflashattn_c.so"
_ERR_LEN = 1024


class UnsupportedError(ValueError):
    """A valid request that the chosen kernel or this build cannot run (status `unsupported`).

    A ValueError, so `except ValueError` catches every refusal; catch this class to tell a
    missing feature ("kernel k1 does not support variable length") from a bad argument.
    """


class Params(ctypes.Structure):
    """Mirror of flashattn_c_fwd_params, version 6 (360 bytes, no implicit padding)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dtype", ctypes.c_int32),
        ("batch", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32),
        ("seqlen_k", ctypes.c_int32),
        ("heads_q", ctypes.c_int32),
        ("heads_kv", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("head_dim_v", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("total_q", ctypes.c_int32),
        ("total_k", ctypes.c_int32),
        ("reserved", ctypes.c_uint32),
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("cu_seqlens_q", ctypes.c_void_p),
        ("cu_seqlens_k", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
        ("q_stride", ctypes.c_int64 * 4),
        ("k_stride", ctypes.c_int64 * 4),
        ("v_stride", ctypes.c_int64 * 4),
        ("o_stride", ctypes.c_int64 * 4),
        ("sinks", ctypes.c_void_p),  # version 2
        ("softcap", ctypes.c_float),  # version 3
        ("reserved2", ctypes.c_uint32),
        ("block_table", ctypes.c_void_p),  # version 4: paged KV in prefill
        ("block_table_stride", ctypes.c_int64),
        ("max_blocks_per_seq", ctypes.c_int32),
        ("num_blocks", ctypes.c_int32),
        ("page_size", ctypes.c_int32),
        ("reserved3", ctypes.c_uint32),
        ("out_dtype", ctypes.c_int32),  # version 5: FP8 inputs (o's type, BF16 or FP16)
        ("reserved4", ctypes.c_uint32),
        ("q_descale", ctypes.c_void_p),
        ("k_descale", ctypes.c_void_p),
        ("v_descale", ctypes.c_void_p),
        ("q_block_descale", ctypes.c_void_p),  # version 6: K8's block descales
        ("k_block_descale", ctypes.c_void_p),
        ("v_block_descale", ctypes.c_void_p),
    ]

    def __init__(self, **fields):
        super().__init__(struct_size=ctypes.sizeof(Params), **fields)


assert ctypes.sizeof(Params) == 360 and Params.q.offset == 64 and Params.q_stride.offset == 128


class DecodeParams(ctypes.Structure):
    """Mirror of flashattn_c_decode_params, version 5 (440 bytes, no implicit padding)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dtype", ctypes.c_int32),
        ("batch", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32),
        ("heads_q", ctypes.c_int32),
        ("heads_kv", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("cache_batch", ctypes.c_int32),
        ("cache_seqlen", ctypes.c_int32),
        ("num_pages", ctypes.c_int32),
        ("page_size", ctypes.c_int32),
        ("max_pages", ctypes.c_int32),
        ("seqlen_new", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("num_splits", ctypes.c_int32),
        ("check_indices", ctypes.c_int32),
        ("reserved", ctypes.c_uint32),
        ("q", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("k_cache", ctypes.c_void_p),
        ("v_cache", ctypes.c_void_p),
        ("cache_batch_idx", ctypes.c_void_p),
        ("page_table", ctypes.c_void_p),
        ("cache_seqlens", ctypes.c_void_p),
        ("k_new", ctypes.c_void_p),
        ("v_new", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
        ("page_table_stride", ctypes.c_int64),
        ("q_stride", ctypes.c_int64 * 4),
        ("o_stride", ctypes.c_int64 * 4),
        ("k_cache_stride", ctypes.c_int64 * 4),
        ("v_cache_stride", ctypes.c_int64 * 4),
        ("k_new_stride", ctypes.c_int64 * 4),
        ("v_new_stride", ctypes.c_int64 * 4),
        ("sinks", ctypes.c_void_p),  # version 2
        ("softcap", ctypes.c_float),  # version 3
        ("reserved2", ctypes.c_uint32),
        ("rotary_cos", ctypes.c_void_p),  # version 4
        ("rotary_sin", ctypes.c_void_p),
        ("rotary_dim", ctypes.c_int32),
        ("seqlen_ro", ctypes.c_int32),
        ("rotary_interleaved", ctypes.c_int32),
        ("reserved3", ctypes.c_uint32),
        ("cache_dtype", ctypes.c_int32),  # version 5: 0 (dtype) or E4M3
        ("kv_scale_layout", ctypes.c_int32),  # 0: per tensor; 1: per KV head
        ("k_scale", ctypes.c_void_p),
        ("v_scale", ctypes.c_void_p),
    ]

    def __init__(self, **fields):
        super().__init__(struct_size=ctypes.sizeof(DecodeParams), **fields)


assert (ctypes.sizeof(DecodeParams) == 440 and DecodeParams.q.offset == 80
        and DecodeParams.q_stride.offset == 176)


class BwdParams(ctypes.Structure):
    """Mirror of flashattn_c_bwd_params, version 2 (440 bytes, no implicit padding)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dtype", ctypes.c_int32),
        ("batch", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32),
        ("seqlen_k", ctypes.c_int32),
        ("heads_q", ctypes.c_int32),
        ("heads_kv", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("head_dim_v", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("total_q", ctypes.c_int32),
        ("total_k", ctypes.c_int32),
        ("deterministic", ctypes.c_int32),
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p),
        ("dout", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("dq", ctypes.c_void_p),
        ("dk", ctypes.c_void_p),
        ("dv", ctypes.c_void_p),
        ("cu_seqlens_q", ctypes.c_void_p),
        ("cu_seqlens_k", ctypes.c_void_p),
        ("sinks", ctypes.c_void_p),
        ("dsinks", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
        ("q_stride", ctypes.c_int64 * 4),
        ("k_stride", ctypes.c_int64 * 4),
        ("v_stride", ctypes.c_int64 * 4),
        ("o_stride", ctypes.c_int64 * 4),
        ("dout_stride", ctypes.c_int64 * 4),
        ("dq_stride", ctypes.c_int64 * 4),
        ("dk_stride", ctypes.c_int64 * 4),
        ("dv_stride", ctypes.c_int64 * 4),
        ("softcap", ctypes.c_float),  # version 2
        ("reserved2", ctypes.c_uint32),
    ]

    def __init__(self, **fields):
        super().__init__(struct_size=ctypes.sizeof(BwdParams), **fields)


assert (ctypes.sizeof(BwdParams) == 440 and BwdParams.q.offset == 64
        and BwdParams.q_stride.offset == 176)


class QuantizeFp8Params(ctypes.Structure):
    """Mirror of flashattn_c_quantize_fp8_params, version 1 (320 bytes, no implicit padding)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("dtype", ctypes.c_int32),
        ("batch", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32),
        ("seqlen_k", ctypes.c_int32),
        ("heads_q", ctypes.c_int32),
        ("heads_kv", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("head_dim_v", ctypes.c_int32),
        ("rotation", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("q_out", ctypes.c_void_p),
        ("k_out", ctypes.c_void_p),
        ("v_out", ctypes.c_void_p),
        ("q_block_descale", ctypes.c_void_p),
        ("k_block_descale", ctypes.c_void_p),
        ("v_block_descale", ctypes.c_void_p),
        ("stream", ctypes.c_void_p),
        ("q_stride", ctypes.c_int64 * 4),
        ("k_stride", ctypes.c_int64 * 4),
        ("v_stride", ctypes.c_int64 * 4),
        ("q_out_stride", ctypes.c_int64 * 4),
        ("k_out_stride", ctypes.c_int64 * 4),
        ("v_out_stride", ctypes.c_int64 * 4),
    ]

    def __init__(self, **fields):
        super().__init__(struct_size=ctypes.sizeof(QuantizeFp8Params), **fields)


assert (ctypes.sizeof(QuantizeFp8Params) == 320 and QuantizeFp8Params.q.offset == 48
        and QuantizeFp8Params.q_stride.offset == 128)


class Field(ctypes.Structure):
    """Mirror of flashattn_c_field: one field of a params struct as the library was compiled."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("type", ctypes.c_char_p),
        ("offset", ctypes.c_size_t),
        ("size", ctypes.c_size_t),
    ]


_C_TYPE_NAMES = {ctypes.c_uint32: "uint32", ctypes.c_int32: "int32", ctypes.c_float: "float",
                 ctypes.c_int64: "int64", ctypes.c_uint64: "uint64", ctypes.c_void_p: "pointer"}


def c_type_name(ctype):
    """The flashattn_c_field type name of a ctypes field type ("int32", "int64[4]", ...)."""
    if issubclass(ctype, ctypes.Array):
        return f"{c_type_name(ctype._type_)}[{ctype._length_}]"
    return _C_TYPE_NAMES.get(ctype, ctype.__name__)


def mirror_fields(struct):
    """(name, type, offset, size) of each field of a ctypes mirror, in order."""
    return [(name, c_type_name(ctype), getattr(struct, name).offset, getattr(struct, name).size)
            for name, ctype in struct._fields_]


def library_fields(struct):
    """(name, type, offset, size) of each field of the C struct `struct` mirrors, as the loaded
    library describes it (flashattn_c_*_params_fields)."""
    return _fields_of(getattr(lib(), _FIELDS_FNS[struct]))


# The library's description of each mirrored struct.
_FIELDS_FNS = {Params: "flashattn_c_fwd_params_fields",
               DecodeParams: "flashattn_c_decode_params_fields",
               BwdParams: "flashattn_c_bwd_params_fields",
               QuantizeFp8Params: "flashattn_c_quantize_fp8_params_fields"}


def _fields_of(fn):
    count = ctypes.c_size_t(0)
    fields = fn(ctypes.byref(count))
    return [(f.name.decode(), f.type.decode(), f.offset, f.size)
            for f in (fields[i] for i in range(count.value))]


def _declare(lib):
    P = ctypes.POINTER(Params)
    D = ctypes.POINTER(DecodeParams)
    B = ctypes.POINTER(BwdParams)
    Q = ctypes.POINTER(QuantizeFp8Params)
    I32P = ctypes.POINTER(ctypes.c_int32)
    SizeP = ctypes.POINTER(ctypes.c_size_t)
    sigs = {
        "flashattn_c_forward": (ctypes.c_int, [P, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]),
        "flashattn_c_can_implement": (ctypes.c_int,
                                      [P, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]),
        "flashattn_c_select_kernel": (ctypes.c_int, [P]),
        "flashattn_c_kernel_from_name": (ctypes.c_int, [ctypes.c_char_p]),
        "flashattn_c_kernel_name": (ctypes.c_char_p, [ctypes.c_int]),
        "flashattn_c_kernel_is_built": (ctypes.c_int, [ctypes.c_int]),
        "flashattn_c_kernel_runs_on_host": (ctypes.c_int, [ctypes.c_int]),
        "flashattn_c_fwd_params_size": (ctypes.c_size_t, []),
        "flashattn_c_decode": (ctypes.c_int, [D, ctypes.c_char_p, ctypes.c_size_t]),
        "flashattn_c_decode_can_implement": (ctypes.c_int,
                                             [D, ctypes.c_char_p, ctypes.c_size_t]),
        "flashattn_c_decode_params_size": (ctypes.c_size_t, []),
        "flashattn_c_decode_check_errors": (ctypes.c_int,
                                            [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]),
        "flashattn_c_backward": (ctypes.c_int, [B, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]),
        "flashattn_c_backward_can_implement": (ctypes.c_int,
                                               [B, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]),
        "flashattn_c_bwd_params_size": (ctypes.c_size_t, []),
        "flashattn_c_fwd_params_fields": (ctypes.POINTER(Field), [SizeP]),
        "flashattn_c_decode_params_fields": (ctypes.POINTER(Field), [SizeP]),
        "flashattn_c_bwd_params_fields": (ctypes.POINTER(Field), [SizeP]),
        "flashattn_c_quantize_fp8": (ctypes.c_int, [Q, ctypes.c_char_p, ctypes.c_size_t]),
        "flashattn_c_can_quantize_fp8": (ctypes.c_int, [Q, ctypes.c_char_p, ctypes.c_size_t]),
        "flashattn_c_quantize_fp8_params_size": (ctypes.c_size_t, []),
        "flashattn_c_quantize_fp8_params_fields": (ctypes.POINTER(Field), [SizeP]),
        "flashattn_c_fp8_block_rows": (ctypes.c_int, [ctypes.c_int, I32P, I32P]),
        "flashattn_c_version": (ctypes.c_char_p, []),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes


_lib = None
_lock = threading.Lock()


def library_path():
    """Where the shared library is loaded from (it need not exist)."""
    env = os.environ.get("FLASHATTN_LIBRARY")
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIB_NAME)


def lib():
    """The loaded library (loaded on first use, so that importing the package never fails)."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                path = library_path()
                if not os.path.exists(path):
                    raise ImportError(
                        f"flashattn: {path} not found. Install the package with `pip install .` "
                        "from the repository, or point FLASHATTN_LIBRARY at a built "
                        f"{_LIB_NAME} (build/python/{_LIB_NAME} after `scripts/test.sh`).")
                handle = ctypes.CDLL(path)
                _declare(handle)
                # The mirrors must be the structs the library was compiled with, field by field.
                for struct, fields_fn in _FIELDS_FNS.items():
                    theirs, ours = _fields_of(getattr(handle, fields_fn)), mirror_fields(struct)
                    if theirs != ours:
                        diff = next((t, o) for t, o in zip(theirs + [None], ours + [None])
                                    if t != o)
                        raise ImportError(
                            f"flashattn: {path} and this package disagree on {struct.__name__}: "
                            f"the library has field {diff[0]}, the package {diff[1]} "
                            "(name, type, offset, size): library and package differ")
                _lib = handle
    return _lib


def version():
    return lib().flashattn_c_version().decode()


def kernel_id(name):
    """Kernel id for a name ("auto", "cpu", "k2", ...); ValueError naming the known ones."""
    if not isinstance(name, str):
        raise ValueError(f"kernel: expected a kernel name (str), got {type(name).__name__}")
    k = lib().flashattn_c_kernel_from_name(name.encode())
    if k < 0:
        raise ValueError(f"kernel: unknown kernel '{name}' (known: {', '.join(all_kernels())})")
    return k


def kernel_name(k):
    name = lib().flashattn_c_kernel_name(k)
    return name.decode() if name is not None else None


def all_kernels():
    """Every kernel family name the library knows, built or not, "auto" first."""
    names, k = [], 0
    while (name := kernel_name(k)) is not None:
        names.append(name)
        k += 1
    return names


def kernel_is_built(name):
    return bool(lib().flashattn_c_kernel_is_built(kernel_id(name)))


def kernel_runs_on_host(name):
    return bool(lib().flashattn_c_kernel_runs_on_host(kernel_id(name)))


def _raise_for(code, message):
    if code == OK:
        return
    if code == INVALID_ARGUMENT:
        raise ValueError(message)
    if code == UNSUPPORTED:
        raise UnsupportedError(message)
    if code == CUDA_ERROR:
        raise RuntimeError(f"flashattn: CUDA error: {message}")
    raise RuntimeError(f"flashattn: {message} (status {code})")


def forward(params, kernel):
    """Runs flashattn_c_forward; raises ValueError/UnsupportedError/RuntimeError on refusal."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().flashattn_c_forward(ctypes.byref(params), kernel, err, _ERR_LEN)
    _raise_for(code, err.value.decode(errors="replace"))


def can_implement(params, kernel):
    """(code, message) of flashattn_c_can_implement."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().flashattn_c_can_implement(ctypes.byref(params), kernel, err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def select_kernel(params):
    """Name of the family `auto` resolves to for `params` ("auto" when none can run)."""
    return kernel_name(lib().flashattn_c_select_kernel(ctypes.byref(params)))


def decode(params):
    """Runs flashattn_c_decode; raises ValueError/UnsupportedError/RuntimeError on refusal."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().flashattn_c_decode(ctypes.byref(params), err, _ERR_LEN)
    _raise_for(code, err.value.decode(errors="replace"))


def decode_check_errors(stream):
    """Runs flashattn_c_decode_check_errors on `stream` (a cudaStream_t as an int; 0: the legacy
    default stream); raises ValueError/UnsupportedError/RuntimeError as decode() does."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().flashattn_c_decode_check_errors(ctypes.c_void_p(stream or None), err, _ERR_LEN)
    _raise_for(code, err.value.decode(errors="replace"))


def decode_can_implement(params):
    """(code, message) of flashattn_c_decode_can_implement."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().flashattn_c_decode_can_implement(ctypes.byref(params), err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def backward(params, kernel):
    """Runs flashattn_c_backward; raises ValueError/UnsupportedError/RuntimeError on refusal."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().flashattn_c_backward(ctypes.byref(params), kernel, err, _ERR_LEN)
    _raise_for(code, err.value.decode(errors="replace"))


def backward_can_implement(params, kernel):
    """(code, message) of flashattn_c_backward_can_implement."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().flashattn_c_backward_can_implement(ctypes.byref(params), kernel, err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def quantize_fp8(params):
    """Runs flashattn_c_quantize_fp8; raises ValueError/UnsupportedError/RuntimeError on refusal."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().flashattn_c_quantize_fp8(ctypes.byref(params), err, _ERR_LEN)
    _raise_for(code, err.value.decode(errors="replace"))


def can_quantize_fp8(params):
    """(code, message) of flashattn_c_can_quantize_fp8."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    code = lib().flashattn_c_can_quantize_fp8(ctypes.byref(params), err, _ERR_LEN)
    return code, err.value.decode(errors="replace")


def fp8_block_rows(head_dim):
    """(q_rows, kv_rows) per block descale for a head dim (flashattn_c_fp8_block_rows: the FP8
    kernel's tiles), (0, 0) where no FP8 kernel is built for it."""
    q_rows, kv_rows = ctypes.c_int32(0), ctypes.c_int32(0)
    lib().flashattn_c_fp8_block_rows(int(head_dim), ctypes.byref(q_rows), ctypes.byref(kv_rows))
    return q_rows.value, kv_rows.value
