// GPU decode tests (ctest label `gpu`): flashattn::decode against the fp64 reference with
// FlashAttention's oracle, per batch entry (the reference attends to the entry's first
// cache_seqlens[b] + seqlen_new keys, gathered from the expected cache). Outputs are poisoned (NaN)
// before each run; cache positions past each sequence and unused pages hold NaN, so reading one
// poisons the output; the appended cache must equal the expected one bit for bit everywhere.
// Inputs are fresh random data from a printed seed. Without a CUDA device every test skips.
//
// FP8 KV cache (Case::fp8): the cache is built in the 16-bit dtype as for every case, then
// quantised to e4m3 with power-of-two scales (per tensor or per KV head), so that the dequantised
// cache, float(e4m3) * scale, is exact in bf16 and fp16: the oracle runs on that dequantised
// cache (FlashAttention's rule, pt the same math in the input precision), the e4m3 cache after the
// append must equal quantize_e4m3 (common/host_dtype.h, decode.h's rule) of the given k/v bit for
// bit, and paged and contiguous FP8 caches must give bitwise equal outputs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/head_dims.h"
#include "common/host_dtype.h"
#include "flashattn/flashattn.h"
#include "flashattn/reference.h"
#include "gpu_test_util.h"

namespace fa = flashattn;

namespace {

using flashattn::testing::DeviceBuffer;
using flashattn::testing::have_gpu;
using flashattn::testing::run_seed;
using flashattn::testing::upload;

constexpr uint16_t kNaN = 0xFFFF;
// Every head dim decode is built for: the grids below cover each of them.
constexpr int kHeadDims[] = {64, 96, 128, 192, 256};
constexpr bool covers_decode_head_dims() {
  if (std::size(kHeadDims) != std::size(fa::kDecodeHeadDims)) return false;
  for (const fa::HeadDims& h : fa::kDecodeHeadDims) {
    if (std::find(std::begin(kHeadDims), std::end(kHeadDims), h.qk) == std::end(kHeadDims))
      return false;
  }
  return true;
}
static_assert(covers_decode_head_dims(), "kHeadDims must list every kDecodeHeadDims pair");

struct Case {
  fa::DType dtype;
  int d, hq, hkv, sq;
  std::vector<int> seqlens;  // cache_seqlens per batch entry (before the append)
  int page_size;             // 0: contiguous
  int seqlen_new;
  bool causal;
  int wl, wr;
  int num_splits;
  bool batch_idx;  // contiguous only: a permuted cache_batch_idx over a larger cache
  float q_sigma;
  int capacity = 0;  // 0: longest sequence + 7 (rounded up to whole pages)
  float softcap = 0.f;  // DecodeParams::softcap
  int rotary_dim = 0;   // 0: no rotary; else tables of the standard frequencies (theta 10000)
  bool interleaved = true;
  int fp8 = 0;  // 0: a 16-bit cache; 1: e4m3, per-tensor scales; 2: e4m3, per-KV-head scales
  // Query heads scaled by 1, 2^-40, 2^12, 2^-6 in turn: rows of very different magnitudes in one
  // tile (the e4m3 kernels run S in fp16 with each row of Q scaled by its own power of two).
  bool q_spread = false;
};

std::string case_name(const Case& c) {
  const std::string softcap = "_softcap" + std::to_string(static_cast<int>(c.softcap));
  const std::string rotary =
      (c.interleaved ? "_rotint" : "_rothalf") + std::to_string(c.rotary_dim);
  std::string s = flashattn::testing::CaseName(fa::Kernel::automatic, c.dtype)
                      .num("_d", c.d)
                      .num("_h", c.hq)
                      .num("x", c.hkv)
                      .num("_q", c.sq)
                      .num("_b", static_cast<int>(c.seqlens.size()))
                      .num("_k", *std::max_element(c.seqlens.begin(), c.seqlens.end()))
                      .num(c.page_size ? "_page" : "_contig", c.page_size)
                      .num("_new", c.seqlen_new)
                      .mask(c.causal, c.wl, c.wr)
                      .num("_splits", c.num_splits)
                      .flag(c.batch_idx, "_idx")
                      .flag(c.q_sigma > 1, "_big")
                      .flag(c.softcap > 0, softcap.c_str())
                      .flag(c.rotary_dim > 0, rotary.c_str())
                      .flag(c.fp8 == 1, "_e4m3tensor")
                      .flag(c.fp8 == 2, "_e4m3head")
                      .flag(c.q_spread, "_qspread")
                      .str();
  return s.substr(5);  // drop "auto_"
}

struct Host {
  fa::DecodeParams p;  // device pointers after run()
  std::vector<uint16_t> q, k, v, kn, vn, k_expect, v_expect, o, k_after, v_after;
  std::vector<uint16_t> cos, sin, q_ref;  // rotary: the tables, q rotated on the host
  std::vector<float> lse;
  std::vector<int32_t> seqlens, table, idx;
  int cap = 0;
  // FP8 cache: the e4m3 cache given, expected after the append, read back; the scales. k, v,
  // k_expect and v_expect then hold the dequantised cache in the 16-bit dtype.
  std::vector<uint8_t> k8, v8, k8_expect, v8_expect, k8_after, v8_after;
  std::vector<float> ks, vs;
};

// Quantises the built cache (and the expected one, appended rows included) to e4m3 with
// power-of-two scales, then replaces the 16-bit caches by their dequantised values (exact).
// NaN poison stays NaN (0x7F).
void quantize_cache(const Case& c, Host& h) {
  if (c.fp8 == 0) return;
  fa::DecodeParams& p = h.p;
  const int n = c.fp8 == 2 ? c.hkv : 1;
  h.ks.clear();
  h.vs.clear();
  for (int i = 0; i < n; ++i) {
    h.ks.push_back(std::ldexp(1.f, i % 3 - 1));  // 0.5, 1, 2, ...
    h.vs.push_back(std::ldexp(1.f, 1 - i % 4));  // 2, 1, 0.5, 0.25, ...
  }
  p.cache_dtype = fa::DType::e4m3;
  p.kv_scale_layout = c.fp8 == 2 ? fa::KvScaleLayout::per_kv_head : fa::KvScaleLayout::per_tensor;
  p.k_scale = h.ks.data();
  p.v_scale = h.vs.data();
  // Contiguous layouts: element i belongs to KV head (i / d) % hkv.
  const auto head = [&](size_t i) { return c.fp8 == 2 ? static_cast<int>((i / c.d) % c.hkv) : 0; };
  const auto quantize = [&](const std::vector<uint16_t>& x, const std::vector<float>& scale,
                            std::vector<uint8_t>& out) {
    out.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      out[i] = x[i] == kNaN ? 0x7f
                            : fa::quantize_e4m3(fa::load_as_float(x.data(), int64_t(i), c.dtype),
                                                scale[size_t(head(i))]);
    }
  };
  const auto dequantize = [&](const std::vector<uint8_t>& x, const std::vector<float>& scale,
                              std::vector<uint16_t>& out) {
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i] == 0x7f) {
        out[i] = kNaN;
      } else {
        fa::store_from_float(out.data(), int64_t(i),
                             fa::dequantize_e4m3(x[i], scale[size_t(head(i))]), c.dtype);
      }
    }
  };
  quantize(h.k, h.ks, h.k8);
  quantize(h.v, h.vs, h.v8);
  quantize(h.k_expect, h.ks, h.k8_expect);
  quantize(h.v_expect, h.vs, h.v8_expect);
  dequantize(h.k8, h.ks, h.k);
  dequantize(h.v8, h.vs, h.v);
  dequantize(h.k8_expect, h.ks, h.k_expect);
  dequantize(h.v8_expect, h.vs, h.v_expect);
}

int64_t cache_index(const Host& h, int b, int j, int hk, int d) {
  const fa::DecodeParams& p = h.p;
  const int64_t* st = p.k_cache.stride;
  if (p.page_table != nullptr) {
    const int page = h.table[size_t(b) * p.max_pages + j / p.page_size];
    return page * st[0] + (j % p.page_size) * st[1] + hk * st[2] + d;
  }
  const int row = p.cache_batch_idx ? h.idx[b] : b;
  return row * st[0] + j * st[1] + hk * st[2] + d;
}

// The position of query token i of entry b under rotary (decode.h).
int query_position(const Host& h, int b, int i) {
  const bool per_token = h.p.causal || h.p.window_left >= 0 || h.p.window_right >= 0;
  return h.seqlens[size_t(b)] + (per_token ? i : 0);
}

// Rotary on the host: q_ref from q; the appended rows of k_expect from k_new. Bitwise what
// decode() computes (reference::apply_rotary repeats its arithmetic).
void rotate_on_host(const Case& c, Host& h) {
  if (c.rotary_dim == 0) return;
  const fa::DecodeParams& p = h.p;
  h.q_ref = h.q;
  for (int b = 0; b < p.batch; ++b)
    for (int i = 0; i < c.sq; ++i)
      for (int hq = 0; hq < c.hq; ++hq) {
        uint16_t* row = h.q_ref.data() + ((size_t(b) * c.sq + i) * c.hq + hq) * c.d;
        fa::reference::apply_rotary(c.dtype, h.cos.data(), h.sin.data(), c.rotary_dim,
                                    c.interleaved, query_position(h, b, i), row, row, c.d);
      }
  for (int b = 0; b < p.batch; ++b)
    for (int n = 0; n < c.seqlen_new; ++n)
      for (int hk = 0; hk < c.hkv; ++hk) {
        const size_t src = ((size_t(b) * c.seqlen_new + n) * c.hkv + hk) * c.d;
        const int64_t dst = cache_index(h, b, c.seqlens[b] + n, hk, 0);
        fa::reference::apply_rotary(c.dtype, h.cos.data(), h.sin.data(), c.rotary_dim,
                                    c.interleaved, c.seqlens[b] + n, h.kn.data() + src,
                                    h.k_expect.data() + dst, c.d);
      }
}

// Builds the inputs on the host (params hold host pointers), with the expected cache after the
// append. `shuffle_seed` permutes the pages.
void build(const Case& c, uint64_t seed, Host& h) {
  fa::DecodeParams& p = h.p;
  const int batch = static_cast<int>(c.seqlens.size());
  p.dtype = c.dtype;
  p.batch = batch;
  p.seqlen_q = c.sq;
  p.heads_q = c.hq;
  p.heads_kv = c.hkv;
  p.head_dim = c.d;
  p.causal = c.causal;
  p.window_left = c.wl;
  p.window_right = c.wr;
  p.num_splits = c.num_splits;
  p.softcap = c.softcap;
  p.seqlen_new = c.seqlen_new;
  const int longest = *std::max_element(c.seqlens.begin(), c.seqlens.end()) + c.seqlen_new;
  int cap = c.capacity > 0 ? c.capacity : longest + 7;
  std::mt19937_64 rng(seed ^ 0xdec0de);
  int64_t cache_elems = 0;
  if (c.page_size > 0) {
    p.page_size = c.page_size;
    p.max_pages = (cap + c.page_size - 1) / c.page_size;
    cap = p.max_pages * c.page_size;
    p.num_pages = batch * p.max_pages + 3;  // three pages nobody uses
    std::vector<int32_t> ids(static_cast<size_t>(p.num_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    h.table.assign(size_t(batch) * p.max_pages, -1);
    for (int b = 0; b < batch; ++b) {
      const int read = (c.seqlens[b] + c.seqlen_new + c.page_size - 1) / c.page_size;
      for (int i = 0; i < read; ++i)
        h.table[size_t(b) * p.max_pages + i] = ids[size_t(b) * p.max_pages + i];
    }
    p.page_table = h.table.data();
    cache_elems = int64_t(p.num_pages) * c.page_size * c.hkv * c.d;
  } else {
    p.cache_seqlen = cap;
    p.cache_batch = c.batch_idx ? batch + 2 : batch;
    if (c.batch_idx) {
      h.idx.resize(static_cast<size_t>(p.cache_batch));
      std::iota(h.idx.begin(), h.idx.end(), 0);
      std::shuffle(h.idx.begin(), h.idx.end(), rng);
      h.idx.resize(static_cast<size_t>(batch));
      p.cache_batch_idx = h.idx.data();
    }
    cache_elems = int64_t(p.cache_batch) * cap * c.hkv * c.d;
  }
  h.cap = cap;
  fa::set_contiguous_layout(p);
  h.seqlens.assign(c.seqlens.begin(), c.seqlens.end());
  p.cache_seqlens = h.seqlens.data();

  h.q.resize(size_t(batch) * c.sq * c.hq * c.d);
  fa::reference::fill_normal(h.q.data(), std::ssize(h.q), c.dtype, seed, c.q_sigma);
  if (c.q_spread) {
    constexpr float kSpread[4] = {1.f, 0x1p-40f, 0x1p12f, 0x1p-6f};
    for (int64_t i = 0; i < std::ssize(h.q); ++i) {
      const float f = kSpread[(i / c.d) % c.hq % 4];
      fa::store_from_float(h.q.data(), i, fa::load_as_float(h.q.data(), i, c.dtype) * f, c.dtype);
    }
  }
  // Every cache slot starts as NaN; the slots each sequence owns get data. A kernel that reads
  // past a sequence (or an unused page, or another entry's row) produces NaN.
  h.k.assign(size_t(cache_elems), kNaN);
  h.v.assign(size_t(cache_elems), kNaN);
  std::vector<uint16_t> rk(size_t(c.d)), rv(size_t(c.d));
  uint64_t row_seed = seed * 31 + 7;
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < c.seqlens[b]; ++j)
      for (int hk = 0; hk < c.hkv; ++hk) {
        fa::reference::fill_normal(rk.data(), c.d, c.dtype, ++row_seed);
        fa::reference::fill_normal(rv.data(), c.d, c.dtype, ++row_seed);
        std::copy(rk.begin(), rk.end(), h.k.begin() + cache_index(h, b, j, hk, 0));
        std::copy(rv.begin(), rv.end(), h.v.begin() + cache_index(h, b, j, hk, 0));
      }
  h.k_expect = h.k;
  h.v_expect = h.v;
  if (c.seqlen_new > 0) {
    h.kn.resize(size_t(batch) * c.seqlen_new * c.hkv * c.d);
    h.vn.resize(h.kn.size());
    fa::reference::fill_normal(h.kn.data(), std::ssize(h.kn), c.dtype, seed + 11);
    fa::reference::fill_normal(h.vn.data(), std::ssize(h.vn), c.dtype, seed + 12);
    p.k_new.data = h.kn.data();
    p.v_new.data = h.vn.data();
    for (int b = 0; b < batch; ++b)
      for (int n = 0; n < c.seqlen_new; ++n)
        for (int hk = 0; hk < c.hkv; ++hk) {
          const size_t src = ((size_t(b) * c.seqlen_new + n) * c.hkv + hk) * c.d;
          const int64_t dst = cache_index(h, b, c.seqlens[b] + n, hk, 0);
          std::copy_n(h.kn.begin() + src, c.d, h.k_expect.begin() + dst);
          std::copy_n(h.vn.begin() + src, c.d, h.v_expect.begin() + dst);
        }
  }
  if (c.rotary_dim > 0) {
    // Rows for every position used: the longest cache plus max(seqlen_new, seqlen_q), and 5 more.
    p.seqlen_ro =
        *std::max_element(c.seqlens.begin(), c.seqlens.end()) + std::max(c.seqlen_new, c.sq) + 5;
    p.rotary_dim = c.rotary_dim;
    p.rotary_interleaved = c.interleaved;
    h.cos.resize(size_t(p.seqlen_ro) * c.rotary_dim / 2);
    h.sin.resize(h.cos.size());
    fa::reference::rotary_tables(c.dtype, p.seqlen_ro, c.rotary_dim, 10000.0, h.cos.data(),
                                 h.sin.data());
    p.rotary_cos = h.cos.data();
    p.rotary_sin = h.sin.data();
    rotate_on_host(c, h);
  }
  quantize_cache(c, h);
}

// The inputs of a Host on the device, and its params pointing at them.
struct OnDevice {
  size_t no, nl;  // elements of O (= Q) and of LSE
  DeviceBuffer q, o, lse, k, v, kn, vn, seqlens, table, idx, cos, sin, ks, vs;
  fa::DecodeParams p;
  // The cache as given: e4m3 bytes for an FP8 cache, else the 16-bit values.
  void upload_cache(const Host& h) {
    if (h.k8.empty()) {
      upload(k, h.k);
      upload(v, h.v);
    } else {
      upload(k, h.k8);
      upload(v, h.v8);
    }
  }
  explicit OnDevice(const Host& h)
      : no(h.q.size()),
        nl(size_t(h.p.batch) * h.p.heads_q * h.p.seqlen_q),
        q(no * 2),
        o(no * 2),
        lse(nl * 4),
        k(h.k.size() * (h.k8.empty() ? 2 : 1)),
        v(h.v.size() * (h.k8.empty() ? 2 : 1)),
        kn(std::max<size_t>(h.kn.size(), 8) * 2),
        vn(std::max<size_t>(h.vn.size(), 8) * 2),
        seqlens(h.seqlens.size() * 4),
        table(std::max<size_t>(h.table.size(), 1) * 4),
        idx(std::max<size_t>(h.idx.size(), 1) * 4),
        cos(std::max<size_t>(h.cos.size(), 1) * 2),
        sin(std::max<size_t>(h.sin.size(), 1) * 2),
        ks(std::max<size_t>(h.ks.size(), 1) * 4),
        vs(std::max<size_t>(h.vs.size(), 1) * 4),
        p(h.p) {
    upload(q, h.q);
    upload_cache(h);
    if (!h.ks.empty()) {
      upload(ks, h.ks);
      upload(vs, h.vs);
      p.k_scale = static_cast<const float*>(ks.ptr);
      p.v_scale = static_cast<const float*>(vs.ptr);
    }
    upload(seqlens, h.seqlens);
    if (!h.table.empty()) upload(table, h.table);
    if (!h.idx.empty()) upload(idx, h.idx);
    if (!h.kn.empty()) {
      upload(kn, h.kn);
      upload(vn, h.vn);
    }
    p.q.data = q.ptr;
    p.o.data = o.ptr;
    p.lse = static_cast<float*>(lse.ptr);
    p.k_cache.data = k.ptr;
    p.v_cache.data = v.ptr;
    p.cache_seqlens = static_cast<const int32_t*>(seqlens.ptr);
    if (p.page_table) p.page_table = static_cast<const int32_t*>(table.ptr);
    if (p.cache_batch_idx) p.cache_batch_idx = static_cast<const int32_t*>(idx.ptr);
    if (p.k_new.data) {
      p.k_new.data = kn.ptr;
      p.v_new.data = vn.ptr;
    }
    if (p.rotary_cos) {
      upload(cos, h.cos);
      upload(sin, h.sin);
      p.rotary_cos = cos.ptr;
      p.rotary_sin = sin.ptr;
    }
  }
};

// Copies the inputs to the device, runs decode `runs` times (poisoning the outputs before each),
// and leaves the last outputs and the cache in h.o/h.lse/h.k_after/h.v_after.
void run(Host& h, int runs = 1, std::vector<uint16_t>* first_o = nullptr) {
  OnDevice d(h);
  if (::testing::Test::HasFatalFailure()) return;
  for (int r = 0; r < runs; ++r) {
    // The cache is restored before each run, so that a repeated append writes the same values.
    d.upload_cache(h);
    ASSERT_EQ(cudaMemset(d.o.ptr, 0xFF, d.no * 2), cudaSuccess);
    ASSERT_EQ(cudaMemset(d.lse.ptr, 0xFF, d.nl * 4), cudaSuccess);
    const fa::Status s = fa::decode(d.p);
    ASSERT_TRUE(s.ok()) << s.message;
    const cudaError_t e = cudaDeviceSynchronize();
    ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    h.o.resize(d.no);
    ASSERT_EQ(cudaMemcpy(h.o.data(), d.o.ptr, d.no * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    if (r == 0 && first_o != nullptr) *first_o = h.o;
  }
  // q and k_new are the caller's: never written (rotary works on copies).
  std::vector<uint16_t> q_after(h.q.size()), kn_after(h.kn.size());
  ASSERT_EQ(cudaMemcpy(q_after.data(), d.q.ptr, q_after.size() * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_TRUE(q_after == h.q) << "decode wrote q";
  if (!h.kn.empty()) {
    ASSERT_EQ(cudaMemcpy(kn_after.data(), d.kn.ptr, kn_after.size() * 2, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(kn_after == h.kn) << "decode wrote k_new";
  }
  h.lse.resize(d.nl);
  ASSERT_EQ(cudaMemcpy(h.lse.data(), d.lse.ptr, d.nl * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  if (!h.k8.empty()) {
    h.k8_after.resize(h.k8.size());
    h.v8_after.resize(h.v8.size());
    ASSERT_EQ(cudaMemcpy(h.k8_after.data(), d.k.ptr, h.k8.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(h.v8_after.data(), d.v.ptr, h.v8.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return;
  }
  h.k_after.resize(h.k.size());
  h.v_after.resize(h.v.size());
  ASSERT_EQ(cudaMemcpy(h.k_after.data(), d.k.ptr, h.k.size() * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(h.v_after.data(), d.v.ptr, h.v.size() * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
}

// The oracle on each batch entry: its keys gathered densely from the expected cache, its queries
// rotated on the host when rotary is on.
void check_against_reference(const Case& c, Host& h, uint64_t seed) {
  const fa::DecodeParams& p = h.p;
  const std::vector<uint16_t>& q = c.rotary_dim > 0 ? h.q_ref : h.q;
  for (int b = 0; b < p.batch; ++b) {
    const int len = h.seqlens[b] + c.seqlen_new;
    std::vector<uint16_t> k(std::max<size_t>(size_t(len) * c.hkv * c.d, 8)), v(k.size());
    for (int j = 0; j < len; ++j)
      for (int hk = 0; hk < c.hkv; ++hk) {
        const int64_t src = cache_index(h, b, j, hk, 0);
        std::copy_n(h.k_expect.begin() + src, c.d, k.begin() + (int64_t(j) * c.hkv + hk) * c.d);
        std::copy_n(h.v_expect.begin() + src, c.d, v.begin() + (int64_t(j) * c.hkv + hk) * c.d);
      }
    fa::ForwardParams f;
    f.dtype = c.dtype;
    f.batch = 1;
    f.seqlen_q = c.sq;
    f.seqlen_k = len;
    f.heads_q = c.hq;
    f.heads_kv = c.hkv;
    f.head_dim = c.d;
    f.causal = c.causal;
    f.window_left = c.wl;
    f.window_right = c.wr;
    f.softcap = c.softcap;
    fa::set_contiguous_layout(f);
    f.q.data = q.data() + size_t(b) * c.sq * c.hq * c.d;
    f.k.data = k.data();
    f.v.data = v.data();
    f.o.data = h.o.data() + size_t(b) * c.sq * c.hq * c.d;
    f.lse = h.lse.data() + size_t(b) * c.hq * c.sq;
    const fa::reference::CheckResult r = fa::reference::check(f);
    EXPECT_TRUE(r.ok) << case_name(c) << " entry " << b << " (keys " << len << ") seed " << seed
                      << ": " << r.detail << " (max_err " << r.max_err << ", pt " << r.max_err_pt
                      << ", atol " << r.atol << "; lse " << r.lse_max_err << " vs "
                      << r.lse_max_err_pt << " + " << r.lse_atol << ", not finite " << r.not_finite
                      << ")";
    EXPECT_GT(r.checked, 0);
  }
}

std::vector<Case> grid() {
  using D = fa::DType;
  std::vector<Case> cases;
  const std::vector<std::vector<int>> lengths = {
      {0, 1, 300, 1200}, {2047, 5, 999}, {4000}, {17, 64, 1}, {1500, 0}};
  struct Heads {
    int hq, hkv;
  };
  const Heads heads[] = {{8, 2}, {6, 1}, {4, 4}, {32, 8}, {16, 1}};
  const int sqs[] = {1, 3, 16, 2};
  struct M {
    bool causal;
    int wl, wr;
  };
  const M masks[] = {{false, -1, -1}, {true, -1, -1}, {true, 37, -1}, {false, 100, 3}};
  const int splits[] = {0, 1, 5, 128};
  int i = 0;
  for (D dtype : {D::bf16, D::fp16})
    for (int d : kHeadDims)
      for (int ps : {0, 1, 16, 64, 256}) {
        for (int rep = 0; rep < 2; ++rep, ++i) {
          const Heads hd = heads[i % 5];
          const int sq = sqs[(i / 5) % 4];
          const M m = masks[(i / 2) % 4];
          Case c{dtype,
                 d,
                 hd.hq,
                 hd.hkv,
                 sq,
                 lengths[i % 5],
                 ps,
                 (i % 3 == 0) ? std::min(sq, 2) : 0,
                 m.causal,
                 m.wl,
                 m.wr,
                 splits[(i / 3) % 4],
                 ps == 0 && (i % 4 == 1),
                 (i % 7 == 0) ? 6.f : 1.f};
          if (c.seqlen_new == 0 && i % 6 == 5) c.seqlen_new = 1;
          cases.push_back(c);
        }
      }
  // Softcap 5, 30 and 50: every head dim, paged and contiguous caches with an append, causal and
  // windowed rows, splits (the combine sees capped partial LSEs), large logits.
  int j = 0;
  for (float cap : {5.f, 30.f, 50.f})
    for (D dtype : {D::bf16, D::fp16})
      for (int d : kHeadDims) {
        const Heads hd = heads[j % 5];
        const M m = masks[j % 4];
        Case c{dtype, d, hd.hq, hd.hkv, sqs[j % 4], lengths[j % 5], (j % 2) ? 16 : 0,
               (j % 3 == 0) ? 1 : 0, m.causal, m.wl, m.wr, splits[j % 4], false,
               (j % 2) ? 6.f : 1.f};
        c.softcap = cap;
        cases.push_back(c);
        ++j;
      }
  // Rotary: interleaved and halves, rotary_dim = head_dim, head_dim / 2 and 6, every head dim,
  // causal / windowed (queries at cache_seqlens + i) and not (all at cache_seqlens), paged and
  // contiguous, GQA and MQA, seqlen_new 0, 1 and 3, splits, large logits.
  int r = 0;
  for (D dtype : {D::bf16, D::fp16})
    for (int d : kHeadDims)
      for (bool interleaved : {true, false}) {
        const Heads hd = heads[r % 5];
        const M m = masks[r % 4];
        const int sq = sqs[r % 4];
        const int seqlen_new = r % 3 == 0 ? 3 : (r % 3 == 1 ? 1 : 0);
        const int ps = r % 4 == 3 ? 1 : (r % 2 ? 16 : 0);
        Case c{dtype, d, hd.hq, hd.hkv, sq, lengths[r % 5], ps, seqlen_new, m.causal, m.wl, m.wr,
               splits[(r / 2) % 4], ps == 0 && r % 4 == 2, (r % 5 == 4) ? 6.f : 1.f};
        c.rotary_dim = r % 3 == 0 ? d : (r % 3 == 1 ? d / 2 : 6);
        c.interleaved = interleaved;
        cases.push_back(c);
        ++r;
      }
  // FP8 KV cache: both scale layouts, every head dim, both query dtypes, contiguous (with and
  // without cache_batch_idx) and paged (page 1, 16, 64), appends of 1 and 2 rows, GQA and MQA,
  // masks, splits, softcap, rotary on some, large logits.
  int f = 0;
  for (D dtype : {D::bf16, D::fp16})
    for (int d : kHeadDims)
      for (int layout : {1, 2}) {
        const Heads hd = heads[f % 5];
        const M m = masks[f % 4];
        const int ps = f % 4 == 0 ? 0 : (f % 4 == 1 ? 16 : (f % 4 == 2 ? 1 : 64));
        Case c{dtype,
               d,
               hd.hq,
               hd.hkv,
               sqs[f % 4],
               lengths[f % 5],
               ps,
               f % 3 == 2 ? 0 : 1 + f % 2,
               m.causal,
               m.wl,
               m.wr,
               splits[f % 4],
               ps == 0 && f % 8 == 4,
               (f % 5 == 3) ? 6.f : 1.f};
        if (f % 6 == 5) c.softcap = 30.f;
        if (f % 5 == 1) c.rotary_dim = d / 2;
        c.fp8 = layout;
        cases.push_back(c);
        ++f;
      }
  // Query rows of very different magnitudes (Case::q_spread): e4m3 caches at every head dim
  // (bf16 queries; fp16 at one), paged and contiguous, and a 16-bit cache.
  for (int d : kHeadDims) {
    Case c{D::bf16, d, 8, 2, 1, lengths[f % 5], d == 128 ? 0 : 16, 1, false, -1, -1, 0, false, 1.f};
    c.fp8 = 1 + f % 2;
    c.q_spread = true;
    cases.push_back(c);
    ++f;
  }
  for (int fp8 : {0, 1}) {
    Case c{fp8 ? D::fp16 : D::bf16, 128, 32, 8, 2, lengths[1], 16, 0, true, -1, -1, 5, false, 1.f};
    c.fp8 = fp8;
    c.q_spread = true;
    cases.push_back(c);
  }
  return cases;
}

const std::vector<Case>& all_cases() {
  static const std::vector<Case> c = grid();
  return c;
}

class GpuDecode : public ::testing::TestWithParam<size_t> {};

TEST_P(GpuDecode, MatchesFp64ReferenceAndAppendsExactly) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case& c = all_cases()[GetParam()];
  const uint64_t seed = run_seed() + GetParam() * 7919;
  Host h;
  build(c, seed, h);
  run(h);
  if (HasFatalFailure()) return;
  if (c.fp8 != 0) {  // the e4m3 cache: decode.h's quantisation of the given k/v
    EXPECT_TRUE(h.k8_after == h.k8_expect)
        << case_name(c) << ": e4m3 k cache differs from the expected quantised append";
    EXPECT_TRUE(h.v8_after == h.v8_expect)
        << case_name(c) << ": e4m3 v cache differs from the expected quantised append";
  } else {
    EXPECT_TRUE(h.k_after == h.k_expect)
        << case_name(c) << ": k cache differs from the expected append";
    EXPECT_TRUE(h.v_after == h.v_expect)
        << case_name(c) << ": v cache differs from the expected append";
  }
  check_against_reference(c, h, seed);
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuDecode, ::testing::Range<size_t>(0, all_cases().size()),
                         [](const auto& info) {
                           return case_name(all_cases()[info.param]) + "_n" +
                                  std::to_string(info.param);
                         });

// Case `c` built from one seed twice, contiguous and with page size `ps`, and both run.
void run_contiguous_and_paged(Case c, uint64_t seed, int ps, Host& contiguous, Host& paged) {
  build(c, seed, contiguous);
  c.page_size = ps;
  build(c, seed, paged);
  run(contiguous);
  run(paged);
}

// Two runs' outputs and LSE, bitwise.
void expect_bitwise_equal(const Host& a, const Host& b, const std::string& at) {
  EXPECT_EQ(std::memcmp(a.o.data(), b.o.data(), b.o.size() * 2), 0) << at;
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), b.lse.size() * 4), 0) << at;
}

// A paged cache and a contiguous one of the same capacity holding the same keys give bitwise equal
// outputs and LSE (same splits, same tiles, same arithmetic; only the addresses differ).
TEST(GpuDecodeLayouts, PagedEqualsContiguousBitwise) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (int d : kHeadDims)
    for (int ps : {1, 16, 64, 256}) {
      for (int num_splits : {0, 3}) {
        const Case c{fa::DType::bf16, d,     32,  8,   2, {3000, 0, 1, 700}, 0, 1, true, -1, -1,
                     num_splits,      false, 1.f, 4096};
        Host contiguous, paged;
        run_contiguous_and_paged(c, run_seed() + ps + 7 * d, ps, contiguous, paged);
        if (HasFatalFailure()) return;
        expect_bitwise_equal(contiguous, paged,
                             "d " + std::to_string(d) + " page size " + std::to_string(ps) +
                                 " splits " + std::to_string(num_splits));
      }
    }
}

// FP8 cache: with the same splits, paged == contiguous bitwise, as for 16-bit caches; results
// within FlashAttention's rule of the fp64 reference on the dequantised cache. (Not bitwise the
// 16-bit kernel on the dequantised cache: the FP8 kernel permutes the head dimension of its K and
// V fragment reads, so its MMAs sum in another order, and runs P·V in fp16.) With num_splits = 0
// a contiguous e4m3 cache may take fewer splits than a paged one (decode_splits.h), so there the
// paged run is checked against the reference instead.
TEST(GpuDecodeFp8, PagedEqualsContiguousAndBothMatchTheReference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (int d : kHeadDims)
    for (int layout : {1, 2})
      for (int ps : {1, 16, 256})
        for (int num_splits : {0, 3}) {
          Case c{fa::DType::bf16, d,     32,  8,   2, {3000, 0, 1, 700}, 0, 1, true, -1, -1,
                 num_splits,      false, 1.f, 4096};
          c.fp8 = layout;
          const uint64_t seed = run_seed() + ps + 17 * layout + 7 * d;
          Host contiguous, paged;
          run_contiguous_and_paged(c, seed, ps, contiguous, paged);
          if (HasFatalFailure()) return;
          const std::string at = "d " + std::to_string(d) + " layout " + std::to_string(layout) +
                                 " page size " + std::to_string(ps) + " splits " +
                                 std::to_string(num_splits);
          if (num_splits > 0) {
            expect_bitwise_equal(contiguous, paged, at);
            check_against_reference(c, contiguous, seed);
          } else {
            Case c_paged = c;
            c_paged.page_size = ps;
            check_against_reference(c_paged, paged, seed);
          }
        }
}

// Repeated runs give bitwise identical results (no races, no order-dependent reductions).
TEST(GpuDecodeDeterminism, RepeatedRunsAreBitwiseIdentical) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case c{fa::DType::fp16, 128, 32, 8, 1, {9000, 20, 4000}, 16, 1, false, -1, -1, 0,
               false,           1.f};
  Host h;
  build(c, run_seed(), h);
  std::vector<uint16_t> first;
  run(h, 5, &first);
  if (HasFatalFailure()) return;
  EXPECT_EQ(std::memcmp(first.data(), h.o.data(), first.size() * 2), 0);
}

// Long context and many splits: sampled rows are enough here, the grid covers the edges.
TEST(GpuDecodeLong, Batch1LongContextManySplits) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case c{fa::DType::bf16, 128, 32, 8, 1, {40000}, 64, 0, false, -1, -1, 0, false, 1.f};
  Host h;
  build(c, run_seed(), h);
  run(h);
  if (HasFatalFailure()) return;
  check_against_reference(c, h, run_seed());
}

// Split decodes reuse workspace from the library's pool (eager calls get recycled blocks; a
// captured graph replays with the same one): a call must never take an earlier call's partials for
// its own. Eager calls with new queries, then a captured graph replayed three times with the
// queries changed in between: each output is checked against the reference for the queries it was
// given. Batch 1, 6000 keys (the heuristic's ~32 splits) and a paged batch of 3 with 5 splits and 2
// queries.
TEST(GpuDecodeSplits, NewInputsAndGraphReplaysNeverSeeStalePartials) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case cases[] = {
      {fa::DType::bf16, 128, 32, 8, 1, {6000}, 0, 0, false, -1, -1, 0, false, 1.f},
      {fa::DType::fp16, 64, 16, 4, 2, {900, 0, 1700}, 16, 0, true, -1, -1, 5, false, 1.f},
      // Rotary: its copies of q and k_new come from the same pool (a replay re-appends the same
      // rotated keys at the same positions).
      {fa::DType::bf16, 128, 32, 8, 3, {900, 0, 1700}, 16, 2, true, -1, -1, 5, false, 1.f, 0,
       0.f, 64, false}};
  for (const Case& c : cases) {
    const uint64_t seed = run_seed() + 404;
    Host h;
    build(c, seed, h);
    OnDevice d(h);
    if (HasFatalFailure()) return;
    const size_t no = d.no, nl = d.nl;
    fa::DecodeParams p = d.p;
    p.check_indices = false;  // no synchronising index copy: the call can be captured
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    p.stream = stream;

    // Fresh queries for each run; the output and LSE poisoned first; the result checked.
    int round = 0;
    auto check_round = [&](const std::function<void()>& launch, const char* what) {
      fa::reference::fill_normal(h.q.data(), std::ssize(h.q), c.dtype, seed + 1000 + round++);
      rotate_on_host(c, h);
      upload(d.q, h.q);
      ASSERT_EQ(cudaMemset(d.o.ptr, 0xFF, no * 2), cudaSuccess);
      ASSERT_EQ(cudaMemset(d.lse.ptr, 0xFF, nl * 4), cudaSuccess);
      launch();
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << what;
      h.o.resize(no);
      h.lse.resize(nl);
      ASSERT_EQ(cudaMemcpy(h.o.data(), d.o.ptr, no * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(h.lse.data(), d.lse.ptr, nl * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      SCOPED_TRACE(what);
      check_against_reference(c, h, seed);
    };
    for (int i = 0; i < 3; ++i) {
      check_round([&] { ASSERT_TRUE(fa::decode(p).ok()); }, "eager call");
    }
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    const fa::Status captured = fa::decode(p);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_TRUE(captured.ok()) << captured.message;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int i = 0; i < 3; ++i) {
      check_round([&] { ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess); }, "graph replay");
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

// Bad indices in device memory are refused before anything is launched: the output keeps its
// poison and the cache is untouched. Unchecked, the same call runs, and decode_check_errors then
// reports the same entry in the same words, once.
TEST(GpuDecodeValidation, BadIndicesAreRefusedAndNothingIsWritten) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  (void)fa::decode_check_errors();  // whatever an earlier test left
  struct Bad {
    const char* says;
    std::function<void(Host&)> mutate;
  };
  const Bad bads[] = {
      {"page_table[1][0]: page 99999 is outside", [](Host& h) { h.table[h.p.max_pages] = 99999; }},
      {"page_table[0][2]: page -5 is outside", [](Host& h) { h.table[2] = -5; }},
      {"cache_seqlens[2]: 4096 + seqlen_new 1 exceeds the cache capacity 4096",
       [](Host& h) { h.seqlens[2] = 4096; }},
  };
  for (const Bad& bad : bads) {
    const Case c{fa::DType::bf16, 64, 8,  2, 1,     {100, 50, 10}, 16,  1,
                 false,           -1, -1, 0, false, 1.f,           4096};
    Host h;
    build(c, run_seed(), h);
    bad.mutate(h);
    OnDevice d(h);
    if (HasFatalFailure()) return;
    ASSERT_EQ(cudaMemset(d.o.ptr, 0xFF, d.no * 2), cudaSuccess);
    fa::DecodeParams p = d.p;
    p.lse = nullptr;
    const fa::Status s = fa::decode(p);
    EXPECT_EQ(s.code, fa::StatusCode::invalid_argument) << s.message;
    EXPECT_NE(s.message.find(bad.says), std::string::npos) << s.message;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    flashattn::testing::expect_all_poisoned(d.o.ptr, d.no);
    std::vector<uint16_t> k_after(h.k.size());
    ASSERT_EQ(cudaMemcpy(k_after.data(), d.k.ptr, h.k.size() * 2, cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(k_after == h.k) << "a refused call wrote the cache";
    EXPECT_TRUE(fa::decode_check_errors().ok()) << "a refused call recorded an error";

    // Unchecked (check_indices off), the same bad input must still not fault: out-of-range pages
    // and lengths are never dereferenced. The kernel records what it met.
    p.check_indices = false;
    EXPECT_TRUE(fa::decode(p).ok());
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const fa::Status e = fa::decode_check_errors();
    EXPECT_EQ(e.code, fa::StatusCode::invalid_argument) << e.message;
    EXPECT_EQ(e.message.rfind(bad.says, 0), 0u) << e.message;
    EXPECT_NE(e.message.find("check_indices off"), std::string::npos) << e.message;
    const fa::Status again = fa::decode_check_errors();
    EXPECT_TRUE(again.ok()) << "the record was not cleared: " << again.message;
  }
}

// decode_check_errors on a contiguous cache (a cache_batch_idx row and a negative length), after
// good unchecked calls (nothing recorded, with one and several splits, an FP8 cache too), and
// after CUDA graph replays (the kernel records when replayed; the check refuses a capturing
// stream and reports on the replay stream).
TEST(GpuDecodeErrors, ReportedAfterUncheckedCallsAndGraphReplays) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  (void)fa::decode_check_errors();
  const auto unchecked = [](OnDevice& d) {
    fa::DecodeParams p = d.p;
    p.check_indices = false;
    const fa::Status s = fa::decode(p);
    EXPECT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  };
  const auto reports = [](const std::string& what) {
    const fa::Status e = fa::decode_check_errors();
    EXPECT_EQ(e.code, fa::StatusCode::invalid_argument) << e.message;
    EXPECT_EQ(e.message.rfind(what, 0), 0u) << e.message;
    EXPECT_TRUE(fa::decode_check_errors().ok());
  };
  for (int fp8 : {0, 1})
    for (int splits : {1, 4}) {
      Case c{fa::DType::fp16, 128,    8,   2, 2, {100, 50, 10}, 0, 1, true, -1, -1,
             splits,          true, 1.f, 512};
      c.fp8 = fp8;
      Host good;
      build(c, run_seed() + 31, good);
      OnDevice g(good);
      if (HasFatalFailure()) return;
      unchecked(g);
      const fa::Status none = fa::decode_check_errors();
      EXPECT_TRUE(none.ok()) << "fp8 " << fp8 << " splits " << splits << ": " << none.message;

      Host row = good;
      row.idx[1] = 7;  // the cache has batch + 2 = 5 rows
      OnDevice r(row);
      if (HasFatalFailure()) return;
      unchecked(r);
      reports("cache_batch_idx[1]: 7 is outside [0, cache_batch = 5)");

      Host neg = good;
      neg.seqlens[0] = -3;
      OnDevice n(neg);
      if (HasFatalFailure()) return;
      unchecked(n);
      reports("cache_seqlens[0]: must be >= 0, got -3");
    }

  // Graph capture of an unchecked call with a bad page: nothing is recorded at capture, the
  // check refuses the capturing stream, and each replay records.
  const Case c{fa::DType::bf16, 64, 8, 2, 1, {100, 50, 10}, 16, 1, false, -1, -1, 0, false, 1.f,
               4096};
  Host h;
  build(c, run_seed() + 37, h);
  h.table[2 * h.p.max_pages + 0] = -1;
  OnDevice d(h);
  if (HasFatalFailure()) return;
  fa::DecodeParams p = d.p;
  p.check_indices = false;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  p.stream = stream;
  ASSERT_TRUE(fa::decode(p).ok());  // eager first: the graph then captures a warm path
  ASSERT_EQ(fa::decode_check_errors(stream).code, fa::StatusCode::invalid_argument);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const fa::Status captured = fa::decode(p);
  const fa::Status during = fa::decode_check_errors(stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured.message;
  EXPECT_EQ(during.code, fa::StatusCode::invalid_argument) << during.message;
  EXPECT_NE(during.message.find("stream: is capturing a CUDA graph"), std::string::npos)
      << during.message;
  EXPECT_TRUE(fa::decode_check_errors(stream).ok()) << "capture alone recorded an error";
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    const fa::Status e = fa::decode_check_errors(stream);
    EXPECT_EQ(e.code, fa::StatusCode::invalid_argument) << e.message;
    EXPECT_EQ(e.message.rfind("page_table[2][0]: page -1 is outside [0, num_pages = ", 0), 0u)
        << e.message;
  }
  EXPECT_TRUE(fa::decode_check_errors(stream).ok());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// A rotary table that does not cover a position is refused (check_indices) before anything is
// written; unchecked, the same call reads only inside the table and does not fault.
TEST(GpuDecodeValidation, ShortRotaryTableIsRefusedAndNothingIsWritten) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Case c{fa::DType::fp16, 64, 8, 2, 2, {100, 50, 10}, 16, 1, true, -1, -1, 0, false, 1.f, 4096};
  c.rotary_dim = 32;
  Host h;
  build(c, run_seed(), h);
  h.p.seqlen_ro = 101;  // entry 0 uses positions up to 101 (queries 100, 101; key 100)
  OnDevice d(h);
  if (HasFatalFailure()) return;
  ASSERT_EQ(cudaMemset(d.o.ptr, 0xFF, d.no * 2), cudaSuccess);
  fa::DecodeParams p = d.p;
  const fa::Status s = fa::decode(p);
  EXPECT_EQ(s.code, fa::StatusCode::invalid_argument) << s.message;
  EXPECT_NE(s.message.find("cache_seqlens[0]: 100 uses rotary positions up to 101"),
            std::string::npos)
      << s.message;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  flashattn::testing::expect_all_poisoned(d.o.ptr, d.no);
  std::vector<uint16_t> k_after(h.k.size());
  ASSERT_EQ(cudaMemcpy(k_after.data(), d.k.ptr, h.k.size() * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_TRUE(k_after == h.k) << "a refused call wrote the cache";
  p.check_indices = false;
  EXPECT_TRUE(fa::decode(p).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
