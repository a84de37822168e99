#include "decode.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "flashattn/reference.h"
#include "timing.h"

namespace flashattn::bench {
namespace {

struct DecodeWorkload {
  Workload w;  // seqlen_q: query tokens; seqlen_k: tokens in each entry's cache
  int page_size = 0;
  int num_splits = 0;
  int rotary_dim = 0;  // rotary embedding of q (0: off); cache full, so positions seqlen_k + i
  bool rotary_interleaved = false;
  bool graph = false;  // --graph: time replays of a CUDA graph instead of each call by events
  bool kv_e4m3 = false;  // --kv-dtype e4m3: an FP8 cache with per-tensor scales kKScale, kVScale
};

// --kv-dtype e4m3's scales: powers of two, so that the dequantised cache --check compares against
// is exact in the 16-bit dtype.
constexpr float kKScale = 0.5f, kVScale = 0.25f;

// The decode grid: PEERS.md's six shapes (32 query / 8 KV heads, hd 128), the shapes of the
// bandwidth bar (batch 1 at 16k/32k keys, batch 8 at 4k), 32/32 heads, head dim 64, and two
// paged caches.
std::vector<DecodeWorkload> decode_workloads(const Options& o) {
  auto make = [&](int batch, int heads, int kv_heads, int seqlen_k, int hdim, int page_size) {
    DecodeWorkload d;
    d.w.dtype = o.dtype;
    d.w.batch = batch;
    d.w.heads = heads;
    d.w.kv_heads = kv_heads;
    d.w.seqlen_q = o.sweep_decode ? 1 : o.decode_q;
    d.w.seqlen_k = seqlen_k;
    d.w.hdim = d.w.hdim_v = hdim;
    d.w.causal = o.causal;
    d.w.window_left = o.window_left;
    d.w.window_right = o.window_right;
    d.w.sinks = o.sinks;
    d.w.softcap = o.softcap;
    d.page_size = page_size;
    d.num_splits = o.num_splits;
    d.rotary_dim = o.rotary_dim;
    d.rotary_interleaved = o.rotary_interleaved;
    d.graph = o.graph;
    d.kv_e4m3 = o.kv_e4m3;
    return d;
  };
  if (!o.sweep_decode) {
    return {make(o.batch, o.heads, o.kv_heads > 0 ? o.kv_heads : o.heads, o.seqlen_k, o.hdim,
                 o.page_size)};
  }
  std::vector<DecodeWorkload> g;
  for (auto [b, sk] : {std::pair{1, 8192},
                       {1, 65536},
                       {8, 8192},
                       {32, 4096},
                       {64, 8192},
                       {128, 2048},
                       {1, 16384},
                       {1, 32768},
                       {8, 4096}}) {
    g.push_back(make(b, 32, 8, sk, 128, 0));
  }
  g.push_back(make(8, 32, 32, 8192, 128, 0));
  g.push_back(make(1, 32, 32, 16384, 128, 0));
  g.push_back(make(8, 32, 8, 8192, 64, 0));
  g.push_back(make(1, 32, 8, 32768, 64, 0));
  g.push_back(make(8, 32, 8, 8192, 128, 16));
  g.push_back(make(1, 32, 8, 65536, 128, 256));
  return g;
}

struct DecodeSet {
  Block q, k, v;
};

// Buffers of one workload: input sets rotated so that the L2 cannot hold them, shared outputs,
// cache_seqlens (every entry full) and a shuffled page table shared by the sets.
struct DecodeBuffers {
  DecodeWorkload d;
  std::vector<DecodeSet> sets;
  Block o, lse, seqlens, table, sinks, rotary_cos, rotary_sin, k_scale, v_scale;
  std::vector<int32_t> host_table;
  // --rotary-dim: standard tables (theta 10000) for positions 0 .. seqlen_k + seqlen_q - 1.
  std::vector<uint16_t> host_cos, host_sin;
  int seqlen_ro = 0;
  std::vector<float> host_sinks;  // --sinks: one logit per query head in [-4, 4]
  int max_pages = 0, num_pages = 0;
  size_t q_bytes = 0, cache_bytes = 0;

  Status allocate(const DecodeWorkload& dw, uint64_t seed) {
    d = dw;
    const Workload& w = d.w;
    const size_t es = 2;
    q_bytes = size_t(w.batch) * w.seqlen_q * w.heads * w.hdim * es;
    size_t rows = size_t(w.batch) * w.seqlen_k;  // cache tokens
    if (d.page_size > 0) {
      max_pages = (w.seqlen_k + d.page_size - 1) / d.page_size;
      num_pages = w.batch * max_pages;
      rows = size_t(num_pages) * d.page_size;
      host_table.resize(size_t(num_pages));
      std::iota(host_table.begin(), host_table.end(), 0);
      std::mt19937_64 rng(seed);
      std::shuffle(host_table.begin(), host_table.end(), rng);
    }
    cache_bytes = rows * w.kv_heads * w.hdim * (d.kv_e4m3 ? 1 : es);
    if (d.kv_e4m3) {
      for (auto [blk, scale] : {std::pair{&k_scale, kKScale}, {&v_scale, kVScale}}) {
        if (Status st = blk->allocate(Memory::device, 4); !st.ok()) return st;
        if (Status st = cuda_status(cudaMemcpy(blk->get(), &scale, 4, cudaMemcpyHostToDevice),
                                    "cudaMemcpy(kv scales)");
            !st.ok())
          return st;
      }
    }
    if (Status st = o.allocate(Memory::device, q_bytes); !st.ok()) return st;
    if (Status st = lse.allocate(Memory::device, size_t(w.batch) * w.heads * w.seqlen_q * 4);
        !st.ok())
      return st;
    if (Status st = seqlens.allocate(Memory::device, size_t(w.batch) * 4); !st.ok()) return st;
    if (w.sinks) {
      host_sinks.resize(size_t(w.heads));
      std::mt19937_64 gen(seed ^ 0x51'4b);
      std::uniform_real_distribution<float> uniform(-4.f, 4.f);
      for (float& x : host_sinks) x = uniform(gen);
      if (Status st = sinks.allocate(Memory::device, host_sinks.size() * 4); !st.ok()) return st;
      if (Status st = cuda_status(cudaMemcpy(sinks.get(), host_sinks.data(),
                                             host_sinks.size() * 4, cudaMemcpyHostToDevice),
                                  "cudaMemcpy(sinks)");
          !st.ok())
        return st;
    }
    if (d.rotary_dim > 0) {
      seqlen_ro = w.seqlen_k + w.seqlen_q;
      host_cos.resize(size_t(seqlen_ro) * std::max(d.rotary_dim / 2, 1));
      host_sin.resize(host_cos.size());
      reference::rotary_tables(w.dtype, seqlen_ro, d.rotary_dim, 10000.0, host_cos.data(),
                               host_sin.data());
      for (auto [blk, host] : {std::pair{&rotary_cos, &host_cos}, {&rotary_sin, &host_sin}}) {
        if (Status st = blk->allocate(Memory::device, host->size() * 2); !st.ok()) return st;
        if (Status st = cuda_status(
                cudaMemcpy(blk->get(), host->data(), host->size() * 2, cudaMemcpyHostToDevice),
                "cudaMemcpy(rotary tables)");
            !st.ok())
          return st;
      }
    }
    const std::vector<int32_t> lens(size_t(w.batch), w.seqlen_k);
    if (Status st = cuda_status(
            cudaMemcpy(seqlens.get(), lens.data(), lens.size() * 4, cudaMemcpyHostToDevice),
            "cudaMemcpy");
        !st.ok())
      return st;
    if (d.page_size > 0) {
      if (Status st = table.allocate(Memory::device, host_table.size() * 4); !st.ok()) return st;
      if (Status st = cuda_status(cudaMemcpy(table.get(), host_table.data(), host_table.size() * 4,
                                             cudaMemcpyHostToDevice),
                                  "cudaMemcpy");
          !st.ok())
        return st;
    }
    const size_t set_bytes = q_bytes + 2 * cache_bytes;
    size_t want =
        std::clamp<size_t>((kRotationBytes + set_bytes - 1) / set_bytes, 1, kMaxInputSets);
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess)
      want = std::clamp<size_t>(free_bytes * 3 / 4 / set_bytes, 1, want);
    for (size_t i = 0; i < want; ++i) {
      DecodeSet s;
      Status st = s.q.allocate(Memory::device, q_bytes);
      if (st.ok()) st = s.k.allocate(Memory::device, cache_bytes);
      if (st.ok()) st = s.v.allocate(Memory::device, cache_bytes);
      if (!st.ok()) {
        if (sets.empty()) return st;
        break;
      }
      sets.push_back(std::move(s));
    }
    // Set 0 from N(0, 1), the others copies of it (residency depends on addresses, not values).
    // Caches of gigabytes repeat a 16 MB random block: drawing every value on the host would
    // take seconds per configuration of the device's time.
    // --kv-dtype e4m3: the caches are that block quantised by decode's rule (reference.h).
    for (auto [blk, salt] : {std::pair{&sets[0].q, 1}, {&sets[0].k, 2}, {&sets[0].v, 3}}) {
      const bool e4m3 = d.kv_e4m3 && salt > 1;
      const size_t es_blk = e4m3 ? 1 : 2;
      const size_t n = blk->bytes() / es_blk;
      std::vector<uint16_t> host(std::min<size_t>(n, size_t{8} << 20));
      reference::fill_normal(host.data(), std::ssize(host), w.dtype, seed * 7 + salt);
      std::vector<uint8_t> bytes(host.size() * es_blk);
      if (e4m3) {
        reference::quantize_e4m3(w.dtype, host.data(), std::ssize(host),
                                 salt == 2 ? kKScale : kVScale, bytes.data());
      } else {
        std::memcpy(bytes.data(), host.data(), bytes.size());
      }
      for (size_t at = 0; at < n; at += host.size()) {
        const size_t len = std::min(host.size(), n - at);
        if (Status st = cuda_status(cudaMemcpy(static_cast<uint8_t*>(blk->get()) + at * es_blk,
                                               bytes.data(), len * es_blk, cudaMemcpyHostToDevice),
                                    "cudaMemcpy");
            !st.ok())
          return st;
      }
    }
    for (size_t i = 1; i < sets.size(); ++i) {
      for (auto [dst, src] : {std::pair{&sets[i].q, &sets[0].q},
                              {&sets[i].k, &sets[0].k},
                              {&sets[i].v, &sets[0].v}}) {
        if (Status st = cuda_status(
                cudaMemcpy(dst->get(), src->get(), src->bytes(), cudaMemcpyDeviceToDevice),
                "cudaMemcpy");
            !st.ok())
          return st;
      }
    }
    return Status::success();
  }

  DecodeParams params(int set, cudaStream_t stream) const {
    const Workload& w = d.w;
    DecodeParams p;
    p.dtype = w.dtype;
    p.batch = w.batch;
    p.seqlen_q = w.seqlen_q;
    p.heads_q = w.heads;
    p.heads_kv = w.kv_heads;
    p.head_dim = w.hdim;
    p.causal = w.causal;
    p.window_left = w.window_left;
    p.window_right = w.window_right;
    p.num_splits = d.num_splits;
    if (d.page_size > 0) {
      p.page_table = static_cast<const int32_t*>(table.get());
      p.page_size = d.page_size;
      p.max_pages = max_pages;
      p.num_pages = num_pages;
    } else {
      p.cache_seqlen = w.seqlen_k;
    }
    set_contiguous_layout(p);
    const DecodeSet& s = sets[size_t(set)];
    p.q.data = s.q.get();
    p.k_cache.data = s.k.get();
    p.v_cache.data = s.v.get();
    p.o.data = o.get();
    p.lse = static_cast<float*>(lse.get());
    p.cache_seqlens = static_cast<const int32_t*>(seqlens.get());
    p.sinks = d.w.sinks ? static_cast<const float*>(sinks.get()) : nullptr;
    p.softcap = d.w.softcap;
    if (d.rotary_dim > 0) {
      p.rotary_cos = rotary_cos.get();
      p.rotary_sin = rotary_sin.get();
      p.rotary_dim = d.rotary_dim;
      p.seqlen_ro = seqlen_ro;
      p.rotary_interleaved = d.rotary_interleaved;
    }
    if (d.kv_e4m3) {
      p.cache_dtype = DType::e4m3;
      p.k_scale = static_cast<const float*>(k_scale.get());
      p.v_scale = static_cast<const float*>(v_scale.get());
    }
    p.stream = stream;
    return p;
  }
};

// A 1 GiB device-to-device copy, median of 20: the bandwidth ceiling decode is compared with
// (bytes read plus bytes written per second, as PEERS.md measured it).
Status measure_copy(cudaStream_t stream, double* gbps) {
  constexpr size_t kBytes = size_t{1} << 30;
  Block a, b;
  if (Status st = a.allocate(Memory::device, kBytes); !st.ok()) return st;
  if (Status st = b.allocate(Memory::device, kBytes); !st.ok()) return st;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> ms;
  for (int i = 0; i < 23; ++i) {
    cudaEventRecord(e0, stream);
    cudaMemcpyAsync(b.get(), a.get(), kBytes, cudaMemcpyDeviceToDevice, stream);
    cudaEventRecord(e1, stream);
    if (Status st = cuda_status(cudaEventSynchronize(e1), "copy"); !st.ok()) return st;
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    if (i >= 3) ms.push_back(t);  // three warm-up copies
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  const double med = 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  *gbps = 2.0 * kBytes / (med * 1e-3) / 1e9;
  return Status::success();
}

// One poisoned run on set 0, then the oracle on up to four batch entries (first, last, two
// between), each against its cache gathered densely on the host (and its queries rotated on the
// host with reference::apply_rotary, decode's arithmetic, under --rotary-dim).
Status check_decode(const DecodeBuffers& buf, const RunContext& ctx, CheckSummary& out) {
  const Workload& w = buf.d.w;
  cudaMemsetAsync(buf.o.get(), 0xFF, buf.o.bytes(), ctx.stream);
  cudaMemsetAsync(buf.lse.get(), 0xFF, buf.lse.bytes(), ctx.stream);
  DecodeParams p = buf.params(0, ctx.stream);  // check_indices stays on: the full validation
  if (Status st = decode(p); !st.ok()) return st;
  if (Status st = cuda_status(cudaStreamSynchronize(ctx.stream), "decode run"); !st.ok()) return st;
  auto host = [](const Block& b) {
    std::vector<uint16_t> h(b.bytes() / 2);
    cudaMemcpy(h.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost);
    return h;
  };
  // An e4m3 cache is checked as its dequantised values (exact in the dtype: power-of-two scales).
  auto cache = [&](const Block& b, float scale) {
    if (!buf.d.kv_e4m3) return host(b);
    std::vector<uint8_t> bytes(b.bytes());
    cudaMemcpy(bytes.data(), b.get(), b.bytes(), cudaMemcpyDeviceToHost);
    std::vector<uint16_t> h(bytes.size());
    reference::dequantize_e4m3(bytes.data(), std::ssize(bytes), scale, w.dtype, h.data());
    return h;
  };
  std::vector<uint16_t> q = host(buf.sets[0].q), k = cache(buf.sets[0].k, kKScale),
                        v = cache(buf.sets[0].v, kVScale), o = host(buf.o);
  std::vector<float> lse(buf.lse.bytes() / 4);
  cudaMemcpy(lse.data(), buf.lse.get(), buf.lse.bytes(), cudaMemcpyDeviceToHost);
  if (buf.d.rotary_dim > 0) {  // the cache is full: query token i at seqlen_k (+ i if local)
    const bool per_token = w.causal || w.window_left >= 0 || w.window_right >= 0;
    for (int b = 0; b < w.batch; ++b)
      for (int i = 0; i < w.seqlen_q; ++i)
        for (int h = 0; h < w.heads; ++h) {
          uint16_t* row = q.data() + ((size_t(b) * w.seqlen_q + i) * w.heads + h) * w.hdim;
          reference::apply_rotary(w.dtype, buf.host_cos.data(), buf.host_sin.data(),
                                  buf.d.rotary_dim, buf.d.rotary_interleaved,
                                  w.seqlen_k + (per_token ? i : 0), row, row, w.hdim);
        }
  }
  std::vector<int> entries = {0, w.batch / 3, 2 * w.batch / 3, w.batch - 1};
  entries.erase(std::unique(entries.begin(), entries.end()), entries.end());
  out.ran = true;
  out.result = {};
  out.result.ok = true;
  const size_t row = size_t(w.kv_heads) * w.hdim;  // elements of one cache token
  for (int b : entries) {
    std::vector<uint16_t> kb(size_t(w.seqlen_k) * row), vb(kb.size());
    for (int j = 0; j < w.seqlen_k; ++j) {
      size_t src = (size_t(b) * w.seqlen_k + j) * row;
      if (buf.d.page_size > 0) {
        const int page = buf.host_table[size_t(b) * buf.max_pages + j / buf.d.page_size];
        src = (size_t(page) * buf.d.page_size + j % buf.d.page_size) * row;
      }
      std::copy_n(k.begin() + src, row, kb.begin() + j * row);
      std::copy_n(v.begin() + src, row, vb.begin() + j * row);
    }
    ForwardParams f;
    f.dtype = w.dtype;
    f.batch = 1;
    f.seqlen_q = w.seqlen_q;
    f.seqlen_k = w.seqlen_k;
    f.heads_q = w.heads;
    f.heads_kv = w.kv_heads;
    f.head_dim = w.hdim;
    f.causal = w.causal;
    f.window_left = w.window_left;
    f.window_right = w.window_right;
    set_contiguous_layout(f);
    const size_t qoff = size_t(b) * w.seqlen_q * w.heads * w.hdim;
    f.q.data = q.data() + qoff;
    f.k.data = kb.data();
    f.v.data = vb.data();
    f.o.data = o.data() + qoff;
    f.lse = lse.data() + size_t(b) * w.heads * w.seqlen_q;
    f.sinks = w.sinks ? buf.host_sinks.data() : nullptr;
    f.softcap = w.softcap;
    const reference::CheckResult r = reference::check(f);
    out.rows += int64_t(w.heads) * w.seqlen_q;
    reference::CheckResult& t = out.result;
    t.max_err = std::max(t.max_err, r.max_err);
    t.max_err_pt = std::max(t.max_err_pt, r.max_err_pt);
    t.atol = std::max(t.atol, r.atol);
    t.lse_max_err = std::max(t.lse_max_err, r.lse_max_err);
    t.lse_max_err_pt = std::max(t.lse_max_err_pt, r.lse_max_err_pt);
    t.lse_atol = std::max(t.lse_atol, r.lse_atol);
    t.checked += r.checked;
    t.not_finite += r.not_finite;
    if (!r.ok && t.ok) t.detail = "entry " + std::to_string(b) + ": " + r.detail;
    t.ok = t.ok && r.ok;
  }
  out.sampled = entries.size() < size_t(w.batch);
  return Status::success();
}

void run_one(const DecodeWorkload& dw, const RunContext& ctx, double copy_gbps, Record& rec) {
  const Workload& w = dw.w;
  DecodeInfo info;
  info.page_size = dw.page_size;
  info.num_splits = dw.num_splits;
  info.rotary_dim = dw.rotary_dim;
  info.rotary_interleaved = dw.rotary_interleaved;
  info.kv_bytes = 2.0 * w.batch * w.seqlen_k * w.kv_heads * w.hdim * (dw.kv_e4m3 ? 1 : 2);
  info.kv_e4m3 = dw.kv_e4m3;
  info.copy_gbps = copy_gbps;
  info.graph = dw.graph;
  rec.decode = info;
  DecodeBuffers buf;
  if (Status st = buf.allocate(dw, ctx.seed); !st.ok()) {
    rec.error = std::string(status_code_name(st.code)) + ": " + st.message;
    return;
  }
  std::vector<DecodeParams> params;
  for (int s = 0; s < int(buf.sets.size()); ++s) params.push_back(buf.params(s, ctx.stream));
  if (Status st = can_implement(params[0]); !st.ok()) {  // the full validation, indices included
    rec.error = std::string(status_code_name(st.code)) + ": " + st.message;
    return;
  }
  // Timed calls skip the index copy: it would put a synchronising memcpy inside the timing.
  for (DecodeParams& p : params) p.check_indices = false;
  rec.run_failed = true;
  std::vector<cudaEvent_t> events;
  const auto ensure_events = [&](size_t count) -> Status {
    while (events.size() < count) {
      cudaEvent_t e = nullptr;
      if (Status st = cuda_status(cudaEventCreate(&e), "cudaEventCreate"); !st.ok()) return st;
      events.push_back(e);
    }
    return Status::success();
  };
  int next = 0;
  const TimedBatch per_call = [&](int n, std::vector<double>& ms) -> Status {
    if (Status st = ensure_events(size_t(2 * n)); !st.ok()) return st;
    for (int i = 0; i < n; ++i) {
      cudaEventRecord(events[2 * i], ctx.stream);
      if (Status st = decode(params[size_t(next)]); !st.ok()) return st;
      next = (next + 1) % int(params.size());
      cudaEventRecord(events[2 * i + 1], ctx.stream);
    }
    if (Status st = cuda_status(cudaEventSynchronize(events[2 * n - 1]), "decode run"); !st.ok())
      return st;
    for (int i = 0; i < n; ++i) {
      float t = 0;
      cudaEventElapsedTime(&t, events[2 * i], events[2 * i + 1]);
      ms.push_back(t);
    }
    return Status::success();
  };
  // --graph: one CUDA graph holding kGraphRounds rounds over every input set (as serving replays
  // decode steps, and as ../shared/peers/decode_graph_bench.py times FlashInfer); a measured
  // iteration is one replay, its time divided by the calls it holds. Launch cost is then what a
  // graph pays, not what a host call pays.
  constexpr int kGraphRounds = 8;
  cudaGraphExec_t exec = nullptr;
  const int calls_per_replay = kGraphRounds * int(params.size());
  const TimedBatch per_replay = [&](int n, std::vector<double>& ms) -> Status {
    if (exec == nullptr) {
      // One eager call first: what a call sets up once (the workspace pool) cannot be created
      // while the stream is capturing.
      if (Status st = decode(params[0]); !st.ok()) return st;
      if (Status st = cuda_status(cudaStreamSynchronize(ctx.stream), "decode run"); !st.ok())
        return st;
      cudaGraph_t graph = nullptr;
      if (Status st = cuda_status(
              cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal), "capture");
          !st.ok())
        return st;
      Status captured = Status::success();
      for (int r = 0; r < kGraphRounds && captured.ok(); ++r)
        for (const DecodeParams& p : params)
          if (captured.ok()) captured = decode(p);
      const Status ended = cuda_status(cudaStreamEndCapture(ctx.stream, &graph), "capture");
      if (!captured.ok()) return captured;
      if (!ended.ok()) return ended;
      const Status inst = cuda_status(cudaGraphInstantiate(&exec, graph, 0), "graph instantiate");
      cudaGraphDestroy(graph);
      if (!inst.ok()) return inst;
    }
    if (Status st = ensure_events(2); !st.ok()) return st;
    for (int i = 0; i < n; ++i) {
      cudaEventRecord(events[0], ctx.stream);
      if (Status st = cuda_status(cudaGraphLaunch(exec, ctx.stream), "graph launch"); !st.ok())
        return st;
      cudaEventRecord(events[1], ctx.stream);
      if (Status st = cuda_status(cudaEventSynchronize(events[1]), "graph replay"); !st.ok())
        return st;
      float t = 0;
      cudaEventElapsedTime(&t, events[0], events[1]);
      ms.push_back(double(t) / calls_per_replay);
    }
    return Status::success();
  };
  TimingPolicy policy;
  policy.iters = ctx.iters;
  policy.warmup = ctx.warmup_gpu;
  const Status timed = measure(policy, dw.graph ? per_replay : per_call, rec.timing);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  if (!timed.ok()) {
    rec.error = std::string(status_code_name(timed.code)) + ": " + timed.message;
    return;
  }
  rec.ran = true;
  rec.tflops = rec.flops.flops / (rec.timing.median_ms * 1e-3) / 1e12;
  rec.decode->gbps = info.kv_bytes / (rec.timing.median_ms * 1e-3) / 1e9;
  if (ctx.check) {
    if (Status st = check_decode(buf, ctx, rec.check); !st.ok()) {
      rec.error = std::string(status_code_name(st.code)) + ": " + st.message;
      return;
    }
    if (!rec.check.result.ok) {
      rec.error = "check failed: " + rec.check.result.detail;
      return;
    }
  }
  rec.ok = true;
  rec.run_failed = false;
}

void print_row(const Record& r) {
  const Workload& w = r.w;
  const DecodeInfo& d = *r.decode;
  std::printf("%-7s %-5s %5d %4d %4d %3d %7d %4d %5d %6d ", "decode", dtype_name(w.dtype), w.batch,
              w.heads, w.kv_heads, w.seqlen_q, w.seqlen_k, w.hdim, d.page_size, d.num_splits);
  if (r.ran) {
    std::printf("%9.4f %8.0f %6.1f%% ", r.timing.median_ms, d.gbps, 100.0 * d.gbps / d.copy_gbps);
  } else {
    std::printf("%9s %8s %7s ", "-", "-", "-");
  }
  const bool failed = r.ran && r.check.ran && !r.check.result.ok;
  std::printf("%9s %4s\n",
              r.check.ran ? std::to_string(r.check.result.max_err).substr(0, 9).c_str() : "-",
              r.ok     ? "ok"
              : failed ? "FAIL"
                       : "ERR");
  if (r.check.ran) {
    const reference::CheckResult& c = r.check.result;
    std::printf(
        "    check: max_err %.3e max_err_pt %.3e atol %.3e | lse_err %.3e (pt %.3e) | %lld rows of "
        "%s | %s\n",
        c.max_err, c.max_err_pt, c.atol, c.lse_max_err, c.lse_max_err_pt,
        static_cast<long long>(r.check.rows), r.check.sampled ? "sampled entries" : "every entry",
        c.ok ? "PASS" : "FAIL");
  }
  if (!r.error.empty()) std::printf("    %s\n", r.error.c_str());
  std::fflush(stdout);
}

}  // namespace

int run_decode(const Options& opts, const RunInfo& info, const RunContext& ctx) {
  if (ctx.device_count == 0 || ctx.stream == nullptr) {
    std::fprintf(stderr, "flashattn-bench: --decode needs a CUDA device\n");
    return 1;
  }
  double copy_gbps = 0;
  if (Status st = measure_copy(ctx.stream, &copy_gbps); !st.ok()) {
    std::fprintf(stderr, "flashattn-bench: copy bandwidth: %s\n", st.message.c_str());
    return 1;
  }
  std::printf("# device: %s", info.device.c_str());
  if (info.sm_clock_mhz) std::printf(" (peak SM clock %d MHz)", *info.sm_clock_mhz);
  std::printf("\n# seed: %llu\n# device-to-device copy (1 GiB, read+write): %.0f GB/s\n",
              static_cast<unsigned long long>(info.seed), copy_gbps);
  if (opts.kv_e4m3) {
    std::printf("# kv cache: e4m3, per-tensor scales k %g, v %g (GB/s counts its bytes)\n", kKScale,
                kVScale);
  }
  if (opts.rotary_dim > 0) {
    std::printf("# rotary: q's first %d dims, %s, theta 10000\n", opts.rotary_dim,
                opts.rotary_interleaved ? "interleaved pairs (GPT-J)" : "halves (GPT-NeoX)");
  }
  std::printf("%-7s %-5s %5s %4s %4s %3s %7s %4s %5s %6s %9s %8s %7s %9s %4s\n", "kernel", "dtype",
              "b", "hq", "hkv", "sq", "sk", "d", "page", "splits", "ms", "GB/s", "%copy", "max_err",
              "ok");
  std::vector<Record> records;
  int exit_code = 0;
  for (const DecodeWorkload& dw : decode_workloads(opts)) {
    Record rec;
    rec.w = dw.w;
    rec.kernel = "decode";
    rec.flops = forward_flops(dw.w);
    rec.iters_requested = ctx.iters;
    try {
      run_one(dw, ctx, copy_gbps, rec);
    } catch (const std::exception& e) {
      rec.error = std::string("exception: ") + e.what();
    }
    print_row(rec);
    if (!rec.ok) exit_code = 1;
    records.push_back(std::move(rec));
    if (!opts.json_path.empty() && !write_json(opts.json_path, info, records)) exit_code = 1;
  }
  return exit_code;
}

}  // namespace flashattn::bench
