#!/usr/bin/env python3
"""Host time per call of flashattn's Python forward and backward, layer by layer, beside PyTorch
SDPA's cuDNN backend (GPU only).

At a shape whose GPU time is a few microseconds the stream runs dry, so the wall time of N calls
in a row (then one synchronisation) over N is the host's cost of a call. A backward whose host
cost exceeds its GPU time is host-bound: CUDA events around it then time the host (what a
training loop with short sequences sees too). Layers of flashattn's backward, each a subset of
the next:
  c_abi      flashattn_c_backward through ctypes, its params built once (validation + launches)
  op         flashattn.ops.bwd (the torch custom op: argument checks, outputs, params, c_abi)
  autograd   torch.autograd.grad of flash_attn_func's output (the eager path's backward formula,
             which runs the op's implementation without the op's dispatch)
and the same autograd.grad of SDPA with the cuDNN backend. Then the forward without and with
autograd recording, and a whole step (forward recording autograd + autograd.grad), each also
through the custom ops (flash_attn_func under a torch function mode that changes nothing, which
sends it down the path torch.compile and tensor subclasses take: torch's custom-op layers), and
a cProfile of the autograd layer.
Usage: python3 bench/host_overhead.py [--json F] [--calls N]
"""
import argparse
import cProfile
import io
import json
import pstats
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn
from flashattn import _lib, ops


def host_us(fn, calls):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):  # the best of five rounds: the host's cost, not a scheduler hiccup
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
    return best


def gpu_us(fn, calls=20):
    """CUDA events around each call (as bench/peers_sdpa.py times), median."""
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(calls):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--shape", default="1,128,2,128", help="batch,seqlen,heads,hdim")
    args = ap.parse_args()
    b, s, h, d = (int(x) for x in args.shape.split(","))
    torch.manual_seed(0)
    dev = "cuda"
    mk = lambda *shape: torch.randn(*shape, device=dev, dtype=torch.bfloat16,  # noqa: E731
                                    requires_grad=True)
    q, k, v = mk(b, s, h, d), mk(b, s, h, d), mk(b, s, h, d)
    dout = torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16)
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    out_plain, lse = ops.fwd(q.detach(), k.detach(), v.detach(), d ** -0.5, True, -1, -1,
                             "auto")[:2]

    captured = {}
    real_backward = _lib.backward

    def capture(params, kernel):
        captured["args"] = (params, kernel)
        real_backward(params, kernel)

    _lib.backward = capture
    ops.bwd(dout, q.detach(), k.detach(), v.detach(), out_plain, lse, d ** -0.5, True, -1, -1,
            False, "auto")
    _lib.backward = real_backward
    params, kid = captured["args"]

    qt, kt, vt = (t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
    doutt = dout.transpose(1, 2).contiguous()
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out_sdpa = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)

    def sdpa_bwd():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.autograd.grad(out_sdpa, (qt, kt, vt), doutt, retain_graph=True)

    def sdpa_fwd():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)

    class Passthrough(torch.overrides.TorchFunctionMode):  # flash_attn_func takes the ops
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def step():
        return torch.autograd.grad(flashattn.flash_attn_func(q, k, v, causal=True), (q, k, v),
                                   dout)

    def step_ops():
        with Passthrough():
            return step()

    def sdpa_step():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.autograd.grad(F.scaled_dot_product_attention(qt, kt, vt, is_causal=True),
                                       (qt, kt, vt), doutt)

    def fwd_recording_ops():
        with Passthrough():
            return flashattn.flash_attn_func(q, k, v, causal=True)

    layers = {
        "flashattn bwd c_abi": lambda: real_backward(params, kid),
        "flashattn bwd op": lambda: ops.bwd(dout, q.detach(), k.detach(), v.detach(), out_plain,
                                            lse, d ** -0.5, True, -1, -1, False, "auto"),
        "flashattn bwd autograd": lambda: torch.autograd.grad(out, (q, k, v), dout,
                                                              retain_graph=True),
        "sdpa_cudnn bwd autograd": sdpa_bwd,
        "flashattn fwd": lambda: flashattn.flash_attn_func(q.detach(), k.detach(), v.detach(),
                                                           causal=True),
        "sdpa_cudnn fwd": sdpa_fwd,
        "flashattn fwd recording autograd": lambda: flashattn.flash_attn_func(q, k, v,
                                                                              causal=True),
        "flashattn fwd recording, ops path": fwd_recording_ops,
        "flashattn step": step,
        "flashattn step, ops path": step_ops,
        "sdpa_cudnn step": sdpa_step,
    }
    rec = {"shape": [b, s, h, d], "calls": args.calls,
           "device": torch.cuda.get_device_name(), "host_us": {}, "gpu_events_us": {}}
    for name, fn in layers.items():
        rec["host_us"][name] = round(host_us(fn, args.calls), 1)
        rec["gpu_events_us"][name] = round(gpu_us(fn), 1)
        print(f"{name:34s} host {rec['host_us'][name]:8.1f} us/call   events "
              f"{rec['gpu_events_us'][name]:8.1f} us", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(100):
        layers["flashattn bwd autograd"]()
    torch.cuda.synchronize()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    rec["cprofile_autograd_100_calls"] = text.getvalue()
    print(text.getvalue())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1)


if __name__ == "__main__":
    main()
