#!/usr/bin/env python3
"""Decode beside FlashInfer and a plain read of the same bytes, each timed inside a CUDA graph.

Serving frameworks replay decode steps from CUDA graphs, so per-call launch cost is not what a user pays;
this times every contender the same way: one graph holding R rounds over S distinct buffer sets (so L2
never holds the cache), replayed, time per call = graph time / (R*S). Contenders:
  ours       flashattn.flash_attn_with_kvcache, contiguous cache       (needs flashattn importable)
  ours_p16   the same with a paged cache, page 16, shuffled pages
  ours_p16_fp8  the same with the pages in FP8 e4m3 (k_scale, v_scale per tensor; flashattn's copy
             of ../shared/peers/decode_graph_bench.py adds this contender, issue 20)
  fi_p16     FlashInfer BatchDecodeWithPagedKVCacheWrapper, page 16     (needs flashinfer importable)
  fi_p16_fp8 the same with the cache in FP8 e4m3 (half the bytes; GB/s counts the bytes really read)
  read       torch.amax over the K and V bytes (a plain streaming read: the floor)
Prints one line per (config, contender): us, GB/s of K+V bytes, % of the read's GB/s. --json writes records
in flashattn's bench schema (kernel, batch, heads, kv_heads, seqlen_k, hdim, page_size, ms, gbps, ...).
usage: decode_graph_bench.py [--contenders ours,ours_p16,fi_p16,read] [--json F] [--grid decode|quick]
"""
import argparse, json, math, time, datetime
import torch

GRIDS = {  # (batch, heads_q, heads_kv, seqlen_k, head_dim)
    "decode": [(1, 32, 8, 8192, 128), (1, 32, 8, 16384, 128), (1, 32, 8, 32768, 128), (1, 32, 8, 65536, 128),
               (8, 32, 8, 4096, 128), (8, 32, 8, 8192, 128), (32, 32, 8, 4096, 128), (64, 32, 8, 8192, 128),
               (128, 32, 8, 2048, 128), (8, 32, 32, 8192, 128), (1, 32, 32, 16384, 128),
               (8, 32, 8, 8192, 64), (1, 32, 8, 32768, 64)],
    "quick": [(1, 32, 8, 16384, 128), (8, 32, 8, 4096, 128)],
}
dt = torch.bfloat16


def graph_time(calls, rounds=8):
    """calls: list of zero-arg callables (one per buffer set). Returns ms per call."""
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for c in calls: c()
    torch.cuda.current_stream().wait_stream(s); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(rounds):
            for c in calls: c()
    for _ in range(3): g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2] / (rounds * len(calls))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--contenders", default="ours,ours_p16,ours_p16_fp8,fi_p16,fi_p16_fp8,read")
    ap.add_argument("--grid", default="decode")
    ap.add_argument("--json")
    a = ap.parse_args()
    who = a.contenders.split(",")
    recs = []
    fi_ws = None
    for (b, hq, hk, L, d) in GRIDS[a.grid]:
        kv_bytes = 2 * b * L * hk * d * 2
        sets = max(2, min(8, math.ceil(200e6 / kv_bytes)))  # > 4x the 50 MB L2 across the graph
        res = {}
        q = [torch.randn(b, 1, hq, d, device="cuda", dtype=dt) for _ in range(sets)]
        lens = torch.full((b,), L, dtype=torch.int32, device="cuda")
        if "ours" in who or "read" in who:
            kc = [torch.randn(b, L, hk, d, device="cuda", dtype=dt) for _ in range(sets)]
            vc = [torch.randn(b, L, hk, d, device="cuda", dtype=dt) for _ in range(sets)]
            if "ours" in who:
                from flashattn import flash_attn_with_kvcache
                res["ours"] = graph_time([lambda i=i: flash_attn_with_kvcache(q[i], kc[i], vc[i], cache_seqlens=lens)
                                          for i in range(sets)])
            if "read" in who:
                res["read"] = graph_time([lambda i=i: (kc[i].amax(), vc[i].amax()) for i in range(sets)])
            del kc, vc
        page = 16; ppr = L // page
        if any(w in who for w in ("ours_p16", "ours_p16_fp8", "fi_p16", "fi_p16_fp8")):
            kvp = [torch.randn(b * ppr, 2, page, hk, d, device="cuda", dtype=dt) for _ in range(sets)]
            perm = [torch.randperm(b * ppr, device="cuda").to(torch.int32) for _ in range(sets)]
            if "ours_p16" in who:
                from flashattn import flash_attn_with_kvcache
                kp = [x[:, 0] for x in kvp]; vp = [x[:, 1] for x in kvp]
                bt = [p.view(b, ppr) for p in perm]
                res["ours_p16"] = graph_time([lambda i=i: flash_attn_with_kvcache(q[i], kp[i], vp[i], cache_seqlens=lens,
                                                                                  block_table=bt[i]) for i in range(sets)])
            if "ours_p16_fp8" in who:
                from flashattn import flash_attn_with_kvcache
                # The same pages in e4m3 with per-tensor scales (the values are N(0, 1): 1.0 keeps
                # them inside e4m3's range; the kernel reads the bytes whatever the scale is).
                kvp8 = [x.to(torch.float8_e4m3fn) for x in kvp]
                kp8 = [x[:, 0] for x in kvp8]; vp8 = [x[:, 1] for x in kvp8]
                bt = [p.view(b, ppr) for p in perm]
                ks = torch.ones(1, device="cuda", dtype=torch.float32)
                vs = torch.ones(1, device="cuda", dtype=torch.float32)
                res["ours_p16_fp8"] = graph_time([lambda i=i: flash_attn_with_kvcache(
                    q[i], kp8[i], vp8[i], cache_seqlens=lens, block_table=bt[i], k_scale=ks, v_scale=vs)
                    for i in range(sets)])
                del kvp8, kp8, vp8
            for name, kvt in (("fi_p16", dt), ("fi_p16_fp8", torch.float8_e4m3fn)):
                if name not in who:
                    continue
                import flashinfer
                if fi_ws is None:
                    fi_ws = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
                wr = flashinfer.BatchDecodeWithPagedKVCacheWrapper(fi_ws, "NHD", use_cuda_graph=True,
                        paged_kv_indptr_buffer=torch.arange(0, b + 1, device="cuda", dtype=torch.int32) * ppr,
                        paged_kv_indices_buffer=perm[0].clone(),
                        paged_kv_last_page_len_buffer=torch.full((b,), page, device="cuda", dtype=torch.int32))
                wr.plan(torch.arange(0, b + 1, device="cuda", dtype=torch.int32) * ppr, perm[0],
                        torch.full((b,), page, device="cuda", dtype=torch.int32), hq, hk, d, page,
                        pos_encoding_mode="NONE", q_data_type=dt, kv_data_type=kvt)
                # one plan serves every set: the page ids differ per set only through the data they point at
                qf = [x.view(b, hq, d) for x in q]
                kvs = kvp if kvt == dt else [x.to(kvt) for x in kvp]
                try:
                    res[name] = graph_time([lambda i=i: wr.run(qf[i], kvs[i]) for i in range(sets)])
                except Exception as e:  # a module not prebuilt with JIT off, say
                    print(f"{name}: unavailable here: {str(e).splitlines()[0][:120]}", flush=True)
                del kvs
            del kvp
        torch.cuda.empty_cache()
        rd = res.get("read")
        for k, ms in res.items():
            nbytes = kv_bytes // 2 if k.endswith("fp8") else kv_bytes
            gbps = nbytes / ms / 1e6
            pct = f"{100 * rd / ms:5.1f}% of read" if rd else ""
            print(f"{k:9s} b{b:<4d} {hq}/{hk} sk{L:<6d} d{d}: {ms * 1e3:8.2f} us {gbps:7.0f} GB/s {pct}", flush=True)
            recs.append(dict(kernel=f"graph_{k}", mode="decode", dtype="bf16", batch=b, heads=hq, kv_heads=hk,
                             seqlen_q=1, seqlen_k=L, hdim=d, hdim_v=d, causal=False, window=[-1, -1],
                             page_size=16 if "p16" in k else 0, ms=ms, bytes=nbytes, gbps=gbps,
                             kv_dtype="e4m3" if k.endswith("fp8") else "bf16",
                             timing="cuda_graph", ok=True))
    if a.json:
        json.dump(dict(device=torch.cuda.get_device_name(), date=datetime.datetime.utcnow().isoformat() + "Z",
                       command="decode_graph_bench.py " + a.contenders, records=recs), open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
