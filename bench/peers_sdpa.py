#!/usr/bin/env python3
"""PyTorch SDPA backends on the standard grid, timed like flashattn-bench, written in its JSON schema.

Run on the GPU machine:
    python3 bench/peers_sdpa.py --backends cudnn,flash --json bench/results/sdpa_h100.json
Backward (issue 18), SDPA's cuDNN and FA2 backends beside flashattn's backward, one JSON:
    PYTHONPATH=python python3 bench/peers_sdpa.py --bwd --json bench/results/DATE_h100_bwd.json

Grid (TESTING.md): 16k tokens (batch = 16384 / seqlen), hidden 2048 (heads = 2048 / hdim),
hdim 64/128/256, seqlen 512..16384, causal off and on. Every backend runs a configuration before the
next configuration starts (the backends' order reversed on every other one), and each record
carries the SM clock, power and temperature read right after its timing. Timing: warm-up, then
each iteration between its own pair of CUDA events (enqueued back to back), median and min over
>= 20 iterations, inputs rotated among sets totalling > 256 MB so that L2 cannot hold them. A run
slower than 1 s after warm-up gets fewer iterations (at least 3, about 10 s per config).
FLOPs: 4*b*h*sq*sk*d, halved for causal (the FlashAttention convention; sq == sk on this grid, so
top-left and bottom-right causal agree and is_causal=True is the bottom-right mask).

--bwd times the backward alone: each input set gets one forward (its graph kept), then every timed
call is torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) on one set, the same for every
contender; FLOPs 2.5x the forward's; records carry mode "bwd" (forward records mode "fwd"). Beside
the time, peak_mem_mib: the device memory a fresh forward + backward allocates above what is
already allocated (torch.cuda.max_memory_allocated; saved activations, outputs, gradients,
workspace), and ok only when the gradients of that call are finite. The backend `flashattn`
(default in --bwd) runs flashattn.flash_attn_func on (batch, seqlen, heads, hdim) inputs with
--flashattn-kernel as the forward family (default auto); its records are named after that
family's backward (flashattn_auto, flashattn_fa2; _det with --deterministic) and carry
bwd_kernel, the family the backward ran on (auto: k6 on Hopper at head dims 64/128/256, else fa2).
"""
import argparse
import datetime
import json
import platform
import subprocess
import sys

TOKENS, HIDDEN = 16384, 2048
HDIMS = (64, 128, 256)
SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
ROTATION_BYTES, MAX_SETS = 256 << 20, 8
SLOW_RUN_MS, CONFIG_BUDGET_MS, MIN_ITERS = 1000.0, 10000.0, 3


def int_list(text):
    try:
        return [int(x) for x in text.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of integers, got '{text}'")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backends", default=None,
                   help="comma list of math, cudnn, flash, efficient, flashattn [cudnn,flash,"
                        "efficient,math; with --bwd cudnn,flash,flashattn]")
    p.add_argument("--bwd", action="store_true", help="time the backward (mode 'bwd')")
    p.add_argument("--flashattn-kernel", default="auto",
                   help="flashattn's forward family (the backward runs on it when it is a "
                        "backward family, cpu or fa2, else on auto's choice: k6 on Hopper at head "
                        "dims 64, 128 and 256, fa2 otherwise; each record's bwd_kernel says which)")
    p.add_argument("--deterministic", action="store_true", help="flashattn's deterministic bwd")
    p.add_argument("--seqlens", type=int_list, default=list(SEQLENS), help="subset of the grid")
    p.add_argument("--hdims", type=int_list, default=list(HDIMS), help="subset of the grid")
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--iters", type=int, default=20, help="measured iterations (>= 20 advised)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", help="output file (rewritten after every config)")
    a = p.parse_args(argv)
    if a.backends is None:
        a.backends = "cudnn,flash,flashattn" if a.bwd else "cudnn,flash,efficient,math"
    a.backends = [b for b in a.backends.split(",") if b]
    return a


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def nvidia_smi(fields):
    """GPU 0's values of nvidia-smi's query `fields` (a comma list), as strings; raises where
    nvidia-smi cannot answer."""
    out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits",
                          "-i", "0"], capture_output=True, text=True, timeout=10)
    return [x.strip() for x in out.stdout.strip().splitlines()[0].split(",")]


def sm_clock_mhz(torch):
    khz = getattr(torch.cuda.get_device_properties(0), "clock_rate", None)
    if khz:
        return int(khz) // 1000
    try:
        return int(nvidia_smi("clocks.max.sm")[0])
    except Exception:
        return None


def gpu_state():
    """The GPU's SM clock (MHz), power draw (W) and temperature (C) now, read by nvidia-smi
    (~30 ms); None where it cannot be read. Recorded after each timing, so that a contender timed
    on a slowed (hot, power-capped) GPU shows it."""
    try:
        clock, power, temp = nvidia_smi("clocks.sm,power.draw,temperature.gpu")
        return {"sm_clock_mhz_after": int(float(clock)), "power_w_after": float(power),
                "temp_c_after": int(float(temp))}
    except Exception:
        return {"sm_clock_mhz_after": None, "power_w_after": None, "temp_c_after": None}


def measure(torch, fn, nsets, iters, warmup):
    """Returns (median_ms, min_ms, iterations). fn(i) runs on input set i % nsets."""
    def timed_batch(n, start):
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(n)]
        for i, (a, b) in enumerate(events):
            a.record()
            fn((start + i) % nsets)
            b.record()
        torch.cuda.synchronize()
        return [a.elapsed_time(b) for a, b in events]

    # The first run may carry one-time costs (cuDNN plan building, module load): a slow first run
    # is followed by one more whose time is trusted; a kernel that stays slow needs no more warm-up.
    estimate, warm = 0.0, 0
    while warm < warmup and not (warm >= 2 and estimate > SLOW_RUN_MS):
        n = 1 if warm == 0 or estimate > SLOW_RUN_MS else warmup - warm
        estimate = timed_batch(n, warm)[-1]
        warm += n

    def target_for(run_ms):  # the cap follows the latest run, not a one-off outlier
        if run_ms <= SLOW_RUN_MS:
            return iters
        return max(min(MIN_ITERS, iters), min(iters, int(CONFIG_BUDGET_MS // run_ms)))

    times = []
    target = target_for(estimate)
    while len(times) < target:
        n = 1 if estimate <= 0 else max(1, min(target - len(times), int(250 // max(estimate, 1e-3))))
        times += timed_batch(n, len(times))
        estimate = times[-1]
        target = target_for(estimate)
        if sum(times) > CONFIG_BUDGET_MS and len(times) >= min(MIN_ITERS, iters):
            break
    times.sort()
    mid = len(times) // 2
    median = times[mid] if len(times) % 2 else 0.5 * (times[mid - 1] + times[mid])
    return median, times[0], len(times)


def bwd_family(torch, kernel, hd):
    """The family flashattn's backward runs on for a forward on `kernel` (auto's rule:
    backward_kernel_caps / kBwdSm90HeadDims in the library)."""
    from flashattn.ops import backward_kernel
    family = backward_kernel(kernel)
    if family != "auto":
        return family
    hopper = torch.cuda.get_device_capability(0)[0] == 9
    return "k6" if hopper and hd in (64, 128, 256) else "fa2"


def contender(torch, name, args, dtype):
    """(record name, make(batch, heads, seq, hd) -> (q, k, v, dout), attention(q, k, v, causal))
    for an SDPA backend or flashattn; q, k, v require grad in --bwd."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev = "cuda"
    if name == "flashattn":
        import flashattn
        from flashattn.ops import backward_kernel

        family = backward_kernel(args.flashattn_kernel) if args.bwd else args.flashattn_kernel
        label = f"flashattn_{family}" + ("_det" if args.bwd and args.deterministic else "")

        def make(batch, heads, seq, hd):  # flashattn's layout: (batch, seqlen, heads, hdim)
            return tuple(torch.randn((batch, seq, heads, hd), device=dev, dtype=dtype)
                         .requires_grad_(args.bwd and i < 3) for i in range(4))

        def attention(q, k, v, causal):
            return flashattn.flash_attn_func(q, k, v, causal=causal, kernel=args.flashattn_kernel,
                                             deterministic=args.deterministic)
        return label, make, attention

    backend = {"math": SDPBackend.MATH, "cudnn": SDPBackend.CUDNN_ATTENTION,
               "flash": SDPBackend.FLASH_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}[name]

    def make(batch, heads, seq, hd):
        return tuple(torch.randn((batch, heads, seq, hd), device=dev, dtype=dtype)
                     .requires_grad_(args.bwd and i < 3) for i in range(4))

    def attention(q, k, v, causal):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return f"sdpa_{name}", make, attention


def peak_fwd_bwd_mib(torch, attention, q, k, v, dout, causal):
    """Device memory a fresh forward + backward allocates above what is allocated before it, and
    whether its gradients are finite."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    grads = torch.autograd.grad(attention(q, k, v, causal), (q, k, v), dout)
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    return peak, all(bool(torch.isfinite(g).all()) for g in grads)


def main(argv):
    args = parse_args(argv)
    import torch

    known = ("math", "cudnn", "flash", "efficient", "flashattn")
    unknown = [b for b in args.backends if b not in known]
    if unknown:
        print(f"peers_sdpa: --backends: unknown {unknown} (known: {', '.join(known)})",
              file=sys.stderr)
        return 2
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    mode = "bwd" if args.bwd else "fwd"
    torch.manual_seed(0)

    out = {"device": torch.cuda.get_device_name(0), "sm_clock_mhz": sm_clock_mhz(torch),
           "host": cpu_model(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "command": " ".join(sys.argv), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "mode": mode, "records": []}

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)

    print(f"# device: {out['device']} (peak SM clock {out['sm_clock_mhz']} MHz), torch "
          f"{out['torch']}, cudnn {out['cudnn']}, mode {mode}")
    print(f"{'kernel':<15} {'dtype':<5} {'b':>5} {'h':>5} {'sq':>7} {'d':>5} {'causal':>6} "
          f"{'ms':>10} {'ms_min':>10} {'iters':>5} {'TFLOP/s':>8}"
          f"{' peak_MiB' if args.bwd else ''} ok")
    configs = [(hd, s, c) for hd in args.hdims for s in args.seqlens for c in (False, True)]
    total = len(configs) * len(args.backends)
    done = 0
    contenders = {be: contender(torch, be, args, dtype) for be in args.backends}
    # Every contender on a configuration before the next one, their order reversed on every
    # other configuration, so that drift over the run (clocks under sustained load, heat)
    # favours none: backend after backend (this script's order before 2026-11-29), the last one
    # met a GPU that had run the whole grid twice already.
    order = [(cfg, be) for n, cfg in enumerate(configs)
             for be in (args.backends if n % 2 == 0 else args.backends[::-1])]
    for (hd, seq, causal), be in order:
        name, make, attention = contenders[be]
        done += 1
        batch, heads = TOKENS // seq, HIDDEN // hd
        rec = {"kernel": name, "mode": mode, "dtype": args.dtype, "batch": batch,
               "heads": heads, "kv_heads": heads, "seqlen_q": seq, "seqlen_k": seq,
               "hdim": hd, "hdim_v": hd, "causal": causal, "window": [-1, -1], "ms": None,
               "ms_min": None, "iters": 0, "tflops": None, "max_err": None,
               "max_err_pt": None, "ok": False}
        if args.bwd:
            rec.update(peak_mem_mib=None, deterministic=bool(args.deterministic
                                                             and be == "flashattn"))
            if be == "flashattn":
                rec["bwd_kernel"] = bwd_family(torch, args.flashattn_kernel, hd)
        flops = 4.0 * batch * heads * seq * seq * hd / (2 if causal else 1)
        flops *= 2.5 if args.bwd else 1.0
        sets = []
        try:
            tensor_bytes = batch * heads * seq * hd * torch.finfo(dtype).bits // 8
            # backward: q, k, v, out and dout read, dq, dk, dv written
            set_bytes = (8 if args.bwd else 3) * tensor_bytes
            nsets = max(1, min(MAX_SETS, -(-ROTATION_BYTES // set_bytes)))
            sets = [make(batch, heads, seq, hd) for _ in range(nsets)]
            if args.bwd:
                outs = [attention(q, k, v, causal) for q, k, v, _ in sets]

                def run(i):
                    q, k, v, dout = sets[i]
                    return torch.autograd.grad(outs[i], (q, k, v), dout, retain_graph=True)
            else:
                def run(i):
                    return attention(*sets[i][:3], causal)

            ms, ms_min, iters = measure(torch, run, nsets, args.iters, args.warmup)
            rec.update(ms=ms, ms_min=ms_min, iters=iters, tflops=flops / (ms * 1e-3) / 1e12)
            finite = True
            if args.bwd:
                rec["peak_mem_mib"], finite = peak_fwd_bwd_mib(torch, attention, *sets[0],
                                                               causal)
                if not finite:
                    rec["error"] = "gradients not finite"
            rec["ok"] = finite
        except Exception as e:  # OOM (math at 16k), "No available kernel", ...
            rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        finally:
            sets = outs = None
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        rec.update(gpu_state())
        out["records"].append(rec)
        save()
        peak = (f" {rec['peak_mem_mib']:>9.0f}" if rec.get("peak_mem_mib") is not None
                else f" {'-':>9}") if args.bwd else ""
        if rec["ms"] is not None:
            print(f"{name:<15} {args.dtype:<5} {batch:>5} {heads:>5} {seq:>7} {hd:>5} "
                  f"{int(causal):>6} {rec['ms']:>10.4f} {rec['ms_min']:>10.4f} {iters:>5} "
                  f"{rec['tflops']:>8.2f}{peak} {'ok' if rec['ok'] else 'ERR'}", flush=True)
        else:
            print(f"{name:<15} {args.dtype:<5} {batch:>5} {heads:>5} {seq:>7} {hd:>5} "
                  f"{int(causal):>6} {'-':>10} {'-':>10} {0:>5} {'-':>8}{peak} ERR\n"
                  f"    {rec['error']}", flush=True)
        tail = f"{rec['tflops']:.1f} TFLOP/s" if rec["ok"] else "error"
        print(f"[{done:>{len(str(total))}}/{total}] {name} {mode} hd{hd} s{seq}"
              f"{' causal' if causal else ''} ... {tail}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
