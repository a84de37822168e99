"""The C ABI as the package sees it: the struct mirrors (forward, decode, backward), names,
versions, and the rules of the boundary (struct_size, reserved, unknown ids, messages truncated
into the caller's buffer)."""
import ctypes

import pytest

import flashattn
from flashattn import _lib


def _decode_shape_params(**kw):
    """Decode params whose shape rules read no memory: placeholder pointers."""
    return _lib.DecodeParams(dtype=_lib.BF16, batch=1, seqlen_q=1, heads_q=1, heads_kv=1,
                             head_dim=64, cache_seqlen=16, cache_seqlens=16, **kw)


def _older_caller_is_not_read_past(p, old_size, check, names, args=()):
    """A caller built against an older version passes its struct size: whatever lies past it
    (here bad values of `names`) is not read, so the call fails on some other rule instead."""
    p.struct_size = old_size
    code, msg = check(p, *args)
    assert not any(name in msg for name in names), msg
    return code


def _assert_layout(struct, expected):
    """The library's field table (name -> (type, offset)) for the fields named in `expected`."""
    fields = {name: (ctype, offset) for name, ctype, offset, _ in _lib.library_fields(struct)}
    assert {name: fields[name] for name in expected} == expected


def test_library_loads_and_matches_the_package():
    lib = _lib.lib()
    assert lib.flashattn_c_fwd_params_size() == ctypes.sizeof(_lib.Params) == 360
    assert lib.flashattn_c_decode_params_size() == ctypes.sizeof(_lib.DecodeParams) == 440
    assert lib.flashattn_c_bwd_params_size() == ctypes.sizeof(_lib.BwdParams) == 440
    assert (lib.flashattn_c_quantize_fp8_params_size() == ctypes.sizeof(_lib.QuantizeFp8Params)
            == 320)
    assert flashattn.library_version() == flashattn.__version__


@pytest.mark.parametrize("struct, fields_fn", [
    (_lib.Params, "flashattn_c_fwd_params_fields"),
    (_lib.DecodeParams, "flashattn_c_decode_params_fields"),
    (_lib.BwdParams, "flashattn_c_bwd_params_fields"),
    (_lib.QuantizeFp8Params, "flashattn_c_quantize_fp8_params_fields"),
])
def test_ctypes_mirror_matches_the_c_struct_field_by_field(struct, fields_fn):
    """_lib.py's _fields_ against the library's own description of the struct (built with
    offsetof from the list that also drives the C-to-C++ copy): names, C types, offsets, sizes."""
    count = ctypes.c_size_t(0)
    fields = getattr(_lib.lib(), fields_fn)(ctypes.byref(count))
    theirs = [(fields[i].name.decode(), fields[i].type.decode(), fields[i].offset, fields[i].size)
              for i in range(count.value)]
    ctype_names = {ctypes.c_uint32: "uint32", ctypes.c_int32: "int32", ctypes.c_float: "float",
                   ctypes.c_int64: "int64", ctypes.c_uint64: "uint64", ctypes.c_void_p: "pointer",
                   ctypes.c_int64 * 4: "int64[4]"}
    ours = [(name, ctype_names.get(ctype, repr(ctype)), getattr(struct, name).offset,
             getattr(struct, name).size) for name, ctype in struct._fields_]
    assert len(ours) == len(theirs), f"{struct.__name__}: {len(ours)} fields, C has {len(theirs)}"
    for mine, c in zip(ours, theirs):
        assert mine == c, f"{struct.__name__}: mirror has {mine}, C struct has {c}"
    last = theirs[-1]
    assert last[2] + last[3] == ctypes.sizeof(struct)  # every byte of the struct is described
    assert _lib.library_fields(struct) == _lib.mirror_fields(struct) == ours


def _fwd_shape_params(**kw):
    """Forward params whose shape rules read no memory: placeholder pointers."""
    fields = dict(dtype=_lib.BF16, batch=1, seqlen_q=4, seqlen_k=4, heads_q=1, heads_kv=1,
                  head_dim=64, window_left=-1, window_right=-1)
    fields.update(kw)
    return _lib.Params(**fields)


def test_fp8_dtypes_through_the_abi():
    # FLASHATTN_C_E4M3/E5M2 pass the ABI's dtype check: e4m3 runs on cpu (the first refusal of
    # these placeholder params is the null q), e5m2 nowhere; 4 is no dtype at all.
    assert _lib.can_implement(_fwd_shape_params(dtype=_lib.E4M3), _lib.kernel_id("cpu")) == (
        _lib.INVALID_ARGUMENT, "q.data: must not be null")
    assert _lib.can_implement(_fwd_shape_params(dtype=_lib.E5M2), 0) == (
        _lib.UNSUPPORTED, "dtype: e5m2 has no kernel in this build (FP8 inputs run as e4m3)")
    with pytest.raises(flashattn.UnsupportedError, match="dtype: e5m2 has no kernel"):
        _lib.forward(_fwd_shape_params(dtype=_lib.E5M2), _lib.kernel_id("cpu"))
    code, msg = _lib.can_implement(_lib.Params(dtype=4), 0)
    assert code == _lib.INVALID_ARGUMENT and msg.startswith("dtype: must be FLASHATTN_C_BF16 (0)")


def test_fp8_fields_reserved4_and_older_sizes():
    """Version 5 appends out_dtype, reserved4 and the three descales (336 bytes): their rules are
    read from a struct of the current size; a caller of version 4 (304 bytes) is not read past
    its end (a zero-filled tail: o in bf16, no descales)."""
    params = _fwd_shape_params
    assert _lib.can_implement(params(reserved4=1), 0) == (
        _lib.INVALID_ARGUMENT, "reserved4: must be 0, got 1")
    assert _lib.can_implement(params(dtype=_lib.E4M3, out_dtype=9), 0) == (
        _lib.INVALID_ARGUMENT, "out_dtype: must be FLASHATTN_C_BF16 (0), FLASHATTN_C_FP16 (1), "
        "FLASHATTN_C_E4M3 (2) or FLASHATTN_C_E5M2 (3), got 9")
    assert _lib.can_implement(params(dtype=_lib.E4M3, out_dtype=_lib.E4M3), 0) == (
        _lib.INVALID_ARGUMENT,
        "out_dtype: must be bf16 or fp16 with FP8 inputs (o's element type), got e4m3")
    for name in ("q_descale", "k_descale", "v_descale"):
        assert _lib.can_implement(params(**{name: 64}), 0) == (
            _lib.INVALID_ARGUMENT, f"{name}: only with FP8 inputs (dtype e4m3), got dtype bf16")
    _older_caller_is_not_read_past(params(out_dtype=9, reserved4=1, q_descale=64), 304,
                                   _lib.can_implement,
                                   ("out_dtype", "reserved4", "descale"), (0,))
    _assert_layout(_lib.Params, {
        "out_dtype": ("int32", 304), "reserved4": ("uint32", 308),
        "q_descale": ("pointer", 312), "k_descale": ("pointer", 320),
        "v_descale": ("pointer", 328)})


def test_fp8_forward_honours_out_dtype_and_descales_and_a_version_4_caller_gets_defaults():
    """e4m3 through flashattn_c_forward on the cpu family: out_dtype fp16 and the descales are
    honoured (bitwise the fp16 run on the dequantised inputs; exact descales make descale * x
    exact in fp16). The same struct passed with version 4's size is read as o in bf16 and no
    descales: its out_dtype and descales (which would change the result) are not read."""
    import torch

    b, s, hq, hkv, d = 2, 24, 4, 2, 64
    q, k, v = (torch.randn(b, s, h, d).to(torch.float8_e4m3fn) for h in (hq, hkv, hkv))
    descales = [torch.tensor([[0.5, 2.0], [1.5, 0.75]]), torch.tensor([[2.0, 1.0], [0.25, 1.5]]),
                torch.tensor([[1.25, 0.5], [2.0, 4.0]])]

    def deq(t, dsc, dtype):  # query head h uses KV head h // (hq / hkv)'s descale
        per_head = dsc.repeat_interleave(t.shape[2] // hkv, dim=1)
        return (t.float() * per_head[:, None, :, None]).to(dtype)

    def run(o, struct_size=None):
        st = (ctypes.c_int64 * 4)
        p = _lib.Params(dtype=_lib.E4M3, batch=b, seqlen_q=s, seqlen_k=s, heads_q=hq,
                        heads_kv=hkv, head_dim=d, window_left=-1, window_right=-1,
                        q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                        q_stride=st(*q.stride()), k_stride=st(*k.stride()),
                        v_stride=st(*v.stride()), o_stride=st(*o.stride()),
                        out_dtype=_lib.FP16, q_descale=descales[0].data_ptr(),
                        k_descale=descales[1].data_ptr(), v_descale=descales[2].data_ptr())
        if struct_size is not None:
            p.struct_size = struct_size
        _lib.forward(p, _lib.kernel_id("cpu"))
        return o

    got = run(torch.empty(b, s, hq, d, dtype=torch.float16))
    want = flashattn.flash_attn_func(*(deq(t, dsc, torch.float16)
                                       for t, dsc in zip((q, k, v), descales)), kernel="cpu")
    assert torch.equal(got, want)
    got = run(torch.empty(b, s, hq, d, dtype=torch.bfloat16), struct_size=304)
    assert torch.equal(got, flashattn.flash_attn_func(
        q.bfloat16(), k.bfloat16(), v.bfloat16(), kernel="cpu"))


def test_decode_fp8_is_a_cache_dtype_not_a_q_dtype():
    """Decode reads an e4m3 KV cache (cache_dtype) while q, o, k_new and v_new stay bf16/fp16: an
    FP8 dtype is refused as invalid (it names cache_dtype), an e5m2 cache as unsupported."""
    def params(**kw):  # the shape rules read no memory: placeholder pointers
        fields = dict(dtype=_lib.BF16, batch=1, seqlen_q=1, heads_q=1, heads_kv=1, head_dim=64,
                      cache_seqlen=16, cache_seqlens=16)
        fields.update(kw)
        return _lib.DecodeParams(**fields)
    for code, name in ((_lib.E4M3, "e4m3"), (_lib.E5M2, "e5m2")):
        assert _lib.decode_can_implement(params(dtype=code)) == (
            _lib.INVALID_ARGUMENT, f"dtype: must be bf16 or fp16 (q, o, k_new, v_new), got {name}; "
            "an FP8 KV cache is cache_dtype = e4m3")
        with pytest.raises(ValueError, match=f"dtype: must be bf16 or fp16 .* got {name}"):
            _lib.decode(params(dtype=code))
    # An e4m3 cache with its scales passes every dtype rule: the first refusal is the null q.
    for dtype in (_lib.BF16, _lib.FP16):
        assert _lib.decode_can_implement(params(dtype=dtype, cache_dtype=_lib.E4M3, k_scale=64,
                                                v_scale=64)) == (
            _lib.INVALID_ARGUMENT, "q.data: must not be null")
    assert _lib.decode_can_implement(params(cache_dtype=_lib.E5M2, k_scale=64, v_scale=64)) == (
        _lib.UNSUPPORTED,
        "cache_dtype: e5m2 has no decode kernel; an FP8 KV cache is e4m3 (with k_scale, v_scale)")


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


@pytest.mark.parametrize("struct, check, old_size", [
    ("Params", "can_implement", 264),             # version 2, before softcap
    ("DecodeParams", "decode_can_implement", 376),  # version 2, before softcap
    ("BwdParams", "backward_can_implement", 432),   # version 1, before softcap
])
def test_softcap_and_reserved2_and_older_sizes(struct, check, old_size):
    """softcap's rule and reserved2 are read from a struct of the current size; a caller built
    against the version before softcap passes the older size, and whatever lies past it (here
    a bad softcap and reserved2) is not read: the call fails on the next rule instead."""
    cls = getattr(_lib, struct)
    args = (0,) if check != "decode_can_implement" else ()
    fn = getattr(_lib, check)
    code, msg = fn(cls(dtype=_lib.BF16, reserved2=3), *args)
    assert code == _lib.INVALID_ARGUMENT and msg == "reserved2: must be 0, got 3"
    assert _older_caller_is_not_read_past(cls(dtype=_lib.BF16, softcap=-1.0, reserved2=3),
                                          old_size, fn, ("reserved2", "softcap"),
                                          args) == _lib.INVALID_ARGUMENT
    _assert_layout(cls, {"softcap": ("float", old_size), "reserved2": ("uint32", old_size + 4)})


def test_rotary_fields_reserved3_and_older_sizes():
    """Version 4 appends the rotary fields (pointers, then int32s, reserved3 padding to 416):
    their rules are read from a struct of the current size; a caller of version 3 (384 bytes)
    is not read past its end, so a bad tail is ignored and the call stops at the next rule."""
    params = _decode_shape_params
    assert _lib.decode_can_implement(params(reserved3=1)) == (
        _lib.INVALID_ARGUMENT, "reserved3: must be 0, got 1")
    assert _lib.decode_can_implement(params(rotary_dim=32)) == (
        _lib.INVALID_ARGUMENT, "rotary_dim: must be 0 without rotary_cos/rotary_sin, got 32")
    assert _lib.decode_can_implement(params(rotary_cos=64, rotary_dim=32, seqlen_ro=8)) == (
        _lib.INVALID_ARGUMENT, "rotary_cos/rotary_sin: give both or neither")
    code, msg = _lib.decode_can_implement(params(rotary_cos=64, rotary_sin=128, rotary_dim=66,
                                                 seqlen_ro=8))
    assert code == _lib.INVALID_ARGUMENT and msg.startswith(
        "rotary_dim: must be even and in [2, head_dim = 64]")
    assert _lib.decode_can_implement(params(rotary_cos=64, rotary_sin=128, rotary_dim=32,
                                            rotary_interleaved=2)) == (
        _lib.INVALID_ARGUMENT, "rotary_interleaved: must be 0 or 1, got 2")
    _older_caller_is_not_read_past(params(rotary_dim=32, reserved3=1), 384,
                                   _lib.decode_can_implement, ("rotary", "reserved3"))
    _assert_layout(_lib.DecodeParams, {
        "rotary_cos": ("pointer", 384), "rotary_sin": ("pointer", 392),
        "rotary_dim": ("int32", 400), "seqlen_ro": ("int32", 404),
        "rotary_interleaved": ("int32", 408), "reserved3": ("uint32", 412)})


def test_paged_fields_reserved3_and_older_sizes():
    """Version 4 of the forward struct appends the paged KV fields (block_table, its row stride,
    then int32s, reserved3 padding to 304): their rules are read from a struct of the current
    size; a caller of version 3 (272 bytes) is not read past its end, so a bad tail is ignored."""
    def params(**kw):  # the shape rules read no memory: placeholder pointers
        return _lib.Params(dtype=_lib.BF16, batch=1, seqlen_q=4, seqlen_k=4, heads_q=1,
                           heads_kv=1, head_dim=64, window_left=-1, window_right=-1, **kw)
    assert _lib.can_implement(params(reserved3=2), 0) == (
        _lib.INVALID_ARGUMENT, "reserved3: must be 0, got 2")
    code, msg = _lib.can_implement(params(block_table=64, page_size=16), 0)
    assert code == _lib.INVALID_ARGUMENT and msg.startswith(
        "block_table: needs cu_seqlens_q/cu_seqlens_k")
    code, msg = _lib.can_implement(params(block_table=64, cu_seqlens_q=64, cu_seqlens_k=64,
                                          total_q=4, page_size=0, num_blocks=1,
                                          max_blocks_per_seq=1), 0)
    assert (code, msg) == (_lib.INVALID_ARGUMENT, "page_size: must be >= 1 with block_table, got 0")
    _older_caller_is_not_read_past(params(block_table=64, page_size=0, reserved3=1), 272,
                                   _lib.can_implement, ("block_table", "page_size", "reserved3"),
                                   (0,))
    _assert_layout(_lib.Params, {
        "block_table": ("pointer", 272), "block_table_stride": ("int64", 280),
        "max_blocks_per_seq": ("int32", 288), "num_blocks": ("int32", 292),
        "page_size": ("int32", 296), "reserved3": ("uint32", 300)})


def test_softcap_rule_through_the_abi():
    p, keep = _host_bwd_params()
    p.softcap = -2.0
    assert _lib.backward_can_implement(p, _lib.kernel_id("cpu")) == (
        _lib.INVALID_ARGUMENT, "softcap: must be >= 0 (0: off), got -2.000000")
    p.softcap = float("inf")
    assert _lib.backward_can_implement(p, _lib.kernel_id("cpu")) == (
        _lib.INVALID_ARGUMENT, "softcap: must be finite (0: off)")
    p.softcap = 30.0
    assert _lib.backward_can_implement(p, _lib.kernel_id("cpu")) == (_lib.OK, "")
    del keep


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


def _host_bwd_params():
    """flashattn_c_bwd_params over small host tensors (kept alive in the returned list)."""
    import torch

    q = torch.randn(1, 16, 2, 64).bfloat16()
    keep = [q, torch.zeros_like(q), torch.zeros(1, 2, 16)] + [torch.empty_like(q) for _ in range(3)]
    o, lse, dq, dk, dv = keep[1:]
    s = (ctypes.c_int64 * 4)(*q.stride())
    p = _lib.BwdParams(dtype=_lib.BF16, batch=1, seqlen_q=16, seqlen_k=16, heads_q=2, heads_kv=2,
                       head_dim=64, window_left=-1, window_right=-1, q=q.data_ptr(),
                       k=q.data_ptr(), v=q.data_ptr(), o=o.data_ptr(), dout=q.data_ptr(),
                       lse=lse.data_ptr(), dq=dq.data_ptr(), dk=dk.data_ptr(), dv=dv.data_ptr(),
                       q_stride=s, k_stride=s, v_stride=s, o_stride=s, dout_stride=s,
                       dq_stride=s, dk_stride=s, dv_stride=s)
    return p, keep


def test_backward_abi_rules_map_to_python_exceptions():
    p = _lib.BwdParams(dtype=_lib.BF16)
    p.struct_size = 64
    code, msg = _lib.backward_can_implement(p, 0)
    assert code == _lib.INVALID_ARGUMENT and msg.startswith("struct_size: must be at least 432")
    assert _lib.backward_can_implement(_lib.BwdParams(dtype=_lib.BF16), 42) == (
        _lib.INVALID_ARGUMENT, "kernel: unknown kernel id 42")
    with pytest.raises(ValueError, match="batch: must be positive"):
        _lib.backward(_lib.BwdParams(dtype=_lib.BF16), _lib.kernel_id("cpu"))
    assert _lib.lib().flashattn_c_backward(None, 0, None, 0) == _lib.INVALID_ARGUMENT

    p, keep = _host_bwd_params()
    assert _lib.backward_can_implement(p, _lib.kernel_id("cpu")) == (_lib.OK, "")
    # A family without a backward: UnsupportedError (a ValueError) naming the ones that have one.
    with pytest.raises(flashattn.UnsupportedError, match="kernel k2: no backward .* fa2 or cpu"):
        _lib.backward(p, _lib.kernel_id("k2"))
    p.dq = keep[0].data_ptr()  # dq aliasing q
    with pytest.raises(ValueError, match="dq: overlaps input q"):
        _lib.backward(p, _lib.kernel_id("cpu"))


def test_fp8_cache_fields_and_older_sizes():
    """Version 5 appends the FP8 KV cache (cache_dtype, kv_scale_layout, k_scale, v_scale; 440
    bytes): their rules are read from a struct of the current size; a caller of version 4 (416
    bytes) is not read past its end (a zero-filled tail: the caches are `dtype`)."""
    params = _decode_shape_params
    assert _lib.decode_can_implement(params(cache_dtype=_lib.E4M3)) == (
        _lib.INVALID_ARGUMENT,
        "k_scale: required with cache_dtype e4m3 (fp32, 1 value (per_tensor))")
    assert _lib.decode_can_implement(params(cache_dtype=_lib.E4M3, kv_scale_layout=1,
                                            k_scale=64)) == (
        _lib.INVALID_ARGUMENT,
        "v_scale: required with cache_dtype e4m3 (fp32, heads_kv = 1 values (per_kv_head))")
    assert _lib.decode_can_implement(params(cache_dtype=9)) == (
        _lib.INVALID_ARGUMENT, "cache_dtype: must be 0 (dtype) or a FLASHATTN_C_* dtype, got 9")
    assert _lib.decode_can_implement(params(k_scale=64)) == (
        _lib.INVALID_ARGUMENT, "k_scale: only with cache_dtype e4m3 (the cache is bf16)")
    _older_caller_is_not_read_past(params(cache_dtype=9, k_scale=64), 416,
                                   _lib.decode_can_implement, ("cache_dtype", "k_scale"))
    _assert_layout(_lib.DecodeParams, {
        "cache_dtype": ("int32", 416), "kv_scale_layout": ("int32", 420),
        "k_scale": ("pointer", 424), "v_scale": ("pointer", 432)})


def test_block_descale_fields_and_older_sizes():
    """Version 6 appends K8's three block descales (360 bytes): their rules are read from a
    struct of the current size; a caller of version 5 (336 bytes) is not read past its end (a
    zero-filled tail: no block descales)."""
    params = _fwd_shape_params
    code, msg = _lib.can_implement(params(q_block_descale=64, k_block_descale=64,
                                          v_block_descale=64), 0)
    assert code == _lib.INVALID_ARGUMENT and msg.startswith(
        "q_block_descale: only with dtype e4m3"), msg
    code, msg = _lib.can_implement(params(dtype=_lib.E4M3, k_block_descale=64), 0)
    assert code == _lib.INVALID_ARGUMENT and msg.startswith(
        "q_block_descale: null while k_block_descale is set"), msg
    _older_caller_is_not_read_past(params(q_block_descale=64), 336, _lib.can_implement,
                                   ("block_descale",), (0,))
    _assert_layout(_lib.Params, {
        "q_block_descale": ("pointer", 336), "k_block_descale": ("pointer", 344),
        "v_block_descale": ("pointer", 352)})


def test_fp8_block_rows_through_the_abi():
    lib = _lib.lib()
    for d in (64, 128, 256):
        q_rows, kv_rows = _lib.fp8_block_rows(d)
        assert q_rows > 0 and kv_rows > 0 and kv_rows % 32 == 0  # 8-bit wgmma's k
    assert _lib.fp8_block_rows(96) == (0, 0) and _lib.fp8_block_rows(-1) == (0, 0)
    assert lib.flashattn_c_fp8_block_rows(128, None, None) == 1
    assert lib.flashattn_c_fp8_block_rows(96, None, None) == 0


def _quantize_shape_params(**kw):
    """Pre-pass params whose shape rules read no memory."""
    fields = dict(dtype=_lib.BF16, batch=1, seqlen_q=4, seqlen_k=4, heads_q=1, heads_kv=1,
                  head_dim=64)
    fields.update(kw)
    return _lib.QuantizeFp8Params(**fields)


def test_quantize_fp8_abi_rules():
    lib = _lib.lib()
    p = _quantize_shape_params()
    p.struct_size = 64
    code, msg = _lib.can_quantize_fp8(p)
    assert code == _lib.INVALID_ARGUMENT and msg == (
        "struct_size: must be at least 320 (sizeof flashattn_c_quantize_fp8_params), got 64")
    assert lib.flashattn_c_quantize_fp8(None, None, 0) == _lib.INVALID_ARGUMENT
    assert lib.flashattn_c_can_quantize_fp8(None, None, 0) == _lib.INVALID_ARGUMENT
    assert _lib.can_quantize_fp8(_quantize_shape_params(dtype=9))[1].startswith(
        "dtype: must be FLASHATTN_C_BF16 (0)")
    code, msg = _lib.can_quantize_fp8(_quantize_shape_params(dtype=_lib.E4M3))
    assert code == _lib.INVALID_ARGUMENT and msg.startswith("dtype: must be bf16 or fp16"), msg
    assert _lib.can_quantize_fp8(_quantize_shape_params(rotation=2)) == (
        _lib.INVALID_ARGUMENT, "rotation: must be none or hadamard, got Fp8Rotation 2")
    code, msg = _lib.can_quantize_fp8(_quantize_shape_params(head_dim=96))
    assert code == _lib.INVALID_ARGUMENT and msg.startswith("head_dim: must be 64, 128 or 256")
    code, msg = _lib.can_quantize_fp8(_quantize_shape_params())  # the shapes pass: null q
    assert code == _lib.INVALID_ARGUMENT and msg.startswith("q.data: must not be null"), msg
    with pytest.raises(ValueError, match="q.data: must not be null"):
        _lib.quantize_fp8(_quantize_shape_params(rotation=_lib.ROTATION_HADAMARD))

    # A caller compiled against a later version appends fields; this library reads version 1.
    class Newer(ctypes.Structure):
        _fields_ = [("v1", _lib.QuantizeFp8Params), ("added", ctypes.c_int64 * 2)]

    n = Newer(v1=_quantize_shape_params(head_dim=96), added=(ctypes.c_int64 * 2)(7, 7))
    n.v1.struct_size = ctypes.sizeof(Newer)
    err = ctypes.create_string_buffer(256)
    code = lib.flashattn_c_can_quantize_fp8(
        ctypes.cast(ctypes.byref(n), ctypes.POINTER(_lib.QuantizeFp8Params)), err, 256)
    assert code == _lib.INVALID_ARGUMENT and err.value.startswith(b"head_dim: must be 64")


def test_quantize_fp8_and_block_descales_through_the_abi_on_host():
    """flashattn_c_quantize_fp8 with every field set by hand (strides of a heads-major k, the
    rotation, a seed above 2**63) writes what flashattn.quantize_fp8 writes, and
    flashattn_c_forward reads the block descales of version 6; the same struct passed with
    version 5's size is read without them (the e4m3 inputs with descales 1)."""
    import torch

    b, s, h, d = 2, 200, 2, 128
    q, v = (torch.randn(b, s, h, d).bfloat16() for _ in range(2))
    k = torch.randn(b, h, s, d).bfloat16().transpose(1, 2)  # heads-major strides
    seed = 2**64 - 3
    want = flashattn.quantize_fp8(q, k, v, rotation="hadamard", seed=seed)
    out8 = [torch.empty(b, s, h, d, dtype=torch.float8_e4m3fn) for _ in range(3)]
    descales = [torch.empty_like(t) for t in want[3:]]
    st = (ctypes.c_int64 * 4)
    p = _lib.QuantizeFp8Params(
        dtype=_lib.BF16, batch=b, seqlen_q=s, seqlen_k=s, heads_q=h, heads_kv=h, head_dim=d,
        rotation=_lib.ROTATION_HADAMARD, seed=seed, q=q.data_ptr(), k=k.data_ptr(),
        v=v.data_ptr(), q_out=out8[0].data_ptr(), k_out=out8[1].data_ptr(),
        v_out=out8[2].data_ptr(), q_block_descale=descales[0].data_ptr(),
        k_block_descale=descales[1].data_ptr(), v_block_descale=descales[2].data_ptr(),
        q_stride=st(*q.stride()), k_stride=st(*k.stride()), v_stride=st(*v.stride()),
        q_out_stride=st(*out8[0].stride()), k_out_stride=st(*out8[1].stride()),
        v_out_stride=st(*out8[2].stride()))
    assert _lib.can_quantize_fp8(p) == (_lib.OK, "")
    _lib.quantize_fp8(p)
    for got, w in zip(out8, want[:3]):
        assert torch.equal(got.view(torch.uint8), w.view(torch.uint8))
    for got, w in zip(descales, want[3:]):
        assert torch.equal(got, w)

    def run(struct_size=None):
        o = torch.empty(b, s, h, d, dtype=torch.bfloat16)
        f = _lib.Params(dtype=_lib.E4M3, batch=b, seqlen_q=s, seqlen_k=s, heads_q=h,
                        heads_kv=h, head_dim=d, window_left=-1, window_right=-1,
                        q=out8[0].data_ptr(), k=out8[1].data_ptr(), v=out8[2].data_ptr(),
                        o=o.data_ptr(), q_stride=st(*out8[0].stride()),
                        k_stride=st(*out8[1].stride()), v_stride=st(*out8[2].stride()),
                        o_stride=st(*o.stride()), q_block_descale=descales[0].data_ptr(),
                        k_block_descale=descales[1].data_ptr(),
                        v_block_descale=descales[2].data_ptr())
        if struct_size is not None:
            f.struct_size = struct_size
        _lib.forward(f, _lib.kernel_id("cpu"))
        return o

    assert torch.equal(run(), flashattn.flash_attn_func(
        *out8, kernel="cpu", q_block_descale=descales[0], k_block_descale=descales[1],
        v_block_descale=descales[2]))
    assert torch.equal(run(struct_size=336), flashattn.flash_attn_func(*out8, kernel="cpu"))
