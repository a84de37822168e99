#!/usr/bin/env python3
"""cuDNN's FP8 (e4m3) SDPA forward on the standard grid, timed like flashattn-bench, in its schema.

Run on the GPU machine with the peers bundle (../shared/peers: carried, then `source DIR/setup.sh`):
    python3 bench/peers_cudnn_fp8.py --json CUDNN.json [--merge OURS.json]
--merge adds the records of a flashattn-bench JSON (K7: `flashattn-bench --dtype e4m3 --sweep
standard --json OURS.json`) so that ours and the peer's sit in one file (issue 17's records).

cuDNN through cudnn-frontend's graph API (sdpa_fp8): q, k, v e4m3 with per-tensor descales, P
scaled to e4m3 by scale_s = 448, O written in e4m3 where the build refuses bf16 (on Hopper it
does: the record's out_dtype says which; ours is bf16 — not hidden, noted). One graph per shape,
built before timing. Timing as bench/peers_sdpa.py: warm-up, each call between its own CUDA
events, median over >= 20, inputs rotated among sets totalling > 256 MB.
Records: kernel "cudnn_fp8", dtype "e4m3", the shape fields of flashattn-bench's schema.
"""
import argparse
import datetime
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_sdpa  # noqa: E402  (measure, grid, device fields)

FP8_MAX = 448.0


def build(cudnn, handle, b, s, h, d, causal, out_type):
    e4m3, f32 = cudnn.data_type.FP8_E4M3, cudnn.data_type.FLOAT
    dims, strides = [b, h, s, d], [s * h * d, d, h * d, 1]  # BSHD in memory
    g = cudnn.pygraph(io_data_type=e4m3, intermediate_data_type=f32, compute_data_type=f32,
                      handle=handle)
    q, k, v = (g.tensor(name=n, dim=dims, stride=strides, data_type=e4m3) for n in "qkv")
    sc = {n: g.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=f32)
          for n in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")}
    o, _, amax_s, amax_o = g.sdpa_fp8(
        q=q, k=k, v=v, descale_q=sc["descale_q"], descale_k=sc["descale_k"],
        descale_v=sc["descale_v"], descale_s=sc["descale_s"], scale_s=sc["scale_s"],
        scale_o=sc["scale_o"], generate_stats=False, attn_scale=1.0 / math.sqrt(d),
        use_causal_mask=causal, name="sdpa_fp8")
    o.set_output(True).set_dim(dims).set_stride(strides).set_data_type(out_type)
    for t in (amax_s, amax_o):
        t.set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(f32)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    g.check_support()
    g.build_plans()
    return g, dict(q=q, k=k, v=v, o=o, amax_s=amax_s, amax_o=amax_o, **sc)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", required=True)
    p.add_argument("--merge", help="a flashattn-bench JSON whose records join this file")
    p.add_argument("--hdims", type=peers_sdpa.int_list, default=list(peers_sdpa.HDIMS))
    p.add_argument("--seqlens", type=peers_sdpa.int_list, default=list(peers_sdpa.SEQLENS))
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args(argv)
    import torch
    import cudnn

    handle = cudnn.create_handle()
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    out = {"device": torch.cuda.get_device_name(0), "sm_clock_mhz": peers_sdpa.sm_clock_mhz(torch),
           "host": peers_sdpa.cpu_model(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "command": " ".join(sys.argv), "torch": torch.__version__,
           "cudnn": cudnn.backend_version(), "cudnn_frontend": cudnn.__version__, "mode": "fwd",
           "records": []}
    if args.merge:
        with open(args.merge) as f:
            ours = json.load(f)
        out["merged_from"] = {k: ours.get(k) for k in ("command", "date", "device", "git")}
        out["records"].extend(ours.get("records", []))

    def save():
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)

    dev = "cuda"
    one = lambda x: torch.full((1, 1, 1, 1), x, device=dev, dtype=torch.float32)  # noqa: E731
    for hd in args.hdims:
        for seq in args.seqlens:
            for causal in (False, True):
                batch, heads = peers_sdpa.TOKENS // seq, peers_sdpa.HIDDEN // hd
                rec = {"kernel": "cudnn_fp8", "mode": "fwd", "dtype": "e4m3", "batch": batch,
                       "heads": heads, "kv_heads": heads, "seqlen_q": seq, "seqlen_k": seq,
                       "hdim": hd, "hdim_v": hd, "causal": causal, "window": [-1, -1],
                       "ms": None, "ms_min": None, "iters": 0, "tflops": None, "ok": False}
                flops = 4.0 * batch * heads * seq * seq * hd / (2 if causal else 1)
                try:
                    graph, tensors, out_name = None, None, None
                    for name, dt in (("bf16", cudnn.data_type.BFLOAT16),
                                     ("e4m3", cudnn.data_type.FP8_E4M3)):
                        try:
                            graph, tensors = build(cudnn, handle, batch, seq, heads, hd, causal, dt)
                            out_name = name
                            break
                        except Exception as e:  # noqa: BLE001 (Hopper: bf16 O refused)
                            rec.setdefault("refused", {})[name] = str(e).splitlines()[0][:160]
                    if graph is None:
                        raise RuntimeError("no cuDNN FP8 plan")
                    rec["out_dtype"] = out_name
                    ws = torch.empty(graph.get_workspace_size(), device=dev, dtype=torch.uint8)
                    set_bytes = 3 * batch * seq * heads * hd
                    nsets = max(1, min(peers_sdpa.MAX_SETS, -(-peers_sdpa.ROTATION_BYTES // set_bytes)))
                    o_dtype = torch.bfloat16 if out_name == "bf16" else torch.float8_e4m3fn
                    packs = []
                    for _ in range(nsets):
                        x = [torch.randn(batch, seq, heads, hd, device=dev) for _ in range(3)]
                        amax = [t.abs().amax().clamp_min(1e-6) for t in x]
                        q8, k8, v8 = ((t * (FP8_MAX / a)).to(torch.float8_e4m3fn)
                                      for t, a in zip(x, amax))
                        t = tensors
                        packs.append({
                            t["q"]: q8, t["k"]: k8, t["v"]: v8,
                            t["descale_q"]: (amax[0] / FP8_MAX).reshape(1, 1, 1, 1),
                            t["descale_k"]: (amax[1] / FP8_MAX).reshape(1, 1, 1, 1),
                            t["descale_v"]: (amax[2] / FP8_MAX).reshape(1, 1, 1, 1),
                            t["descale_s"]: one(1.0 / FP8_MAX), t["scale_s"]: one(FP8_MAX),
                            t["scale_o"]: one(1.0),
                            t["o"]: torch.empty(batch, seq, heads, hd, device=dev, dtype=o_dtype),
                            t["amax_s"]: one(0.0), t["amax_o"]: one(0.0)})
                        del x

                    def run(i):
                        graph.execute(packs[i], ws, handle=handle)

                    ms, ms_min, iters = peers_sdpa.measure(torch, run, nsets, args.iters,
                                                           args.warmup)
                    rec.update(ms=ms, ms_min=ms_min, iters=iters,
                               tflops=flops / (ms * 1e-3) / 1e12, ok=True)
                except Exception as e:  # noqa: BLE001
                    rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                finally:
                    packs = None
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                out["records"].append(rec)
                save()
                tail = (f"{rec['tflops']:.1f} TFLOP/s (O {rec.get('out_dtype')})" if rec["ok"]
                        else rec.get("error"))
                print(f"cudnn_fp8 hd{hd} s{seq}{' causal' if causal else ''}: {tail}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
