// K8's pre-pass A/B: the tree's quantize_fp8_device against another build of it (the reference,
// linked in under the name quantize_fp8_device_old), bitwise on odd shapes, strides and both
// input dtypes, then both timed on the standard grid's q + k + v (16k tokens, hidden 2048,
// rotation on; CUDA events, warm-up, median of 20, three input sets rotated, the two interleaved).
// Not built by CMake; on this machine (REF = the reference's quantize_fp8.cu, e.g. from git show):
//   nvcc -DFLASHATTN_LINEAGE=1 -Iinclude -Isrc -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a \
//     -std=c++20 -Dquantize_fp8_device=quantize_fp8_device_old -c REF -o /tmp/ref.o
//   nvcc -DFLASHATTN_LINEAGE=1 -Iinclude -Isrc -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a \
//     -std=c++20 bench/k8_prepass_ab.cu src/kernels/quant/quantize_fp8.cu \
//     src/api/fp8_block_rows.cpp /tmp/ref.o -o .devbin-k8/k8_prepass_ab
// then on the GPU: k8_prepass_ab (checks, then bench), k8_prepass_ab check, k8_prepass_ab bench.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/host_dtype.h"
#include "kernels/quant/entry.h"
#include "cuda_exit.cuh"

namespace flashattn {
Status quantize_fp8_device_old(const QuantizeFp8Params& params);
}

using namespace flashattn;

struct Buffers {
  void *q, *k, *v, *q8, *k8, *v8;
  float *qd, *kd, *vd;
  size_t nq_in, nk_in, nq_out, nk_out, ndq, ndk;  // elements (inputs / outputs / descales)
};

struct Shape {
  int b, sq, sk, hq, hkv, d;
  bool fp16, rotate;
  int in_pad, out_pad;  // extra elements per row of heads (strides), odd to break alignment
  int out_offset;       // bytes the outputs start past an aligned address
};

static QuantizeFp8Params params_of(const Shape& s, const Buffers& m) {
  QuantizeFp8Params p;
  p.dtype = s.fp16 ? DType::fp16 : DType::bf16;
  p.batch = s.b, p.seqlen_q = s.sq, p.seqlen_k = s.sk, p.heads_q = s.hq, p.heads_kv = s.hkv;
  p.head_dim = s.d;
  auto strides = [&](int64_t (&st)[4], int seqlen, int heads, int pad) {
    st[3] = 1, st[2] = s.d, st[1] = int64_t{heads} * s.d + pad, st[0] = st[1] * seqlen;
  };
  strides(p.q.stride, s.sq, s.hq, s.in_pad);
  strides(p.k.stride, s.sk, s.hkv, s.in_pad);
  strides(p.v.stride, s.sk, s.hkv, s.in_pad);
  strides(p.q_out.stride, s.sq, s.hq, s.out_pad);
  strides(p.k_out.stride, s.sk, s.hkv, s.out_pad);
  strides(p.v_out.stride, s.sk, s.hkv, s.out_pad);
  p.q.data = m.q, p.k.data = m.k, p.v.data = m.v;
  p.q_out.data = static_cast<uint8_t*>(m.q8) + s.out_offset;
  p.k_out.data = static_cast<uint8_t*>(m.k8) + s.out_offset;
  p.v_out.data = static_cast<uint8_t*>(m.v8) + s.out_offset;
  p.q_block_descale = m.qd, p.k_block_descale = m.kd, p.v_block_descale = m.vd;
  p.rotation = s.rotate ? Fp8Rotation::hadamard : Fp8Rotation::none;
  p.seed = 0x5eed1234abcdull;
  return p;
}

static Buffers alloc(const Shape& s) {
  Buffers m{};
  const Fp8BlockRows rows = fp8_block_rows(s.d);
  m.nq_in = size_t(s.b) * s.sq * (size_t(s.hq) * s.d + s.in_pad);
  m.nk_in = size_t(s.b) * s.sk * (size_t(s.hkv) * s.d + s.in_pad);
  m.nq_out = size_t(s.b) * s.sq * (size_t(s.hq) * s.d + s.out_pad) + 16;
  m.nk_out = size_t(s.b) * s.sk * (size_t(s.hkv) * s.d + s.out_pad) + 16;
  m.ndq = size_t(s.b) * s.hq * ((s.sq + rows.q - 1) / rows.q);
  m.ndk = size_t(s.b) * s.hkv * ((s.sk + rows.kv - 1) / rows.kv);
  CK(cudaMalloc(&m.q, m.nq_in * 2));
  CK(cudaMalloc(&m.k, m.nk_in * 2));
  CK(cudaMalloc(&m.v, m.nk_in * 2));
  CK(cudaMalloc(&m.q8, m.nq_out));
  CK(cudaMalloc(&m.k8, m.nk_out));
  CK(cudaMalloc(&m.v8, m.nk_out));
  CK(cudaMalloc(&m.qd, m.ndq * 4));
  CK(cudaMalloc(&m.kd, m.ndk * 4));
  CK(cudaMalloc(&m.vd, m.ndk * 4));
  return m;
}

static void release(Buffers& m) {
  for (void* p : {m.q, m.k, m.v, m.q8, m.k8, m.v8, static_cast<void*>(m.qd),
                  static_cast<void*>(m.kd), static_cast<void*>(m.vd)}) {
    cudaFree(p);
  }
}

static void fill(void* dst, size_t n, bool fp16, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f), big(0.f, 100.f);
  std::bernoulli_distribution rare(0.001);
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) {
    const float x = nd(rng) + (rare(rng) ? big(rng) : 0.f);
    h[i] = fp16 ? float_to_fp16(x) : float_to_bf16(x);
  }
  CK(cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice));
}

static std::vector<uint8_t> fetch(const void* src, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  CK(cudaMemcpy(h.data(), src, bytes, cudaMemcpyDeviceToHost));
  return h;
}

static void poison(const Buffers& m) {
  CK(cudaMemset(m.q8, 0xa5, m.nq_out));
  CK(cudaMemset(m.k8, 0xa5, m.nk_out));
  CK(cudaMemset(m.v8, 0xa5, m.nk_out));
  CK(cudaMemset(m.qd, 0xff, m.ndq * 4));
  CK(cudaMemset(m.kd, 0xff, m.ndk * 4));
  CK(cudaMemset(m.vd, 0xff, m.ndk * 4));
}

struct Snapshot {
  std::vector<uint8_t> q8, k8, v8, qd, kd, vd;
};

static Snapshot run(Status (*fn)(const QuantizeFp8Params&), const Shape& s, const Buffers& m) {
  poison(m);
  const Status st = fn(params_of(s, m));
  CK(cudaDeviceSynchronize());
  if (!st.ok()) {
    printf("status: %s\n", st.message.c_str());
    exit(1);
  }
  return {fetch(m.q8, m.nq_out), fetch(m.k8, m.nk_out), fetch(m.v8, m.nk_out),
          fetch(m.qd, m.ndq * 4), fetch(m.kd, m.ndk * 4), fetch(m.vd, m.ndk * 4)};
}

static int64_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return int64_t(i);
  }
  return -1;
}

static int check(std::mt19937& rng) {
  int fails = 0;
  std::vector<Shape> shapes;
  for (int d : {64, 128, 256}) {
    for (bool fp16 : {false, true}) {
      for (bool rotate : {true, false}) {
        // Aligned (16-byte paths); 4-byte loads and 2-byte stores; elements and bytes; one row.
        shapes.push_back({2, 1000, 333, 4, 2, d, fp16, rotate, 0, 0, 0});
        shapes.push_back({1, 517, 700, 3, 1, d, fp16, rotate, 2, 6, 2});
        shapes.push_back({1, 129, 97, 2, 2, d, fp16, rotate, 3, 5, 1});
        shapes.push_back({3, 1, 2, 2, 1, d, fp16, rotate, 0, 0, 0});
      }
    }
  }
  for (const Shape& s : shapes) {
    Buffers m = alloc(s);
    fill(m.q, m.nq_in, s.fp16, rng);
    fill(m.k, m.nk_in, s.fp16, rng);
    fill(m.v, m.nk_in, s.fp16, rng);
    const Snapshot a = run(quantize_fp8_device_old, s, m), b = run(quantize_fp8_device, s, m);
    const int64_t dq = first_difference(a.q8, b.q8), dk = first_difference(a.k8, b.k8),
                  dv = first_difference(a.v8, b.v8), eq = first_difference(a.qd, b.qd),
                  ek = first_difference(a.kd, b.kd), ev = first_difference(a.vd, b.vd);
    const bool ok = dq < 0 && dk < 0 && dv < 0 && eq < 0 && ek < 0 && ev < 0;
    fails += !ok;
    printf(
        "%s b%d sq%d sk%d h%d/%d d%d %s rotate%d pad%d/%d off%d: first differences q %lld "
        "k %lld v %lld descales %lld %lld %lld\n",
        ok ? "PASS" : "FAIL", s.b, s.sq, s.sk, s.hq, s.hkv, s.d, s.fp16 ? "fp16" : "bf16", s.rotate,
        s.in_pad, s.out_pad, s.out_offset, (long long)dq, (long long)dk, (long long)dv,
        (long long)eq, (long long)ek, (long long)ev);
    release(m);
  }
  printf("fails %d\n", fails);
  return fails;
}

static void bench(std::mt19937& rng) {
  for (int d : {64, 128, 256}) {
    const Shape s{4, 4096, 4096, 2048 / d, 2048 / d, d, false, true, 0, 0, 0};
    constexpr int kSets = 3;
    // Set 0 drawn on the host, the others copies of it at other addresses (what keeps L2 from
    // holding the inputs is the addresses; drawing 300M normals per set took ~10 s).
    Buffers m[kSets];
    for (int i = 0; i < kSets; ++i) {
      m[i] = alloc(s);
      if (i == 0) {
        fill(m[0].q, m[0].nq_in, false, rng);
        fill(m[0].k, m[0].nk_in, false, rng);
        fill(m[0].v, m[0].nk_in, false, rng);
      } else {
        CK(cudaMemcpy(m[i].q, m[0].q, m[0].nq_in * 2, cudaMemcpyDeviceToDevice));
        CK(cudaMemcpy(m[i].k, m[0].k, m[0].nk_in * 2, cudaMemcpyDeviceToDevice));
        CK(cudaMemcpy(m[i].v, m[0].v, m[0].nk_in * 2, cudaMemcpyDeviceToDevice));
      }
    }
    Status (*fns[2])(const QuantizeFp8Params&) = {quantize_fp8_device_old, quantize_fp8_device};
    std::vector<float> ms[2];
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int it = 0; it < 25; ++it) {
      for (int f = 0; f < 2; ++f) {
        const QuantizeFp8Params p = params_of(s, m[(2 * it + f) % kSets]);
        CK(cudaEventRecord(e0));
        (void)fns[f](p);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float t = 0;
        CK(cudaEventElapsedTime(&t, e0, e1));
        if (it >= 5) ms[f].push_back(t);
      }
    }
    const double bytes = 3.0 * 16384 * 2048 * 3;  // 2 read + 1 written per element, q + k + v
    double med[2];
    for (int f = 0; f < 2; ++f) {
      std::sort(ms[f].begin(), ms[f].end());
      med[f] = ms[f][ms[f].size() / 2];
    }
    printf("{\"prepass\": 1, \"d\": %d, \"old_ms\": %.4f, \"new_ms\": %.4f, \"old_GBps\": %.0f, "
           "\"new_GBps\": %.0f, \"new_over_old\": %.3f}\n",
           d, med[0], med[1], bytes / med[0] / 1e6, bytes / med[1] / 1e6, med[1] / med[0]);
    for (Buffers& x : m) release(x);
  }
}

int main(int argc, char** argv) {
  const unsigned seed = std::random_device{}();
  printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  const bool only_check = argc > 1 && std::strcmp(argv[1], "check") == 0;
  const bool only_bench = argc > 1 && std::strcmp(argv[1], "bench") == 0;
  int fails = 0;
  if (!only_bench) fails = check(rng);
  if (!only_check) bench(rng);
  return fails != 0;
}
