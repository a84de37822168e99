#!/usr/bin/env python3
"""Our kernels (through the flashattn package) and PyTorch SDPA on the standard grid, one process.

Run on the GPU machine (the package importable: installed, or PYTHONPATH=python with
FLASHATTN_LIBRARY=build/python/libflashattn_c.so):
    python3 bench/compare.py --json bench/results/DATE_h100_compare.json \\
        --plot docs/compare_h100.png --markdown bench/results/DATE_h100_compare.md

Grid (TESTING.md): 16k tokens (batch = 16384 / seqlen), hidden 2048 (heads = 2048 / hdim),
hdim 64/128/256, seqlen 512..16384, causal off and on, bf16. --seqlens/--hdims take subsets.
Implementations: --kernels (default: every GPU family in the loaded library) and --sdpa backends
(cuDNN, FA2 "flash", memory-efficient, math), SDPA on (batch, heads, seqlen, hdim) contiguous
inputs as bench/peers_sdpa.py gives them.
Timing: CUDA events around each call; warm-up first; then batches of calls enqueued behind a GPU
sleep, so that the host's launch overhead (Python, validation) overlaps the sleep and the
events measure the device; median and min of >= --iters calls (fewer, at least 3, only where one
call exceeds 1 s); inputs rotated among sets of > 256 MB in all so the 50 MB L2 cannot hold them.
Each implementation runs every configuration before the next starts, ours last: K1's workspace
pool keeps its high-water mark of device memory, which SDPA's math backend needs at 16k.
Correctness: 64 query rows of batch 0 against an fp32 reference with FlashAttention's oracle
(max|out-ref| <= 2·max|pt-ref| + atol), recorded as max_err, max_err_pt, ok.
Output: the flashattn-bench JSON schema (bench/results), a PNG of TFLOP/s against seqlen (one
panel per head dim and mask, one line per implementation), a markdown table (bench/perf_table.py).
FLOPs: 4·b·h·sq·sk·d, halved for causal (sq == sk here).
"""
import argparse
import datetime
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_table  # noqa: E402
from peers_sdpa import HDIMS, SEQLENS, cpu_model, int_list, sm_clock_mhz  # noqa: E402

TOKENS, HIDDEN = 16384, 2048
ROTATION_BYTES, MAX_SETS = 256 << 20, 8
SLOW_RUN_MS, CONFIG_BUDGET_MS, MIN_ITERS = 1000.0, 10000.0, 3
CHECK_ROWS = 64
SLEEP_CYCLES_PER_CALL = 2_000_000  # ~1 ms at 2 GHz: more than one call's host overhead
SDPA_BACKENDS = ("cudnn", "flash", "efficient", "math")
PREFERENCE = ("k6", "k5", "k4", "k3", "fa2", "k2", "k1")  # fastest first, as capabilities.h


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kernels", help="comma list of our GPU families [every built one]")
    p.add_argument("--sdpa", default=",".join(SDPA_BACKENDS),
                   help="comma list of SDPA backends: cudnn, flash, efficient, math ('' for none)")
    p.add_argument("--seqlens", type=int_list, default=list(SEQLENS), help="subset of the grid")
    p.add_argument("--hdims", type=int_list, default=list(HDIMS), help="subset of the grid")
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    p.add_argument("--iters", type=int, default=20, help="measured calls per config (>= 20)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--json", help="records, rewritten after every configuration")
    p.add_argument("--plot", help="PNG of TFLOP/s against seqlen")
    p.add_argument("--markdown", help="the table, as printed, written to this file")
    p.add_argument("--ratio", action="append", default=[],
                   help="A/B ratio column (names as in the records) [best of ours over "
                        "sdpa_cudnn and sdpa_flash]")
    p.add_argument("--seed", type=int, help="input seed [fresh, recorded]")
    a = p.parse_args(argv)
    a.sdpa = [b for b in a.sdpa.split(",") if b]
    unknown = [b for b in a.sdpa if b not in SDPA_BACKENDS]
    if unknown:
        p.error(f"--sdpa: unknown {unknown} (known: {', '.join(SDPA_BACKENDS)})")
    return a


def measure(torch, fn, nsets, iters, warmup):
    """(median_ms, min_ms, calls, host_ms): fn(i) runs on input set i % nsets; host_ms is the
    host's time to enqueue one call (when it exceeds the sleep per call, short kernels wait on
    the host and their times include launch overhead)."""
    host = []

    def timed_batch(n, start):
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(n)]
        torch.cuda._sleep(SLEEP_CYCLES_PER_CALL * n)  # the GPU waits while the host enqueues
        t0 = time.perf_counter()
        for i, (a, b) in enumerate(events):
            a.record()
            fn((start + i) % nsets)
            b.record()
        host.append((time.perf_counter() - t0) * 1e3 / n)
        torch.cuda.synchronize()
        return [a.elapsed_time(b) for a, b in events]

    # One-time costs (cuDNN plans, module loads) land in the first call: warm up one at a time
    # until the estimate is trusted; a kernel that stays slow needs no more warm-up.
    estimate, warm = 0.0, 0
    while warm < warmup and not (warm >= 2 and estimate > SLOW_RUN_MS):
        estimate = timed_batch(1, warm)[-1]
        warm += 1

    def target_for(run_ms):
        if run_ms <= SLOW_RUN_MS:
            return iters
        return max(min(MIN_ITERS, iters), min(iters, int(CONFIG_BUDGET_MS // run_ms)))

    times = []
    target = target_for(estimate)
    while len(times) < target:
        n = max(1, min(target - len(times), int(250 // max(estimate, 1e-3))))
        times += timed_batch(n, len(times))
        estimate = times[-1]
        target = target_for(estimate)
        if sum(times) > CONFIG_BUDGET_MS and len(times) >= min(MIN_ITERS, iters):
            break
    times.sort()
    mid = len(times) // 2
    median = times[mid] if len(times) % 2 else 0.5 * (times[mid - 1] + times[mid])
    return median, times[0], len(times), min(host)


def sampled_check(torch, out, q, k, v, causal):
    """FlashAttention's oracle on CHECK_ROWS query rows of batch 0; q, k, v, out (b, s, h, d).
    Returns (max_err, max_err_pt, ok)."""
    sq, sk, d = q.shape[1], k.shape[1], q.shape[3]
    rows = torch.linspace(0, sq - 1, min(CHECK_ROWS, sq), device=q.device).round().long().unique()
    qr = q[0, rows].float().transpose(0, 1)                        # (h, n, d)
    kf, vf = k[0].float().transpose(0, 1), v[0].float().transpose(0, 1)  # (h, sk, d)
    logits = (qr @ kf.transpose(1, 2)) * d ** -0.5
    if causal:  # bottom-right aligned
        cols = torch.arange(sk, device=q.device)
        logits = logits.masked_fill(cols[None, :] > (rows + sk - sq)[:, None], float("-inf"))
    p = torch.softmax(logits, dim=-1)
    ref = p @ vf
    pt = (p.to(q.dtype).float() @ vf).to(q.dtype).float()
    got = out[0, rows].float().transpose(0, 1)
    up = (ref + 0.3).to(q.dtype).float()
    atol = 2 * ((up - 0.3).to(q.dtype).float() - ref).abs().max().item()
    err = (got - ref).abs().max().item()
    err_pt = (pt - ref).abs().max().item()
    ok = math.isfinite(err) and err <= 2 * err_pt + atol
    return err, err_pt, ok


def main(argv):
    args = parse_args(argv)
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import flashattn

    if not torch.cuda.is_available():
        print("compare: needs a CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    built = flashattn.gpu_kernels()
    ours = [k for k in args.kernels.split(",") if k] if args.kernels is not None else built
    missing = [k for k in ours if k not in built]
    if missing:
        print(f"compare: --kernels: {missing} not built as GPU families (built: {built})",
              file=sys.stderr)
        return 2
    # Fastest first (ours[0] is the default ratio's numerator); K1, whose workspace pool keeps
    # its high-water mark, last.
    ours.sort(key=lambda k: PREFERENCE.index(k) if k in PREFERENCE else -1)
    sdpa_enum = {"math": SDPBackend.MATH, "cudnn": SDPBackend.CUDNN_ATTENTION,
                 "flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}
    impls = [f"sdpa_{b}" for b in args.sdpa] + ours
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    torch.manual_seed(seed)

    doc = {"device": torch.cuda.get_device_name(0), "sm_clock_mhz": sm_clock_mhz(torch),
           "host": cpu_model(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "command": " ".join(["bench/compare.py"] + argv), "seed": seed,
           "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "flashattn": flashattn.library_version(), "records": []}

    def save():  # as flashattn-bench writes it: the header fields, then one record per line
        if args.json:
            head = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items()
                              if k != "records")
            recs = ",\n".join("    " + json.dumps(r) for r in doc["records"])
            with open(args.json, "w") as f:
                f.write(f"{{\n{head},\n  \"records\": [\n{recs}\n  ]\n}}\n")

    print(f"# device: {doc['device']} (peak SM clock {doc['sm_clock_mhz']} MHz), torch "
          f"{doc['torch']}, cudnn {doc['cudnn']}, seed {seed}", flush=True)
    print(f"{'kernel':<15} {'dtype':<5} {'b':>5} {'h':>5} {'sq':>7} {'d':>5} {'causal':>6} "
          f"{'ms':>10} {'ms_min':>10} {'iters':>5} {'TFLOP/s':>8} {'max_err':>9} {'host_ms':>8} ok",
          flush=True)
    configs = [(hd, s, c) for hd in args.hdims for s in args.seqlens for c in (False, True)]
    for impl in impls:
        for hd, seq, causal in configs:
            batch, heads = TOKENS // seq, HIDDEN // hd
            flops = 4.0 * batch * heads * seq * seq * hd / (2 if causal else 1)
            rec = {"kernel": impl, "dtype": args.dtype, "batch": batch, "heads": heads,
                   "kv_heads": heads, "seqlen_q": seq, "seqlen_k": seq, "hdim": hd, "hdim_v": hd,
                   "causal": causal, "window": [-1, -1], "ms": None, "ms_min": None, "iters": 0,
                   "tflops": None, "flops": flops,
                   "flop_convention": "causal/2" if causal else "dense", "max_err": None,
                   "max_err_pt": None, "ok": False}
            sets = []
            try:
                set_bytes = 3 * batch * heads * seq * hd * torch.finfo(dtype).bits // 8
                nsets = max(1, min(MAX_SETS, -(-ROTATION_BYTES // set_bytes)))
                shape = (batch, seq, heads, hd)  # ours: (b, s, h, d)
                sets = [tuple(torch.randn(shape, device="cuda", dtype=dtype) for _ in range(3))
                        for _ in range(nsets)]
                if impl.startswith("sdpa_"):
                    backend = sdpa_enum[impl[5:]]
                    sets = [tuple(t.transpose(1, 2).contiguous() for t in s) for s in sets]

                    def run(i):
                        q, k, v = sets[i]
                        with sdpa_kernel([backend]):
                            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                    def bshd(t):
                        return t.transpose(1, 2)
                else:
                    def run(i):
                        q, k, v = sets[i]
                        return flashattn.flash_attn_func(q, k, v, causal=causal, kernel=impl)

                    def bshd(t):
                        return t

                out = run(0)
                err, err_pt, ok = sampled_check(torch, bshd(out), *(bshd(t) for t in sets[0]),
                                                causal)
                del out
                ms, ms_min, iters, host_ms = measure(torch, run, nsets, args.iters, args.warmup)
                rec.update(ms=ms, ms_min=ms_min, iters=iters, tflops=flops / (ms * 1e-3) / 1e12,
                           max_err=err, max_err_pt=err_pt, ok=ok, host_ms_per_call=host_ms)
                if not ok:
                    rec["error"] = "oracle: max|out-ref| > 2*max|pt-ref| + atol on sampled rows"
            except Exception as e:  # OOM (math at 16k), "No available kernel", refusals
                rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                # A family not built for this shape (k4/k5: head dim 128 only) is not a failure.
                rec["unsupported"] = isinstance(e, flashattn.UnsupportedError)
            finally:
                sets = None
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            doc["records"].append(rec)
            save()
            if rec["ms"] is not None:
                print(f"{impl:<15} {args.dtype:<5} {batch:>5} {heads:>5} {seq:>7} {hd:>5} "
                      f"{int(causal):>6} {rec['ms']:>10.4f} {rec['ms_min']:>10.4f} "
                      f"{rec['iters']:>5} {rec['tflops']:>8.2f} {rec['max_err']:>9.2e} "
                      f"{rec['host_ms_per_call']:>8.3f} "
                      f"{'ok' if rec['ok'] else 'FAIL'}", flush=True)
            else:
                print(f"{impl:<15} {args.dtype:<5} {batch:>5} {heads:>5} {seq:>7} {hd:>5} "
                      f"{int(causal):>6} {'-':>10} {'-':>10} {0:>5} {'-':>8} {'-':>9} {'-':>8} "
                      f"ERR\n"
                      f"    {rec['error']}", flush=True)

    if args.plot:
        try:
            plot(doc, impls, args.hdims, args.plot)
            print(f"# plot: {args.plot}")
        except ImportError as e:  # the records and the table are still written
            print(f"compare: --plot: no plot ({e}); pip install matplotlib", file=sys.stderr)
    ratios = [tuple(r.split("/")) for r in args.ratio]
    if not args.ratio and ours:
        best = ours[0]
        ratios = [(best, f"sdpa_{b}") for b in ("cudnn", "flash") if b in args.sdpa]
    rows = {}
    for r in doc["records"]:
        rows.setdefault((r["hdim"], r["seqlen_q"], r["causal"]), {})[r["kernel"]] = (
            r["tflops"] if r["ok"] else None)
    lines = [f"TFLOP/s on {doc['device']}, {args.dtype}, {doc['date']} (`-`: failed or not run)",
             ""] + perf_table.markdown(rows, impls, ratios)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    failed = [r for r in doc["records"]
              if r["kernel"] in ours and not r["ok"] and not r.get("unsupported")]
    if failed:
        print(f"compare: {len(failed)} record(s) of our kernels failed or missed the oracle",
              file=sys.stderr)
    return 1 if failed else 0


def plot(doc, impls, hdims, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    masks = (False, True)
    fig, axes = plt.subplots(len(masks), len(hdims), figsize=(4.2 * len(hdims), 3.4 * len(masks)),
                             squeeze=False, sharex=True)
    for row, causal in enumerate(masks):
        for col, hd in enumerate(hdims):
            ax = axes[row][col]
            for impl in impls:
                pts = sorted((r["seqlen_q"], r["tflops"]) for r in doc["records"]
                             if r["kernel"] == impl and r["hdim"] == hd and r["causal"] == causal
                             and r["ok"])
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3,
                            label=impl, linestyle="--" if impl.startswith("sdpa_") else "-")
            ax.set_xscale("log", base=2)
            seqlens = sorted({r["seqlen_q"] for r in doc["records"]})
            ax.set_xticks(seqlens, [f"{s // 1024}k" if s >= 1024 else str(s) for s in seqlens])
            ax.minorticks_off()
            ax.set_title(f"hdim {hd}, {'causal' if causal else 'no mask'}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            ax.set_ylim(bottom=0)
            if row == len(masks) - 1:
                ax.set_xlabel("seqlen (batch = 16384 / seqlen)")
            if col == 0:
                ax.set_ylabel("TFLOP/s")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 8), fontsize=9,
               frameon=False)
    fig.suptitle(f"Attention forward, {doc['device']}, hidden 2048, 16k tokens "
                 f"({doc['date'][:10]})", fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 0.96))
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
