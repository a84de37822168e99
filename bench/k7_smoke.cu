// K7 straight through fa3::run_forward_fp8 (below the API, so it ran before the API and CLI knew
// e4m3): 24 shapes against an fp64 reference of the dequantised inputs (a smoke bound, not the
// FP8 oracle of tests/test_gpu_fp8.cpp), then K7 timed beside K6 bf16 on the standard grid (CUDA
// events, warm-up, median of 20, inputs rotated; e4m3 inputs N(0, 1)). Not built by CMake; on this machine:
//   nvcc -DFLASHATTN_LINEAGE=1 -Iinclude -Isrc -isystem=.deps/cutlass/cutlass_library/source/include \
//     -O3 -DNDEBUG --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -std=c++20 \
//     -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED \
//     bench/k7_smoke.cu src/common/workspace.cu -o .devbin-k7/k7_smoke
// then on the GPU: k7_smoke (all), k7_smoke small (9 shapes: the sanitizer runs), k7_smoke bench,
// k7_smoke one D SEQLEN CAUSAL (one configuration, for ncu).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "common/host_dtype.h"
#include "kernels/fa3_sm90/launch.cuh"
#include "cuda_exit.cuh"

using namespace flashattn;

// A/B variants: -DK7_SMOKE_HDIM=D builds one head dim (a minute or two to compile), and
// -DK7_SMOKE_NO_K6 leaves K6 out (bench times K7 alone; check() then bounds K7's error by
// 0.1 |ref|max, a sanity bound only). bench/results/2026-11-25_h100_k7_ab_*.txt were measured so,
// each variant compiled against a copy of src/ with the change under test.
#ifndef K7_SMOKE_HDIM
#define K7_SMOKE_HDIM 0
#endif
#ifdef K7_SMOKE_NO_K6
constexpr bool kWithK6 = false;
#else
constexpr bool kWithK6 = true;
#endif
constexpr bool built(int d) { return K7_SMOKE_HDIM == 0 || K7_SMOKE_HDIM == d; }

namespace flashattn::fa3 {
#define K7_SMOKE_INSTANTIATE(D)                                                                  \
  template Status run_forward_fp8<cutlass::bfloat16_t, D, ScheduleK6>(const Problem&,            \
                                                                      const DebugOptions&);      \
  K7_SMOKE_INSTANTIATE_K6(D)
#ifdef K7_SMOKE_NO_K6
#define K7_SMOKE_INSTANTIATE_K6(D)
#else
#define K7_SMOKE_INSTANTIATE_K6(D) \
  template Status run_forward<cutlass::bfloat16_t, D, D, ScheduleK6>(const Problem&, const DebugOptions&);
#endif
#if K7_SMOKE_HDIM == 0 || K7_SMOKE_HDIM == 64
K7_SMOKE_INSTANTIATE(64)
#endif
#if K7_SMOKE_HDIM == 0 || K7_SMOKE_HDIM == 128
K7_SMOKE_INSTANTIATE(128)
#endif
#if K7_SMOKE_HDIM == 0 || K7_SMOKE_HDIM == 256
K7_SMOKE_INSTANTIATE(256)
#endif
}  // namespace flashattn::fa3

template <int D>
static Status run_hdim(bool fp8, const Problem& p, const DebugOptions& dbg) {
  if constexpr (!built(D)) {
    return {StatusCode::invalid_argument, "head dim not built (K7_SMOKE_HDIM)"};
  } else if (fp8) {
    return fa3::run_forward_fp8<cutlass::bfloat16_t, D, fa3::ScheduleK6>(p, dbg);
  } else if constexpr (kWithK6) {
    return fa3::run_forward<cutlass::bfloat16_t, D, D, fa3::ScheduleK6>(p, dbg);
  } else {
    return {StatusCode::invalid_argument, "K6 not built (K7_SMOKE_NO_K6)"};
  }
}

static Status run(bool fp8, const Problem& p) {
  DebugOptions dbg;
  // A -DFLASHATTN_TIMELINE build writes K6's last launch's timeline to $K6_TIMELINE
  // (bench/timeline.py reads it).
  if (!fp8) dbg.timeline_out = std::getenv("K6_TIMELINE");
  switch (p.head_dim) {
    case 64: return run_hdim<64>(fp8, p, dbg);
    case 128: return run_hdim<128>(fp8, p, dbg);
    default: return run_hdim<256>(fp8, p, dbg);
  }
}

struct Case {
  int b, sq, sk, hq, hkv, d;
  bool causal;
  int wl, wr;
  bool descales;
};

// Returns max |o - ref| / worst for k7 and k6-on-dequantised.
static bool check(const Case& c, std::mt19937& rng) {
  const int b = c.b, sq = c.sq, sk = c.sk, hq = c.hq, hkv = c.hkv, d = c.d;
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(0.5f, 2.f);
  const size_t nq = size_t(b) * sq * hq * d, nk = size_t(b) * sk * hkv * d;
  std::vector<float> q(nq), k(nk), v(nk);
  for (auto& x : q) x = nd(rng);
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  std::vector<float> qd(b * hkv, 1.f), kd(b * hkv, 1.f), vd(b * hkv, 1.f);
  if (c.descales) {
    for (auto& x : qd) x = ud(rng) / 448.f * 4.f;
    for (auto& x : kd) x = ud(rng) / 448.f * 4.f;
    for (auto& x : vd) x = ud(rng) / 448.f * 4.f;
  }
  const int group = hq / hkv;
  // Quantise: q row (bi, s, h) uses descale of (bi, h / group).
  std::vector<uint8_t> q8(nq), k8(nk), v8(nk);
  std::vector<float> qf(nq), kf(nk), vf(nk);  // dequantised
  for (size_t i = 0; i < nq; ++i) {
    const int h = (i / d) % hq, bi = i / (size_t(sq) * hq * d);
    const float s = qd[bi * hkv + h / group];
    q8[i] = float_to_e4m3(q[i] / s);
    qf[i] = e4m3_to_float(q8[i]) * s;
  }
  for (size_t i = 0; i < nk; ++i) {
    const int h = (i / d) % hkv, bi = i / (size_t(sk) * hkv * d);
    k8[i] = float_to_e4m3(k[i] / kd[bi * hkv + h]);
    kf[i] = e4m3_to_float(k8[i]) * kd[bi * hkv + h];
    v8[i] = float_to_e4m3(v[i] / vd[bi * hkv + h]);
    vf[i] = e4m3_to_float(v8[i]) * vd[bi * hkv + h];
  }
  const float scale = 1.f / std::sqrt(float(d));
  // Reference.
  const size_t no = size_t(b) * sq * hq * d;
  std::vector<double> oref(no, 0.0), lref(size_t(b) * hq * sq, -INFINITY);
  const int wl = c.wl, wr = c.causal ? 0 : c.wr;
  for (int bi = 0; bi < b; ++bi)
    for (int h = 0; h < hq; ++h)
      for (int i = 0; i < sq; ++i) {
        const int diag = i + sk - sq;
        std::vector<double> s(sk, -INFINITY);
        double m = -INFINITY;
        for (int j = 0; j < sk; ++j) {
          if (wl >= 0 && j < diag - wl) continue;
          if (wr >= 0 && j > diag + wr) continue;
          double acc = 0;
          const float* qr = &qf[((size_t(bi) * sq + i) * hq + h) * d];
          const float* kr = &kf[((size_t(bi) * sk + j) * hkv + h / group) * d];
          for (int x = 0; x < d; ++x) acc += double(qr[x]) * kr[x];
          s[j] = acc * scale;
          m = std::max(m, s[j]);
        }
        if (m == -INFINITY) continue;
        double l = 0;
        double* o = &oref[((size_t(bi) * sq + i) * hq + h) * d];
        for (int j = 0; j < sk; ++j) {
          if (s[j] == -INFINITY) continue;
          const double p = std::exp(s[j] - m);
          l += p;
          const float* vr = &vf[((size_t(bi) * sk + j) * hkv + h / group) * d];
          for (int x = 0; x < d; ++x) o[x] += p * vr[x];
        }
        for (int x = 0; x < d; ++x) o[x] /= l;
        lref[(size_t(bi) * hq + h) * sq + i] = m + std::log(l);
      }
  // Device buffers.
  uint8_t *dq8, *dk8, *dv8;
  uint16_t *dqb, *dkb, *dvb, *do8, *dob;
  float *dl8, *dlb, *dqd, *dkd, *dvd;
  CK(cudaMalloc(&dq8, nq));
  CK(cudaMalloc(&dk8, nk));
  CK(cudaMalloc(&dv8, nk));
  CK(cudaMalloc(&dqb, nq * 2));
  CK(cudaMalloc(&dkb, nk * 2));
  CK(cudaMalloc(&dvb, nk * 2));
  CK(cudaMalloc(&do8, no * 2));
  CK(cudaMalloc(&dob, no * 2));
  CK(cudaMalloc(&dl8, b * hq * sq * 4));
  CK(cudaMalloc(&dlb, b * hq * sq * 4));
  CK(cudaMalloc(&dqd, b * hkv * 4));
  CK(cudaMalloc(&dkd, b * hkv * 4));
  CK(cudaMalloc(&dvd, b * hkv * 4));
  std::vector<uint16_t> qb(nq), kb(nk), vb(nk);
  for (size_t i = 0; i < nq; ++i) qb[i] = float_to_bf16(qf[i]);
  for (size_t i = 0; i < nk; ++i) kb[i] = float_to_bf16(kf[i]), vb[i] = float_to_bf16(vf[i]);
  CK(cudaMemcpy(dq8, q8.data(), nq, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dk8, k8.data(), nk, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv8, v8.data(), nk, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dqb, qb.data(), nq * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dkb, kb.data(), nk * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dvb, vb.data(), nk * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dqd, qd.data(), b * hkv * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dkd, kd.data(), b * hkv * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dvd, vd.data(), b * hkv * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(do8, 0xff, no * 2));  // NaN poison
  CK(cudaMemset(dob, 0xff, no * 2));
  CK(cudaMemset(dl8, 0xff, b * hq * sq * 4));
  ForwardParams fp;
  fp.batch = b, fp.seqlen_q = sq, fp.seqlen_k = sk, fp.heads_q = hq, fp.heads_kv = hkv;
  fp.head_dim = d;
  fp.causal = c.causal;
  fp.window_left = c.wl;
  fp.window_right = c.causal ? -1 : c.wr;
  set_contiguous_strides(fp.q.stride, sq, hq, d);
  set_contiguous_strides(fp.k.stride, sk, hkv, d);
  set_contiguous_strides(fp.v.stride, sk, hkv, d);
  set_contiguous_strides(fp.o.stride, sq, hq, d);
  ForwardParams f8 = fp, fb = fp;
  f8.dtype = DType::e4m3;
  f8.q.data = dq8, f8.k.data = dk8, f8.v.data = dv8, f8.o.data = do8, f8.lse = dl8;
  f8.q_descale = dqd, f8.k_descale = dkd, f8.v_descale = dvd;
  fb.q.data = dqb, fb.k.data = dkb, fb.v.data = dvb, fb.o.data = dob, fb.lse = dlb;
  Status s8 = run(true, make_problem(f8));
  Status sb = kWithK6 ? run(false, make_problem(fb)) : s8;
  CK(cudaDeviceSynchronize());
  if (!s8.ok() || !sb.ok()) {
    printf("status %s / %s\n", s8.message.c_str(), sb.message.c_str());
    return false;
  }
  std::vector<uint16_t> o8(no), ob(no);
  std::vector<float> l8(b * hq * sq), lb(b * hq * sq);
  CK(cudaMemcpy(o8.data(), do8, no * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(ob.data(), dob, no * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(l8.data(), dl8, l8.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(lb.data(), dlb, lb.size() * 4, cudaMemcpyDeviceToHost));
  double e8 = 0, eb = 0, maxref = 0, el8 = 0, elb = 0;
  bool nan = false;
  for (size_t i = 0; i < no; ++i) {
    const float a = bf16_to_float(o8[i]), bb = bf16_to_float(ob[i]);
    if (!std::isfinite(a)) nan = true;
    e8 = std::max(e8, std::fabs(a - oref[i]));
    eb = std::max(eb, std::fabs(bb - oref[i]));
    maxref = std::max(maxref, std::fabs(oref[i]));
  }
  for (size_t i = 0; i < l8.size(); ++i) {
    if (std::isinf(lref[i])) {
      if (!(std::isinf(l8[i]) && l8[i] < 0)) nan = true;
      continue;
    }
    if (!std::isfinite(l8[i])) nan = true;
    el8 = std::max(el8, std::fabs(l8[i] - lref[i]));
    elb = std::max(elb, std::fabs(lb[i] - lref[i]));
  }
  // FP8 P costs ~2^-4 relative per term; a generous smoke bound: 8x bf16's error + 2e-2 |o|max.
  if (!kWithK6) eb = 1e-2 * maxref, elb = 1e-2;  // no bf16 run: a sanity bound
  const bool ok = !nan && e8 <= 8 * eb + 2e-2 * maxref && el8 <= 1e-2 + 8 * elb;
  printf("%s b%d sq%d sk%d h%d/%d d%d causal%d win(%d,%d) desc%d: k7 err %.4g  k6-bf16 err %.4g  "
         "max|ref| %.3g  lse err %.3g / %.3g%s\n",
         ok ? "PASS" : "FAIL", b, sq, sk, hq, hkv, d, c.causal, c.wl, c.wr, c.descales, e8, eb,
         maxref, el8, elb, nan ? "  NaN/inf!" : "");
  cudaFree(dq8), cudaFree(dk8), cudaFree(dv8), cudaFree(dqb), cudaFree(dkb), cudaFree(dvb);
  cudaFree(do8), cudaFree(dob), cudaFree(dl8), cudaFree(dlb), cudaFree(dqd), cudaFree(dkd);
  cudaFree(dvd);
  return ok;
}

static void bench(int d, int seqlen, bool causal, std::mt19937& rng) {
  const int b = 16384 / seqlen, h = 2048 / d;
  const size_t n = size_t(b) * seqlen * h * d;
  // e4m3 and bf16 inputs drawn from N(0, 1) (constant bytes, as the first version had, flattered
  // the figures by ~7%: d 256 16k 1201 against flashattn-bench's 1120); Q, K and V read one
  // buffer at different offsets.
  std::vector<uint8_t> host(n + 64);
  std::vector<uint16_t> host16(kWithK6 ? n + 64 : 0);
  {
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& x : host) x = float_to_e4m3(nd(rng));
    for (auto& x : host16) x = float_to_bf16(nd(rng));
  }
  const int sets = std::max<int>(2, std::min<int>(8, int((256ull << 20) / (n * 3))));
  std::vector<void*> q8(sets), k8(sets), v8(sets), qb(sets), kb(sets), vb(sets);
  for (int i = 0; i < sets; ++i) {
    CK(cudaMalloc(&q8[i], n));
    CK(cudaMalloc(&k8[i], n));
    CK(cudaMalloc(&v8[i], n));
    CK(cudaMalloc(&qb[i], n * 2));
    CK(cudaMalloc(&kb[i], n * 2));
    CK(cudaMalloc(&vb[i], n * 2));
    CK(cudaMemcpy(q8[i], host.data() + (i % 8), n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(k8[i], host.data() + 17 + (i % 8), n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(v8[i], host.data() + 41 + (i % 8), n, cudaMemcpyHostToDevice));
    if (kWithK6) {
      CK(cudaMemcpy(qb[i], host16.data() + (i % 8), n * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(kb[i], host16.data() + 17 + (i % 8), n * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(vb[i], host16.data() + 41 + (i % 8), n * 2, cudaMemcpyHostToDevice));
    }
  }
  void* o;
  CK(cudaMalloc(&o, n * 2));
  ForwardParams fp;
  fp.batch = b, fp.seqlen_q = seqlen, fp.seqlen_k = seqlen, fp.heads_q = h, fp.heads_kv = h;
  fp.head_dim = d;
  fp.causal = causal;
  set_contiguous_strides(fp.q.stride, seqlen, h, d);
  set_contiguous_strides(fp.k.stride, seqlen, h, d);
  set_contiguous_strides(fp.v.stride, seqlen, h, d);
  set_contiguous_strides(fp.o.stride, seqlen, h, d);
  fp.o.data = o;
  double flops = 4.0 * b * h * double(seqlen) * seqlen * d / (causal ? 2 : 1);
  float ms[2];
  ms[0] = 0.f;  // (no K6: reported as 0)
  for (int fp8 = 1; fp8 >= (kWithK6 ? 0 : 1); --fp8) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> t;
    for (int it = 0; it < 25; ++it) {
      ForwardParams f = fp;
      const int s = it % sets;
      f.dtype = fp8 ? DType::e4m3 : DType::bf16;
      f.q.data = fp8 ? q8[s] : qb[s];
      f.k.data = fp8 ? k8[s] : kb[s];
      f.v.data = fp8 ? v8[s] : vb[s];
      cudaEventRecord(e0);
      Status st = run(fp8, make_problem(f));
      cudaEventRecord(e1);
      CK(cudaEventSynchronize(e1));
      if (!st.ok()) printf("status %s\n", st.message.c_str());
      float x;
      cudaEventElapsedTime(&x, e0, e1);
      if (it >= 5) t.push_back(x);
    }
    std::sort(t.begin(), t.end());
    ms[fp8] = t[t.size() / 2];
  }
  printf("{\"bench\": 1, \"d\": %d, \"seqlen\": %d, \"causal\": %d, \"k7_ms\": %.4f, \"k7_tflops\": %.1f, "
         "\"k6_bf16_ms\": %.4f, \"k6_tflops\": %.1f}\n",
         d, seqlen, causal, ms[1], flops / ms[1] / 1e9, ms[0], flops / ms[0] / 1e9);
  for (int i = 0; i < sets; ++i) {
    cudaFree(q8[i]), cudaFree(k8[i]), cudaFree(v8[i]), cudaFree(qb[i]), cudaFree(kb[i]);
    cudaFree(vb[i]);
  }
  cudaFree(o);
}

int main(int argc, char** argv) {
  const unsigned seed = std::random_device{}();
  printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  int fails = 0;
  if (argc > 4 && std::strcmp(argv[1], "one") == 0) {
    bench(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), rng);
    return 0;
  }
  const bool small = argc > 1 && std::strcmp(argv[1], "small") == 0;
  if (small) {
    for (int d : {64, 128, 256}) if (built(d)) {
      const Case cases[] = {{2, 255, 300, 4, 2, d, false, -1, -1, true},
                            {1, 200, 130, 2, 1, d, true, -1, -1, true},
                            {1, 300, 300, 2, 2, d, false, 100, 30, true}};
      for (const Case& c : cases) fails += !check(c, rng);
    }
    printf("fails %d\n", fails);
    return fails != 0;
  }
  const bool quick = argc > 1 && std::strcmp(argv[1], "bench") == 0;
  if (!quick) {
    for (int d : {64, 128, 256}) if (built(d)) {
      const Case cases[] = {
          {1, 128, 128, 1, 1, d, false, -1, -1, false}, {2, 255, 1000, 4, 2, d, false, -1, -1, true},
          {2, 1000, 255, 4, 1, d, true, -1, -1, true},  {1, 17, 17, 2, 2, d, false, -1, -1, true},
          {1, 777, 777, 2, 1, d, true, -1, -1, true},   {1, 600, 900, 2, 2, d, false, 100, 30, true},
          {3, 1, 300, 4, 4, d, false, -1, -1, true},    {1, 2048, 2048, 2, 2, d, true, -1, -1, true},
      };
      for (const Case& c : cases) fails += !check(c, rng);
    }
    printf("fails %d\n", fails);
  }
  for (int d : {64, 128, 256}) if (built(d))
    for (int s : {1024, 4096, 16384})
      for (bool causal : {false, true}) bench(d, s, causal, rng);
  return fails != 0;
}
