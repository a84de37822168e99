// Kernel::cpu: FlashAttention's forward algorithm on the host. Each work item is one
// (batch, query head, tile of kTileQ query rows); it walks the key blocks its mask can see,
// keeping a running max m and sum l per row in fp32:
//     S = Q·Kᵀ (Q pre-scaled by scale·log2 e),  m' = max(m, rowmax S),  P = 2^(S - m'),
//     l = l·2^(m - m') + rowsum P,  O = O·2^(m - m') + P·V
// and at the end writes O / l in the output type and LSE = (m + log2 l)·ln 2. FP8 (e4m3) inputs
// are dequantised on load (times their (batch, KV head) descale, or with K8's block descales their
// row's block's) and then computed exactly like 16-bit ones; o is then written in out_dtype. With
// softcap, Q is pre-scaled by softcap_scale instead and each logit becomes
// scale_log2·tanh(q·k·softcap_scale), scale_log2 being softcap·log2(e) then (Problem's convention).
// Unlike a GPU kernel, P stays in fp32 (there are no 16-bit tensor-core operands to feed), so this
// backend is a little more accurate than the emulated kernel the oracle compares against.
//
// Tiles are copied to contiguous fp32 scratch (K transposed) so that both products are the same
// small register-blocked GEMM, which the compiler vectorises without -ffast-math.
//
// Variable length: sequence b is rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1 of the packed
// tensors (validation checked the host arrays), masked on its own lengths; its work items are
// the tiles of its own rows, the rest of the grid's items (sized by the longest) return at once.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/entry.h"
#include "common/host_dtype.h"
#include "common/host_parallel.h"
#include "common/sink.h"

namespace flashattn {
namespace {

constexpr int kTileQ = 64;  // query rows per work item
constexpr int kTileK = 64;  // keys per block
// Register block of the GEMM: 4 rows x 8 columns of C stay in registers across the k loop (eight
// SSE registers, four AVX ones), with one row of B loaded per k.
constexpr int kBlockM = 4;
constexpr int kBlockN = 8;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

constexpr int round_up(int x, int m) {
  return (x + m - 1) / m * m;
}

// 2^x for x <= 0 without a libm call, so that the loops over a block's P vectorise: x = n + f
// with n = round(x) and |f| <= 1/2, 2^f by its Taylor polynomial of degree 7 (truncation error
// 5e-9 relative, below fp32's ulp), 2^n put in the exponent bits. Inputs at or below -126.5,
// -inf included (masked logits, a first running max), return exactly 0.
inline float exp2_nonpositive(float x) {
  x = x < -127.f ? -127.f : x;
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x + kRound) - kRound;
  const float f = x - n;
  float p = 1.525273380405984e-05f;  // ln(2)^k / k!, k = 7 down to 0
  p = p * f + 1.5403530393381608e-04f;
  p = p * f + 1.3333558146428443e-03f;
  p = p * f + 9.6181291076284772e-03f;
  p = p * f + 5.5504108664821580e-02f;
  p = p * f + 2.4022650695910071e-01f;
  p = p * f + 6.9314718055994531e-01f;
  p = p * f + 1.0f;
  const int32_t biased = static_cast<int32_t>(n) + 127;  // 0 (the result 0) .. 127
  return p * std::bit_cast<float>(biased << 23);
}

// C[M x N] += A[M x K] · B[K x N], all row-major fp32; M a multiple of kBlockM, N of kBlockN.
// Each C element is summed over k in order, so results do not depend on threads or blocking.
void gemm_accumulate(const float* a, ptrdiff_t lda, const float* b, ptrdiff_t ldb, float* c,
                     ptrdiff_t ldc, ptrdiff_t m, ptrdiff_t n, ptrdiff_t k) {
  for (ptrdiff_t i0 = 0; i0 < m; i0 += kBlockM) {
    for (ptrdiff_t j0 = 0; j0 < n; j0 += kBlockN) {
      float acc[kBlockM][kBlockN];
      for (int i = 0; i < kBlockM; ++i)
        for (int j = 0; j < kBlockN; ++j) acc[i][j] = c[(i0 + i) * ldc + j0 + j];
      for (ptrdiff_t kk = 0; kk < k; ++kk) {
        const float* brow = b + kk * ldb + j0;
        for (int i = 0; i < kBlockM; ++i) {
          const float av = a[(i0 + i) * lda + kk];
          for (int j = 0; j < kBlockN; ++j) acc[i][j] += av * brow[j];
        }
      }
      for (int i = 0; i < kBlockM; ++i)
        for (int j = 0; j < kBlockN; ++j) c[(i0 + i) * ldc + j0 + j] = acc[i][j];
    }
  }
}

// FP8 inputs: the descale of each row a tile loads. Per-head descales give one value for the
// (sequence, KV head), null ones 1; block descales (K8) one per block of `rows` rows of the
// (sequence, head), the row numbered from the sequence's first.
struct RowDescale {
  float value = 1.f;             // without block descales
  const float* block = nullptr;  // this (sequence, head)'s blocks, or null
  int rows = 1;                  // rows per block
  float operator()(int row) const { return block != nullptr ? block[row / rows] : value; }
};

// Converts `rows` rows of `dim` values of `dtype` (row r at element first + r * row_stride of
// base; row `row0` + r of its sequence) to fp32 times the row's descale, then times `scale`, into
// dst with leading dimension ld. Columns [dim, ld) are left as they are. The descale multiplies
// first so that an e4m3 input with a descale gives the same floats as its dequantised 16-bit copy
// (when that copy is exact).
void load_rows(const void* base, int64_t first, int64_t row_stride, int rows, int dim, DType dtype,
               const RowDescale& descale, int row0, float scale, float* dst, ptrdiff_t ld) {
  for (int r = 0; r < rows; ++r) {
    const int64_t row = first + r * row_stride;
    float* out = dst + r * ld;
    if (dtype == DType::e4m3) {
      const uint8_t* in = static_cast<const uint8_t*>(base) + row;
      const float ds = descale(row0 + r);
      for (int i = 0; i < dim; ++i) out[i] = e4m3_to_float(in[i]) * ds * scale;
    } else if (dtype == DType::bf16) {
      const uint16_t* in = static_cast<const uint16_t*>(base) + row;
      for (int i = 0; i < dim; ++i) out[i] = bf16_to_float(in[i]) * scale;
    } else {
      const uint16_t* in = static_cast<const uint16_t*>(base) + row;
      for (int i = 0; i < dim; ++i) out[i] = fp16_to_float(in[i]) * scale;
    }
  }
}

// FP8 inputs: the descale of (sequence b, KV head h) from a (batch, heads_kv) array; null is 1.
float descale_of(const float* descale, int b, int kv_head, int heads_kv) {
  return descale != nullptr ? descale[int64_t{b} * heads_kv + kv_head] : 1.f;
}

// The row descales of (sequence b, head h) of a tensor: its per-head descale (KV head kv_head of
// a (batch, heads_kv) array), or its blocks of a (batch, heads, ceil(seqlen / rows)) array.
RowDescale row_descale(const float* per_head, const float* blocks, int rows, int seqlen, int b,
                       int head, int heads, int kv_head, int heads_kv) {
  if (blocks == nullptr) return {descale_of(per_head, b, kv_head, heads_kv)};
  const int64_t nblocks = (int64_t{seqlen} + rows - 1) / rows;
  return {1.f, blocks + (int64_t{b} * heads + head) * nblocks, rows};
}

// Per-worker scratch, sized once for the problem. Padding rows and columns stay zero so the
// GEMM's fixed blocking reads finite values.
struct Scratch {
  int d = 0;
  ptrdiff_t dv_pad = 0;
  std::vector<float> q;     // kTileQ x d, pre-scaled by scale·log2(e)
  std::vector<float> k;     // kTileK x d, one key block as stored
  std::vector<float> kt;    // d x kTileK, the block transposed (S's B operand)
  std::vector<float> v;     // kTileK x dv_pad
  std::vector<float> s;     // kTileQ x kTileK: logits, then P in place
  std::vector<float> o;     // kTileQ x dv_pad accumulator
  std::vector<float> m, l;  // running max (log2 domain) and sum per row

  void size_for(const Problem& pr) {
    if (!q.empty()) return;
    d = pr.head_dim;
    dv_pad = round_up(pr.head_dim_v, kBlockN);
    q.assign(size_t{kTileQ} * d, 0.f);
    k.assign(size_t{kTileK} * d, 0.f);
    kt.assign(size_t{kTileK} * d, 0.f);
    v.assign(size_t{kTileK} * dv_pad, 0.f);
    s.assign(size_t{kTileQ} * kTileK, 0.f);
    o.assign(size_t{kTileQ} * dv_pad, 0.f);
    m.assign(kTileQ, kNegInf);
    l.assign(kTileQ, 0.f);
  }
};

// The online-softmax update for one row of the block: returns after rescaling the row's running
// state and turning its logits into P (0 where masked).
void softmax_row(float* s_row, float* o_row, ptrdiff_t dv_pad, float& m, float& l) {
  float block_max = kNegInf;
  for (int c = 0; c < kTileK; ++c) block_max = std::max(block_max, s_row[c]);
  const float m_new = std::max(m, block_max);
  if (m_new == kNegInf) {  // nothing visible yet: P = 0, state unchanged
    std::fill(s_row, s_row + kTileK, 0.f);
    return;
  }
  for (int c = 0; c < kTileK; ++c) s_row[c] = exp2_nonpositive(s_row[c] - m_new);
  float sum = 0.f;  // a separate loop: the exp2 loop vectorises only without the fp32 reduction
  for (int c = 0; c < kTileK; ++c) sum += s_row[c];
  const float alpha = exp2_nonpositive(m - m_new);  // 0 for the first visible block
  if (alpha != 1.f)
    for (ptrdiff_t c = 0; c < dv_pad; ++c) o_row[c] *= alpha;
  l = l * alpha + sum;
  m = m_new;
}

// One sequence: dense batch b (rows from 0, batch stride b) or packed sequence b (batch stride
// unused, rows from its first token), with the mask on its own lengths.
struct Sequence {
  int index = 0;  // b: the row of the (batch, heads_kv) descales
  int batch = 0;  // multiplies stride[0]; 0 for packed sequences
  int q_begin = 0, k_begin = 0;
  int len_q = 0;
  Mask mask;
  int64_t lse_row0 = 0;  // LSE index of row 0 of head 0; heads lse_head_stride apart
  int64_t lse_head_stride = 0;
};

Sequence sequence(const Problem& pr, int b) {
  Sequence s;
  s.index = b;
  s.mask = pr.mask;
  if (!pr.varlen()) {
    s.batch = b;
    s.len_q = pr.seqlen_q;
    s.lse_row0 = int64_t{b} * pr.heads_q * pr.seqlen_q;  // dense (batch, heads_q, seqlen_q)
    s.lse_head_stride = pr.seqlen_q;
    return s;
  }
  s.q_begin = pr.cu_seqlens_q[b];
  s.k_begin = pr.cu_seqlens_k[b];
  s.len_q = pr.cu_seqlens_q[b + 1] - s.q_begin;
  s.mask.seqlen_q = s.len_q;  // the window stays; bottom-right aligned on this sequence
  s.mask.seqlen_k = pr.cu_seqlens_k[b + 1] - s.k_begin;
  s.lse_row0 = s.q_begin;  // packed (heads_q, total_q)
  s.lse_head_stride = pr.total_q;
  return s;
}

void run_tile(const Problem& pr, const Sequence& seq, int head, int tile, Scratch& ws) {
  const int d = pr.head_dim, dv = pr.head_dim_v;
  const ptrdiff_t dv_pad = ws.dv_pad;
  const int q0 = tile * kTileQ;
  const int nq = std::min(kTileQ, seq.len_q - q0);
  if (nq <= 0) return;  // a tile past this sequence's rows (variable length)
  const int64_t batch = seq.batch;
  const ptrdiff_t nq_rows = nq;
  const ptrdiff_t mq = round_up(nq, kBlockM);  // rows the GEMMs compute; extra rows are zero Q
  const int kv_head = head / pr.group;
  const RowDescale q_descale =
      row_descale(pr.q_descale, pr.q_block_descale, pr.q_block_rows, pr.seqlen_q, seq.index, head,
                  pr.heads_q, kv_head, pr.heads_kv);
  const RowDescale k_descale =
      row_descale(pr.k_descale, pr.k_block_descale, pr.kv_block_rows, pr.seqlen_k, seq.index,
                  kv_head, pr.heads_kv, kv_head, pr.heads_kv);
  const RowDescale v_descale =
      row_descale(pr.v_descale, pr.v_block_descale, pr.kv_block_rows, pr.seqlen_k, seq.index,
                  kv_head, pr.heads_kv, kv_head, pr.heads_kv);

  std::fill(ws.q.begin(), ws.q.end(), 0.f);
  const bool softcap = pr.has_softcap();
  load_rows(pr.q,
            batch * pr.q_stride[0] + (seq.q_begin + q0) * pr.q_stride[1] + head * pr.q_stride[2],
            pr.q_stride[1], nq, d, pr.dtype, q_descale, q0,
            softcap ? pr.softcap_scale : pr.scale_log2, ws.q.data(), d);
  std::fill(ws.o.begin(), ws.o.end(), 0.f);
  std::fill(ws.m.begin(), ws.m.end(), kNegInf);
  std::fill(ws.l.begin(), ws.l.end(), 0.f);

  int key_begin = 0, key_end = 0;
  seq.mask.key_range(q0, q0 + nq, key_begin, key_end);
  for (int j0 = key_begin; j0 < key_end; j0 += kTileK) {
    const int nk = std::min(kTileK, key_end - j0);
    const int64_t key = seq.k_begin + j0;
    const int64_t k_off = batch * pr.k_stride[0] + key * pr.k_stride[1] + kv_head * pr.k_stride[2];
    const int64_t v_off = batch * pr.v_stride[0] + key * pr.v_stride[1] + kv_head * pr.v_stride[2];

    // K block, transposed so S = Q·Kᵀ is a row-major GEMM; keys past nk are zero.
    if (nk < kTileK) std::fill(ws.k.begin(), ws.k.end(), 0.f);
    load_rows(pr.k, k_off, pr.k_stride[1], nk, d, pr.dtype, k_descale, j0, 1.f, ws.k.data(), d);
    for (ptrdiff_t c = 0; c < kTileK; ++c)
      for (ptrdiff_t i = 0; i < d; ++i) ws.kt[i * kTileK + c] = ws.k[c * d + i];
    load_rows(pr.v, v_off, pr.v_stride[1], nk, dv, pr.dtype, v_descale, j0, 1.f, ws.v.data(),
              dv_pad);

    // S = Q·Kᵀ, then -inf wherever the key is past the block or the mask hides it.
    std::fill(ws.s.begin(), ws.s.begin() + mq * kTileK, 0.f);
    gemm_accumulate(ws.q.data(), d, ws.kt.data(), kTileK, ws.s.data(), kTileK, mq, kTileK, d);
    const bool all_visible = seq.mask.tile_all_visible(q0, q0 + nq, j0, j0 + nk);
    for (int r = 0; r < nq; ++r) {
      float* s_row = ws.s.data() + ptrdiff_t{r} * kTileK;
      if (softcap)
        for (int c = 0; c < nk; ++c) s_row[c] = pr.scale_log2 * std::tanh(s_row[c]);
      std::fill(s_row + nk, s_row + kTileK, kNegInf);
      if (!all_visible)
        for (int c = 0; c < nk; ++c)
          if (!seq.mask.visible(q0 + r, j0 + c)) s_row[c] = kNegInf;
      softmax_row(s_row, ws.o.data() + r * dv_pad, dv_pad, ws.m[r], ws.l[r]);
    }
    // GEMM padding rows (nq..mq) get P = 0, so their accumulator rows stay 0.
    std::fill(ws.s.begin() + nq_rows * kTileK, ws.s.begin() + mq * kTileK, 0.f);

    // O += P·V (the rescale by 2^(m - m') happened in softmax_row).
    gemm_accumulate(ws.s.data(), kTileK, ws.v.data(), dv_pad, ws.o.data(), dv_pad, mq, dv_pad, nk);
  }

  // Epilogue: O / l in the output type; a row that saw no key writes 0 and LSE -inf. With an
  // attention sink, the sink joins the denominator (common/sink.h; LSE = the sink for such a row).
  for (int r = 0; r < nq; ++r) {
    const int row = q0 + r;
    const float l = ws.l[r];
    float inv = l > 0.f ? 1.f / l : 0.f;
    float lse = l > 0.f ? ws.m[r] * kLn2 + std::log(l) : kNegInf;
    if (pr.sinks != nullptr) {
      const SinkNorm n = normalize_with_sink(l, ws.m[r], pr.sinks[head]);
      inv = n.inv;
      lse = n.lse;
    }
    const float* o_row = ws.o.data() + r * dv_pad;
    const int64_t o_off =
        batch * pr.o_stride[0] + (seq.q_begin + row) * pr.o_stride[1] + head * pr.o_stride[2];
    for (int c = 0; c < dv; ++c) store_from_float(pr.o, o_off + c, o_row[c] * inv, pr.out_dtype);
    if (pr.lse != nullptr) pr.lse[seq.lse_row0 + head * seq.lse_head_stride + row] = lse;
  }
}

}  // namespace

Status cpu_forward(const Problem& pr) {
  const int tiles = (pr.seqlen_q + kTileQ - 1) / kTileQ;
  const int64_t items = int64_t{pr.batch} * pr.heads_q * tiles;
  std::vector<Scratch> scratch(static_cast<size_t>(host::worker_count(items)));
  host::parallel_for(items, [&](int worker, int64_t i) {
    // Last tiles first: under a causal mask they see the most keys, and starting the longest
    // items early evens out the workers' finishing times.
    const int tile = tiles - 1 - static_cast<int>(i % tiles);
    const int head = static_cast<int>(i / tiles % pr.heads_q);
    const int batch = static_cast<int>(i / tiles / pr.heads_q);
    Scratch& ws = scratch[static_cast<size_t>(worker)];
    ws.size_for(pr);
    run_tile(pr, sequence(pr, batch), head, tile, ws);
  });
  return Status::success();
}

}  // namespace flashattn
