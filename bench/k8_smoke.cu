// K8 straight through quantize_fp8_device and fa3::run_forward_fp8<..., true> (below the API, so
// it runs before the API, CLI and tests know K8): bf16 data drawn on the host, quantised on the
// device, K8 checked against an fp64 reference of the dequantised inputs (a smoke bound, not the
// FP8 oracle of tests/test_gpu_k8.cpp), plus the RMSE against the original bf16 attention; then
// the pre-pass, K8 and K7 timed on the standard grid from seqlen 1024 (CUDA events, warm-up,
// median of 20, inputs rotated). Not built by CMake; on this machine:
//   nvcc -DFLASHATTN_LINEAGE=1 -Iinclude -Isrc -isystem=.deps/cutlass/cutlass_library/source/include \
//     -O3 -DNDEBUG --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -std=c++20 \
//     bench/k8_smoke.cu src/kernels/quant/quantize_fp8.cu src/api/fp8_block_rows.cpp \
//     src/common/workspace.cu -o .devbin-k8/k8_smoke
// then on the GPU: k8_smoke (checks + bench), k8_smoke check, k8_smoke bench.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/host_dtype.h"
#include "kernels/fa3_sm90/launch.cuh"
#include "kernels/quant/entry.h"
#include "cuda_exit.cuh"

using namespace flashattn;

namespace flashattn::fa3 {
template Status run_forward_fp8<cutlass::bfloat16_t, 64, ScheduleK6, true>(const Problem&, const DebugOptions&);
template Status run_forward_fp8<cutlass::bfloat16_t, 128, ScheduleK6, true>(const Problem&, const DebugOptions&);
template Status run_forward_fp8<cutlass::bfloat16_t, 256, ScheduleK6, true>(const Problem&, const DebugOptions&);
template Status run_forward_fp8<cutlass::bfloat16_t, 64, ScheduleK6, false>(const Problem&, const DebugOptions&);
template Status run_forward_fp8<cutlass::bfloat16_t, 128, ScheduleK6, false>(const Problem&, const DebugOptions&);
template Status run_forward_fp8<cutlass::bfloat16_t, 256, ScheduleK6, false>(const Problem&, const DebugOptions&);
}  // namespace flashattn::fa3

static Status run(bool blocks, const Problem& p) {
  DebugOptions dbg;
  using E = cutlass::bfloat16_t;
  switch (p.head_dim) {
    case 64: return blocks ? fa3::run_forward_fp8<E, 64, fa3::ScheduleK6, true>(p, dbg)
                           : fa3::run_forward_fp8<E, 64, fa3::ScheduleK6, false>(p, dbg);
    case 128: return blocks ? fa3::run_forward_fp8<E, 128, fa3::ScheduleK6, true>(p, dbg)
                            : fa3::run_forward_fp8<E, 128, fa3::ScheduleK6, false>(p, dbg);
    default: return blocks ? fa3::run_forward_fp8<E, 256, fa3::ScheduleK6, true>(p, dbg)
                           : fa3::run_forward_fp8<E, 256, fa3::ScheduleK6, false>(p, dbg);
  }
}

struct Case {
  int b, sq, sk, hq, hkv, d;
  bool causal;
  int wl, wr;
  bool rotate, outliers;
};

// fp64 attention of (b, s, h, d) float tensors; o (b, sq, hq, d), lse (b, hq, sq).
static void attention(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                      const std::vector<float>& v, std::vector<double>& o, std::vector<double>& lse) {
  const int sq = c.sq, sk = c.sk, hq = c.hq, hkv = c.hkv, d = c.d, group = hq / hkv;
  o.assign(size_t(c.b) * sq * hq * d, 0.0);
  lse.assign(size_t(c.b) * hq * sq, -INFINITY);
  const double scale = 1.0 / std::sqrt(double(d));
  const int wl = c.wl, wr = c.causal ? 0 : c.wr;
  std::vector<double> s(sk);
  for (int bi = 0; bi < c.b; ++bi)
    for (int h = 0; h < hq; ++h)
      for (int i = 0; i < sq; ++i) {
        const int diag = i + sk - sq;
        double m = -INFINITY;
        for (int j = 0; j < sk; ++j) {
          s[j] = -INFINITY;
          if (wl >= 0 && j < diag - wl) continue;
          if (wr >= 0 && j > diag + wr) continue;
          double acc = 0;
          const float* qr = &q[((size_t(bi) * sq + i) * hq + h) * d];
          const float* kr = &k[((size_t(bi) * sk + j) * hkv + h / group) * d];
          for (int x = 0; x < d; ++x) acc += double(qr[x]) * kr[x];
          s[j] = acc * scale;
          m = std::max(m, s[j]);
        }
        if (m == -INFINITY) continue;
        double l = 0;
        double* orow = &o[((size_t(bi) * sq + i) * hq + h) * d];
        for (int j = 0; j < sk; ++j) {
          if (s[j] == -INFINITY) continue;
          const double p = std::exp(s[j] - m);
          l += p;
          const float* vr = &v[((size_t(bi) * sk + j) * hkv + h / group) * d];
          for (int x = 0; x < d; ++x) orow[x] += p * vr[x];
        }
        for (int x = 0; x < d; ++x) orow[x] /= l;
        lse[(size_t(bi) * hq + h) * sq + i] = m + std::log(l);
      }
}

static float draw(std::mt19937& rng, bool outliers) {
  std::normal_distribution<float> nd(0.f, 1.f), big(0.f, 10.f);
  std::bernoulli_distribution rare(0.001);
  const float x = nd(rng);
  return outliers && rare(rng) ? x + big(rng) : x;
}

static bool check(const Case& c, std::mt19937& rng, uint64_t seed) {
  const int b = c.b, sq = c.sq, sk = c.sk, hq = c.hq, hkv = c.hkv, d = c.d;
  const size_t nq = size_t(b) * sq * hq * d, nk = size_t(b) * sk * hkv * d;
  std::vector<uint16_t> q16(nq), k16(nk), v16(nk);
  std::vector<float> qo(nq), ko(nk), vo(nk);  // the original values
  for (size_t i = 0; i < nq; ++i) q16[i] = float_to_bf16(draw(rng, c.outliers)), qo[i] = bf16_to_float(q16[i]);
  for (size_t i = 0; i < nk; ++i) k16[i] = float_to_bf16(draw(rng, c.outliers)), ko[i] = bf16_to_float(k16[i]);
  for (size_t i = 0; i < nk; ++i) v16[i] = float_to_bf16(draw(rng, c.outliers)), vo[i] = bf16_to_float(v16[i]);
  const Fp8BlockRows rows = fp8_block_rows(d);
  const int nbq = (sq + rows.q - 1) / rows.q, nbk = (sk + rows.kv - 1) / rows.kv;
  const size_t ndq = size_t(b) * hq * nbq, ndk = size_t(b) * hkv * nbk;
  void *dq16, *dk16, *dv16, *dq8, *dk8, *dv8, *dqd, *dkd, *dvd, *dout, *dlse;
  CK(cudaMalloc(&dq16, nq * 2));
  CK(cudaMalloc(&dk16, nk * 2));
  CK(cudaMalloc(&dv16, nk * 2));
  CK(cudaMalloc(&dq8, nq));
  CK(cudaMalloc(&dk8, nk));
  CK(cudaMalloc(&dv8, nk));
  CK(cudaMalloc(&dqd, ndq * 4 + 4));
  CK(cudaMalloc(&dkd, ndk * 4 + 4));
  CK(cudaMalloc(&dvd, ndk * 4 + 4));
  CK(cudaMalloc(&dout, nq * 2));
  CK(cudaMalloc(&dlse, size_t(b) * hq * sq * 4));
  CK(cudaMemcpy(dq16, q16.data(), nq * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dk16, k16.data(), nk * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv16, v16.data(), nk * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(dout, 0xff, nq * 2));
  CK(cudaMemset(dlse, 0xff, size_t(b) * hq * sq * 4));
  QuantizeFp8Params qp;
  qp.dtype = DType::bf16;
  qp.batch = b, qp.seqlen_q = sq, qp.seqlen_k = sk, qp.heads_q = hq, qp.heads_kv = hkv;
  qp.head_dim = d;
  set_contiguous_strides(qp.q.stride, sq, hq, d);
  set_contiguous_strides(qp.k.stride, sk, hkv, d);
  set_contiguous_strides(qp.v.stride, sk, hkv, d);
  set_contiguous_strides(qp.q_out.stride, sq, hq, d);
  set_contiguous_strides(qp.k_out.stride, sk, hkv, d);
  set_contiguous_strides(qp.v_out.stride, sk, hkv, d);
  qp.q.data = dq16, qp.k.data = dk16, qp.v.data = dv16;
  qp.q_out.data = dq8, qp.k_out.data = dk8, qp.v_out.data = dv8;
  qp.q_block_descale = static_cast<float*>(dqd);
  qp.k_block_descale = static_cast<float*>(dkd);
  qp.v_block_descale = static_cast<float*>(dvd);
  qp.rotation = c.rotate ? Fp8Rotation::hadamard : Fp8Rotation::none;
  qp.seed = seed;
  Status sq8 = quantize_fp8_device(qp);
  ForwardParams f;
  f.dtype = DType::e4m3;
  f.batch = b, f.seqlen_q = sq, f.seqlen_k = sk, f.heads_q = hq, f.heads_kv = hkv, f.head_dim = d;
  f.causal = c.causal, f.window_left = c.wl, f.window_right = c.causal ? -1 : c.wr;
  f.q.data = dq8, f.k.data = dk8, f.v.data = dv8;
  set_contiguous_strides(f.q.stride, sq, hq, d);
  set_contiguous_strides(f.k.stride, sk, hkv, d);
  set_contiguous_strides(f.v.stride, sk, hkv, d);
  set_contiguous_strides(f.o.stride, sq, hq, d);
  f.o.data = dout, f.lse = static_cast<float*>(dlse);
  f.q_block_descale = static_cast<float*>(dqd);
  f.k_block_descale = static_cast<float*>(dkd);
  f.v_block_descale = static_cast<float*>(dvd);
  Status sf = run(true, make_problem(f));
  CK(cudaDeviceSynchronize());
  if (!sq8.ok() || !sf.ok()) {
    printf("status %s / %s\n", sq8.message.c_str(), sf.message.c_str());
    return false;
  }
  std::vector<uint8_t> q8(nq), k8(nk), v8(nk);
  std::vector<float> qd(ndq), kd(ndk), vd(ndk), lse(size_t(b) * hq * sq);
  std::vector<uint16_t> o(nq);
  CK(cudaMemcpy(q8.data(), dq8, nq, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(k8.data(), dk8, nk, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(v8.data(), dv8, nk, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(qd.data(), dqd, ndq * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(kd.data(), dkd, ndk * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(vd.data(), dvd, ndk * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(o.data(), dout, nq * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(lse.data(), dlse, lse.size() * 4, cudaMemcpyDeviceToHost));
  // Dequantised inputs: row r of (bi, h) times its block's descale.
  std::vector<float> qf(nq), kf(nk), vf(nk);
  for (size_t i = 0; i < nq; ++i) {
    const int h = (i / d) % hq, r = (i / (size_t(hq) * d)) % sq, bi = i / (size_t(sq) * hq * d);
    qf[i] = e4m3_to_float(q8[i]) * qd[(size_t(bi) * hq + h) * nbq + r / rows.q];
  }
  for (size_t i = 0; i < nk; ++i) {
    const int h = (i / d) % hkv, r = (i / (size_t(hkv) * d)) % sk, bi = i / (size_t(sk) * hkv * d);
    const size_t di = (size_t(bi) * hkv + h) * nbk + r / rows.kv;
    kf[i] = e4m3_to_float(k8[i]) * kd[di];
    vf[i] = e4m3_to_float(v8[i]) * vd[di];
  }
  std::vector<double> oref, lref, oorig, lorig;
  attention(c, qf, kf, vf, oref, lref);
  attention(c, qo, ko, vo, oorig, lorig);
  double e = 0, maxref = 0, el = 0, sse = 0, sse_orig = 0;
  bool nan = false;
  for (size_t i = 0; i < nq; ++i) {
    const double a = bf16_to_float(o[i]);
    if (!std::isfinite(a)) nan = true;
    e = std::max(e, std::fabs(a - oref[i]));
    maxref = std::max(maxref, std::fabs(oref[i]));
    sse += (a - oref[i]) * (a - oref[i]);
    sse_orig += (a - oorig[i]) * (a - oorig[i]);
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lref[i])) {
      if (!(std::isinf(lse[i]) && lse[i] < 0)) nan = true;
      continue;
    }
    if (!std::isfinite(lse[i])) nan = true;
    el = std::max(el, std::fabs(lse[i] - lref[i]));
  }
  const bool ok = !nan && e <= 3e-2 * maxref + 1e-2 && el <= 1e-2;
  printf("%s b%d sq%d sk%d h%d/%d d%d causal%d win(%d,%d) rot%d out%d: err %.4g max|ref| %.3g "
         "lse err %.3g rmse %.3e rmse_original %.3e%s\n",
         ok ? "PASS" : "FAIL", b, sq, sk, hq, hkv, d, c.causal, c.wl, c.wr, c.rotate, c.outliers,
         e, maxref, el, std::sqrt(sse / nq), std::sqrt(sse_orig / nq), nan ? "  NaN/inf!" : "");
  for (void* p : {dq16, dk16, dv16, dq8, dk8, dv8, dqd, dkd, dvd, dout, dlse}) cudaFree(p);
  return ok;
}

static void bench(int d, int seqlen, bool causal) {
  const int b = 16384 / seqlen, h = 2048 / d;
  const size_t n = size_t(b) * seqlen * h * d;
  const int sets = std::max<int>(2, std::min<int>(8, int((512ull << 20) / (n * 9))));
  const Fp8BlockRows rows = fp8_block_rows(d);
  const size_t ndq = size_t(b) * h * ((seqlen + rows.q - 1) / rows.q);
  const size_t ndk = size_t(b) * h * ((seqlen + rows.kv - 1) / rows.kv);
  std::vector<void*> q8(sets), k8(sets), v8(sets), qb(sets), kb(sets), vb(sets), ds(sets);
  for (int i = 0; i < sets; ++i) {
    CK(cudaMalloc(&q8[i], n));
    CK(cudaMalloc(&k8[i], n));
    CK(cudaMalloc(&v8[i], n));
    CK(cudaMalloc(&qb[i], n * 2));
    CK(cudaMalloc(&kb[i], n * 2));
    CK(cudaMalloc(&vb[i], n * 2));
    CK(cudaMalloc(&ds[i], (ndq + 2 * ndk) * 4));
    CK(cudaMemset(qb[i], 0x3c, n * 2));
    CK(cudaMemset(kb[i], 0x3c, n * 2));
    CK(cudaMemset(vb[i], 0x3c, n * 2));
  }
  void* o;
  CK(cudaMalloc(&o, n * 2));
  ForwardParams fp;
  fp.dtype = DType::e4m3;
  fp.batch = b, fp.seqlen_q = seqlen, fp.seqlen_k = seqlen, fp.heads_q = h, fp.heads_kv = h;
  fp.head_dim = d;
  fp.causal = causal;
  set_contiguous_strides(fp.q.stride, seqlen, h, d);
  set_contiguous_strides(fp.k.stride, seqlen, h, d);
  set_contiguous_strides(fp.v.stride, seqlen, h, d);
  set_contiguous_strides(fp.o.stride, seqlen, h, d);
  fp.o.data = o;
  QuantizeFp8Params qp;
  qp.batch = b, qp.seqlen_q = seqlen, qp.seqlen_k = seqlen, qp.heads_q = h, qp.heads_kv = h;
  qp.head_dim = d;
  qp.rotation = Fp8Rotation::hadamard;
  for (auto* st : {&qp.q.stride, &qp.k.stride, &qp.v.stride})
    set_contiguous_strides(*st, seqlen, h, d);
  for (auto* st : {&qp.q_out.stride, &qp.k_out.stride, &qp.v_out.stride})
    set_contiguous_strides(*st, seqlen, h, d);
  double flops = 4.0 * b * h * double(seqlen) * seqlen * d / (causal ? 2 : 1);
  // 0: pre-pass alone, 1: K8 kernel alone, 2: pre-pass + K8, 3: K7 kernel.
  float ms[4];
  for (int mode = 0; mode < 4; ++mode) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> t;
    for (int it = 0; it < 25; ++it) {
      const int s = it % sets;
      float* dsc = static_cast<float*>(ds[s]);
      qp.q.data = qb[s], qp.k.data = kb[s], qp.v.data = vb[s];
      qp.q_out.data = q8[s], qp.k_out.data = k8[s], qp.v_out.data = v8[s];
      qp.q_block_descale = dsc, qp.k_block_descale = dsc + ndq, qp.v_block_descale = dsc + ndq + ndk;
      ForwardParams f = fp;
      f.q.data = q8[s], f.k.data = k8[s], f.v.data = v8[s];
      if (mode != 3) {
        f.q_block_descale = dsc, f.k_block_descale = dsc + ndq, f.v_block_descale = dsc + ndq + ndk;
      }
      if (mode == 1) {  // descales in place for the kernel alone
        CK(cudaMemset(ds[s], 0, 0));
        Status st = quantize_fp8_device(qp);
        if (!st.ok()) printf("status %s\n", st.message.c_str());
      }
      cudaEventRecord(e0);
      Status st;
      if (mode == 0 || mode == 2) st = quantize_fp8_device(qp);
      if (st.ok() && mode != 0) st = run(mode != 3, make_problem(f));
      cudaEventRecord(e1);
      CK(cudaEventSynchronize(e1));
      if (!st.ok()) printf("status %s\n", st.message.c_str());
      float x;
      cudaEventElapsedTime(&x, e0, e1);
      if (it >= 5) t.push_back(x);
    }
    std::sort(t.begin(), t.end());
    ms[mode] = t[t.size() / 2];
  }
  const double bytes = 3.0 * n * 3;  // read 2 bytes, write 1, for q, k, v
  printf("{\"bench\": 1, \"d\": %d, \"seqlen\": %d, \"causal\": %d, \"prepass_ms\": %.4f, "
         "\"prepass_GBps\": %.0f, \"k8_kernel_ms\": %.4f, \"k8_e2e_ms\": %.4f, \"k7_ms\": %.4f, "
         "\"k8_kernel_tflops\": %.1f, \"k8_e2e_tflops\": %.1f, \"k7_tflops\": %.1f, "
         "\"k8_e2e_over_k7\": %.3f}\n",
         d, seqlen, causal, ms[0], bytes / ms[0] / 1e6, ms[1], ms[2], ms[3], flops / ms[1] / 1e9,
         flops / ms[2] / 1e9, flops / ms[3] / 1e9, ms[3] / ms[2]);
  for (int i = 0; i < sets; ++i)
    for (void* p : {q8[i], k8[i], v8[i], qb[i], kb[i], vb[i], ds[i]}) cudaFree(p);
  cudaFree(o);
}

int main(int argc, char** argv) {
  const unsigned seed = std::random_device{}();
  printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  int fails = 0;
  if (argc > 3 && std::strcmp(argv[1], "pre") == 0) {  // the pre-pass alone, for ncu
    const int d = atoi(argv[2]), s = atoi(argv[3]), b = 16384 / s, h = 2048 / d;
    const size_t n = size_t(b) * s * h * d;
    const Fp8BlockRows rows = fp8_block_rows(d);
    void *in, *out, *ds;
    CK(cudaMalloc(&in, 3 * n * 2));
    CK(cudaMalloc(&out, 3 * n));
    CK(cudaMalloc(&ds, 3 * n / 64 * 4 + 1024));
    CK(cudaMemset(in, 0x3c, 3 * n * 2));
    QuantizeFp8Params qp;
    qp.batch = b, qp.seqlen_q = s, qp.seqlen_k = s, qp.heads_q = h, qp.heads_kv = h, qp.head_dim = d;
    qp.rotation = argc > 4 && atoi(argv[4]) == 0 ? Fp8Rotation::none : Fp8Rotation::hadamard;
    for (auto* st : {&qp.q.stride, &qp.k.stride, &qp.v.stride, &qp.q_out.stride, &qp.k_out.stride,
                     &qp.v_out.stride})
      set_contiguous_strides(*st, s, h, d);
    qp.q.data = in, qp.k.data = static_cast<char*>(in) + n * 2, qp.v.data = static_cast<char*>(in) + n * 4;
    qp.q_out.data = out, qp.k_out.data = static_cast<char*>(out) + n, qp.v_out.data = static_cast<char*>(out) + 2 * n;
    qp.q_block_descale = static_cast<float*>(ds);
    qp.k_block_descale = qp.q_block_descale + size_t(b) * h * (s / rows.q + 1);
    qp.v_block_descale = qp.k_block_descale + size_t(b) * h * (s / rows.kv + 1);
    for (int i = 0; i < 3; ++i) (void)quantize_fp8_device(qp);
    CK(cudaDeviceSynchronize());
    return 0;
  }
  const bool do_check = argc < 2 || std::strcmp(argv[1], "bench") != 0;
  const bool do_bench = argc < 2 || std::strcmp(argv[1], "check") != 0;
  const bool small = argc > 1 && std::strcmp(argv[1], "small") == 0;
  if (do_check) {
    for (int d : {64, 128, 256}) {
      std::vector<Case> cases = {{2, 255, 300, 4, 2, d, false, -1, -1, false, false},
                                 {1, 200, 130, 2, 1, d, true, -1, -1, true, false},
                                 {1, 300, 300, 2, 2, d, false, 100, 30, true, true}};
      if (!small) {
        cases.push_back({1, 1, 257, 2, 2, d, false, -1, -1, true, false});
        cases.push_back({2, 777, 777, 2, 1, d, true, -1, -1, true, true});
        cases.push_back({1, 1024, 1024, 2, 2, d, false, -1, -1, false, true});
        cases.push_back({1, 1024, 1024, 2, 2, d, false, -1, -1, true, true});
      }
      for (const Case& c : cases) fails += !check(c, rng, seed);
    }
    printf("fails %d\n", fails);
  }
  if (do_bench && !small) {
    for (int d : {64, 128, 256})
      for (int s : {1024, 4096, 8192, 16384})
        for (bool causal : {false, true}) bench(d, s, causal);
  }
  return fails != 0;
}
