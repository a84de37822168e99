// Kernel::cpu backward: FlashAttention's backward on the host, in double, from the forward's O and
// LSE as given. For a row i and a key j it sees (P recomputed, never stored):
//     P_ij = exp(scale·q_i·k_j - lse_i),  D_i = dO_i·O_i,  dP_ij = dO_i·v_j,
//     dS_ij = P_ij (dP_ij - D_i),
//     dV_j += P_ij dO_i,  dK_j += scale·dS_ij q_i,  dQ_i += scale·dS_ij k_j.
// The lse includes the sink, so P is already normalised with it; the sink logit's own gradient is
//     dsinks[h] = -sum over rows of exp(sink_h - lse_i) D_i.
// With softcap the logit is softcap·t, t = tanh(q_i·k_j·softcap_scale): P_ij = exp(softcap·t -
// lse_i), and dS_ij gains the factor 1 - t² (d tanh) before the dQ and dK products, which keep
// their `scale`.
//
// Three passes, each output element owned by one work item, so nothing is shared between threads
// and every sum runs in a fixed order: results are bitwise reproducible whatever the thread count
// (`deterministic` changes nothing here).
//   1. D for every row (and then dsinks, serially per head);
//   2. dQ: per (sequence, query head, tile of 64 rows), walking the key blocks the rows see;
//   3. dK, dV: per (sequence, KV head, tile of 64 keys), walking every query head of the KV
//      head's group and the rows that see the keys (Mask::query_begin/query_end).
// Passes 2 and 3 both recompute S and dP (7 GEMMs per block pair instead of FlashAttention-2's 5)
// in exchange for needing no atomics and no dQ accumulator.
//
// Tiles are copied to contiguous double scratch, zero padded to full tiles, so that every product
// is the same register-blocked GEMM.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/host_dtype.h"
#include "common/host_parallel.h"
#include "kernels/cpu/entry.h"

namespace flashattn {
namespace {

constexpr int kTile = 64;  // rows per query tile and keys per key block
// Register block of the GEMM: 4 x 8 doubles of C stay in registers across the k loop.
constexpr int kBlockM = 4;
constexpr int kBlockN = 8;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// C[m x n] += A[m x k] · B[k x n], row-major doubles; m a multiple of kBlockM, n of kBlockN.
// Each C element is summed over k in order.
void gemm_accumulate(const double* a, ptrdiff_t lda, const double* b, ptrdiff_t ldb, double* c,
                     ptrdiff_t ldc, ptrdiff_t m, ptrdiff_t n, ptrdiff_t k) {
  for (ptrdiff_t i0 = 0; i0 < m; i0 += kBlockM) {
    for (ptrdiff_t j0 = 0; j0 < n; j0 += kBlockN) {
      double acc[kBlockM][kBlockN];
      for (int i = 0; i < kBlockM; ++i)
        for (int j = 0; j < kBlockN; ++j) acc[i][j] = c[(i0 + i) * ldc + j0 + j];
      for (ptrdiff_t kk = 0; kk < k; ++kk) {
        const double* brow = b + kk * ldb + j0;
        for (int i = 0; i < kBlockM; ++i) {
          const double av = a[(i0 + i) * lda + kk];
          for (int j = 0; j < kBlockN; ++j) acc[i][j] += av * brow[j];
        }
      }
      for (int i = 0; i < kBlockM; ++i)
        for (int j = 0; j < kBlockN; ++j) c[(i0 + i) * ldc + j0 + j] = acc[i][j];
    }
  }
}

// One sequence: dense batch b (rows from 0, batch stride b) or packed sequence b (batch stride
// unused, rows from its first token).
struct Sequence {
  int batch = 0;  // multiplies stride[0]; 0 for packed sequences
  int q_begin = 0, k_begin = 0;
  int len_q = 0, len_k = 0;
  Mask mask;
};

std::vector<Sequence> sequences(const Problem& pr) {
  std::vector<Sequence> out(static_cast<size_t>(pr.batch));
  for (int b = 0; b < pr.batch; ++b) {
    Sequence& s = out[static_cast<size_t>(b)];
    if (!pr.varlen()) {
      s = {b, 0, 0, pr.seqlen_q, pr.seqlen_k, pr.mask};
      continue;
    }
    s.q_begin = pr.cu_seqlens_q[b];
    s.k_begin = pr.cu_seqlens_k[b];
    s.len_q = pr.cu_seqlens_q[b + 1] - s.q_begin;
    s.len_k = pr.cu_seqlens_k[b + 1] - s.k_begin;
    s.mask = pr.mask;  // the window; each sequence is bottom-right aligned on its own lengths
    s.mask.seqlen_q = s.len_q;
    s.mask.seqlen_k = s.len_k;
  }
  return out;
}

// Where row `row` of sequence `s`, head `head`, starts in a tensor of these strides.
int64_t at(const int64_t (&stride)[3], const Sequence& s, int token, int head) {
  return s.batch * stride[0] + int64_t{token} * stride[1] + head * stride[2];
}

// Index of (head, row) of sequence s in the LSE (and in D, laid out the same way): dense
// (batch, heads_q, seqlen_q), packed (heads_q, total_q).
int64_t lse_index(const Problem& pr, const Sequence& s, int head, int row) {
  if (pr.varlen()) return int64_t{head} * pr.total_q + s.q_begin + row;
  return (int64_t{s.batch} * pr.heads_q + head) * pr.seqlen_q + row;
}

// `rows` rows of `dim` values (row r at src + r * row_stride) into dst (leading dimension ld),
// as doubles; rows [rows, kTile) are zeroed.
void load_rows(const void* base, int64_t offset, int64_t row_stride, int rows, int dim, DType dtype,
               double* dst, ptrdiff_t ld) {
  const auto* s = static_cast<const uint16_t*>(base) + offset;
  for (int r = 0; r < rows; ++r) {
    const uint16_t* in = s + r * row_stride;
    double* out = dst + r * ld;
    if (dtype == DType::bf16) {
      for (int i = 0; i < dim; ++i) out[i] = bf16_to_float(in[i]);
    } else {
      for (int i = 0; i < dim; ++i) out[i] = fp16_to_float(in[i]);
    }
  }
  std::fill(dst + ptrdiff_t{rows} * ld, dst + ptrdiff_t{kTile} * ld, 0.0);
}

// dst[dim x kTile] = src[kTile x dim]ᵀ.
void transpose(const double* src, int dim, double* dst) {
  for (ptrdiff_t r = 0; r < kTile; ++r)
    for (ptrdiff_t c = 0; c < dim; ++c) dst[c * kTile + r] = src[r * dim + c];
}

void store_rows(void* base, int64_t offset, int64_t row_stride, int rows, int dim, DType dtype,
                const double* src, double scale) {
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < dim; ++c) {
      const double x = src[ptrdiff_t{r} * dim + c] * scale;
      store_from_float(base, offset + r * row_stride + c, static_cast<float>(x), dtype);
    }
  }
}

// Per-worker scratch: one tile of each operand, sized once.
struct Scratch {
  std::vector<double> a, a_t;      // Q rows, and transposed
  std::vector<double> b, b_t;      // dO rows, and transposed
  std::vector<double> x, x_t;      // K rows, and transposed
  std::vector<double> y, y_t;      // V rows, and transposed
  std::vector<double> s, dp;       // kTile x kTile: logits then P; dP then dS
  std::vector<double> acc1, acc2;  // dQ, or dK and dV
  std::vector<double> lse, d;      // per row of the query tile

  void size_for(const Problem& pr) {
    if (!s.empty()) return;
    const size_t t = kTile, dm = static_cast<size_t>(std::max(pr.head_dim, pr.head_dim_v));
    for (auto* v : {&a, &a_t, &b, &b_t, &x, &x_t, &y, &y_t, &acc1, &acc2}) v->assign(t * dm, 0.0);
    s.assign(t * t, 0.0);
    dp.assign(t * t, 0.0);
    lse.assign(t, 0.0);
    d.assign(t, 0.0);
  }
};

// The logit of a raw product q·k: scale·q·k, or softcap·tanh(q·k·softcap_scale), in double.
struct Logit {
  double scale = 0, softcap = 0, softcap_scale = 0;

  explicit Logit(const Problem& pr) : scale(pr.scale) {
    if (pr.has_softcap()) {
      softcap = pr.softcap;
      softcap_scale = double{pr.scale} / pr.softcap;
    }
  }
};

// The five steps on one (query tile, key block) pair once S and dP are in place (rows x keys):
// P = exp(logit(S) - lse) where visible, else 0; dS = P (dP - D) (times 1 - t² with softcap), in
// place of dP.
void softmax_grad(const Sequence& s, const Logit& lg, int q0, int nq, int k0, int nk,
                  const double* lse, const double* d, double* s_tile, double* dp_tile) {
  const bool all_visible = s.mask.tile_all_visible(q0, q0 + nq, k0, k0 + nk);
  for (int r = 0; r < kTile; ++r) {
    double* srow = s_tile + ptrdiff_t{r} * kTile;
    double* dprow = dp_tile + ptrdiff_t{r} * kTile;
    // A row past the tile, or one whose LSE is -inf (it sees no key), contributes nothing: exp of
    // S + inf would be inf, and inf * 0 NaN.
    if (r >= nq || lse[r] == kNegInf) {
      std::fill(srow, srow + kTile, 0.0);
      std::fill(dprow, dprow + kTile, 0.0);
      continue;
    }
    if (lg.softcap > 0) {
      for (int c = 0; c < kTile; ++c) {
        const bool seen = c < nk && (all_visible || s.mask.visible(q0 + r, k0 + c));
        const double t = std::tanh(srow[c] * lg.softcap_scale);
        const double p = seen ? std::exp(lg.softcap * t - lse[r]) : 0.0;
        srow[c] = p;
        dprow[c] = p * (dprow[c] - d[r]) * (1.0 - t * t);
      }
      continue;
    }
    for (int c = 0; c < kTile; ++c) {
      const bool seen = c < nk && (all_visible || s.mask.visible(q0 + r, k0 + c));
      const double p = seen ? std::exp(lg.scale * srow[c] - lse[r]) : 0.0;
      srow[c] = p;
      dprow[c] = p * (dprow[c] - d[r]);
    }
  }
}

// Loads the LSE and D of rows [q0, q0 + nq) of (s, head).
void load_row_stats(const Problem& pr, const Sequence& s, int head, int q0, int nq,
                    const std::vector<double>& d_all, Scratch& ws) {
  for (int r = 0; r < nq; ++r) {
    const int64_t i = lse_index(pr, s, head, q0 + r);
    ws.lse[r] = pr.lse[i];
    ws.d[r] = d_all[static_cast<size_t>(i)];
  }
}

// Pass 2: dQ of one tile of rows.
void dq_tile(const BackwardProblem& bp, const Sequence& s, int head, int q0,
             const std::vector<double>& d_all, Scratch& ws) {
  const Problem& pr = bp.fwd;
  const int d = pr.head_dim, dv = pr.head_dim_v, kv_head = head / pr.group;
  const int nq = std::min(kTile, s.len_q - q0);
  load_rows(pr.q, at(pr.q_stride, s, s.q_begin + q0, head), pr.q_stride[1], nq, d, pr.dtype,
            ws.a.data(), d);
  load_rows(bp.dout, at(bp.dout_stride, s, s.q_begin + q0, head), bp.dout_stride[1], nq, dv,
            pr.dtype, ws.b.data(), dv);
  load_row_stats(pr, s, head, q0, nq, d_all, ws);
  std::fill(ws.acc1.begin(), ws.acc1.end(), 0.0);

  int key_begin = 0, key_end = 0;
  s.mask.key_range(q0, q0 + nq, key_begin, key_end);
  for (int k0 = key_begin; k0 < key_end; k0 += kTile) {
    const int nk = std::min(kTile, key_end - k0);
    load_rows(pr.k, at(pr.k_stride, s, s.k_begin + k0, kv_head), pr.k_stride[1], nk, d, pr.dtype,
              ws.x.data(), d);
    load_rows(pr.v, at(pr.v_stride, s, s.k_begin + k0, kv_head), pr.v_stride[1], nk, dv, pr.dtype,
              ws.y.data(), dv);
    transpose(ws.x.data(), d, ws.x_t.data());
    transpose(ws.y.data(), dv, ws.y_t.data());
    std::fill(ws.s.begin(), ws.s.end(), 0.0);
    std::fill(ws.dp.begin(), ws.dp.end(), 0.0);
    gemm_accumulate(ws.a.data(), d, ws.x_t.data(), kTile, ws.s.data(), kTile, kTile, kTile, d);
    gemm_accumulate(ws.b.data(), dv, ws.y_t.data(), kTile, ws.dp.data(), kTile, kTile, kTile, dv);
    softmax_grad(s, Logit(pr), q0, nq, k0, nk, ws.lse.data(), ws.d.data(), ws.s.data(),
                 ws.dp.data());
    gemm_accumulate(ws.dp.data(), kTile, ws.x.data(), d, ws.acc1.data(), d, kTile, d, kTile);
  }
  store_rows(bp.dq, at(bp.dq_stride, s, s.q_begin + q0, head), bp.dq_stride[1], nq, d, pr.dtype,
             ws.acc1.data(), pr.scale);
}

// Pass 3: dK and dV of one block of keys, summed over the query heads of its group.
void dkv_tile(const BackwardProblem& bp, const Sequence& s, int kv_head, int k0,
              const std::vector<double>& d_all, Scratch& ws) {
  const Problem& pr = bp.fwd;
  const int d = pr.head_dim, dv = pr.head_dim_v;
  const int nk = std::min(kTile, s.len_k - k0);
  load_rows(pr.k, at(pr.k_stride, s, s.k_begin + k0, kv_head), pr.k_stride[1], nk, d, pr.dtype,
            ws.x.data(), d);
  load_rows(pr.v, at(pr.v_stride, s, s.k_begin + k0, kv_head), pr.v_stride[1], nk, dv, pr.dtype,
            ws.y.data(), dv);
  transpose(ws.x.data(), d, ws.x_t.data());
  transpose(ws.y.data(), dv, ws.y_t.data());
  std::fill(ws.acc1.begin(), ws.acc1.end(), 0.0);  // dK
  std::fill(ws.acc2.begin(), ws.acc2.end(), 0.0);  // dV

  // Rows that see any key of the block (both bounds grow with the key).
  const int row_begin = s.mask.query_begin(k0);
  const int row_end = s.mask.query_end(k0 + nk - 1);
  for (int head = kv_head * pr.group; head < (kv_head + 1) * pr.group; ++head) {
    for (int q0 = row_begin; q0 < row_end; q0 += kTile) {
      const int nq = std::min(kTile, row_end - q0);
      load_rows(pr.q, at(pr.q_stride, s, s.q_begin + q0, head), pr.q_stride[1], nq, d, pr.dtype,
                ws.a.data(), d);
      load_rows(bp.dout, at(bp.dout_stride, s, s.q_begin + q0, head), bp.dout_stride[1], nq, dv,
                pr.dtype, ws.b.data(), dv);
      transpose(ws.a.data(), d, ws.a_t.data());
      transpose(ws.b.data(), dv, ws.b_t.data());
      load_row_stats(pr, s, head, q0, nq, d_all, ws);
      // S and dP as (rows x keys), as pass 2 has them, so that softmax_grad is shared; then
      // transposed into the key-major products dV += Pᵀ·dO and dK += dSᵀ·Q.
      std::fill(ws.s.begin(), ws.s.end(), 0.0);
      std::fill(ws.dp.begin(), ws.dp.end(), 0.0);
      gemm_accumulate(ws.a.data(), d, ws.x_t.data(), kTile, ws.s.data(), kTile, kTile, kTile, d);
      gemm_accumulate(ws.b.data(), dv, ws.y_t.data(), kTile, ws.dp.data(), kTile, kTile, kTile, dv);
      softmax_grad(s, Logit(pr), q0, nq, k0, nk, ws.lse.data(), ws.d.data(), ws.s.data(),
                   ws.dp.data());
      // Pᵀ and dSᵀ go where Qᵀ and dOᵀ were (no longer needed).
      transpose(ws.s.data(), kTile, ws.a_t.data());
      transpose(ws.dp.data(), kTile, ws.b_t.data());
      gemm_accumulate(ws.a_t.data(), kTile, ws.b.data(), dv, ws.acc2.data(), dv, kTile, dv, kTile);
      gemm_accumulate(ws.b_t.data(), kTile, ws.a.data(), d, ws.acc1.data(), d, kTile, d, kTile);
    }
  }
  store_rows(bp.dk, at(bp.dk_stride, s, s.k_begin + k0, kv_head), bp.dk_stride[1], nk, d, pr.dtype,
             ws.acc1.data(), pr.scale);
  store_rows(bp.dv, at(bp.dv_stride, s, s.k_begin + k0, kv_head), bp.dv_stride[1], nk, dv, pr.dtype,
             ws.acc2.data(), 1.0);
}

// A work item of pass 2 or 3: a tile of one (sequence, head).
struct Item {
  int seq, head, begin;
};

std::vector<Item> tiles(const std::vector<Sequence>& seqs, int heads, bool keys) {
  std::vector<Item> out;
  for (int b = 0; b < static_cast<int>(seqs.size()); ++b) {
    const int len = keys ? seqs[static_cast<size_t>(b)].len_k : seqs[static_cast<size_t>(b)].len_q;
    for (int h = 0; h < heads; ++h)
      for (int t = 0; t < len; t += kTile) out.push_back({b, h, t});
  }
  return out;
}

}  // namespace

Status cpu_backward(const BackwardProblem& bp) {
  const Problem& pr = bp.fwd;
  const std::vector<Sequence> seqs = sequences(pr);
  const int dv = pr.head_dim_v;

  // Pass 1: D_i = dO_i·O_i per (sequence, query head), laid out like the LSE.
  const size_t rows = pr.varlen() ? size_t(pr.heads_q) * size_t(pr.total_q)
                                  : size_t(pr.batch) * size_t(pr.heads_q) * size_t(pr.seqlen_q);
  std::vector<double> d_all(rows, 0.0);
  const int64_t pairs = int64_t{pr.batch} * pr.heads_q;
  host::parallel_for(pairs, [&](int, int64_t i) {
    const Sequence& s = seqs[static_cast<size_t>(i / pr.heads_q)];
    const int head = static_cast<int>(i % pr.heads_q);
    for (int r = 0; r < s.len_q; ++r) {
      const int64_t o_off = at(pr.o_stride, s, s.q_begin + r, head);
      const int64_t do_off = at(bp.dout_stride, s, s.q_begin + r, head);
      double sum = 0;
      for (int c = 0; c < dv; ++c) {
        sum += double{load_as_float(pr.o, o_off + c, pr.dtype)} *
               load_as_float(bp.dout, do_off + c, pr.dtype);
      }
      d_all[static_cast<size_t>(lse_index(pr, s, head, r))] = sum;
    }
  });

  // dsinks[h] = -sum_i exp(sink_h - lse_i) D_i, rows in (sequence, row) order. With a sink every
  // LSE is finite (it is at least the sink); the guard keeps a bad LSE from making NaN of 0 * inf.
  if (bp.dsinks != nullptr) {
    for (int h = 0; h < pr.heads_q; ++h) {
      double sum = 0;
      for (const Sequence& s : seqs) {
        for (int r = 0; r < s.len_q; ++r) {
          const int64_t i = lse_index(pr, s, h, r);
          if (pr.lse[i] == kNegInf) continue;
          sum += std::exp(double{pr.sinks[h]} - pr.lse[i]) * d_all[static_cast<size_t>(i)];
        }
      }
      bp.dsinks[h] = static_cast<float>(-sum);
    }
  }

  const std::vector<Item> q_items = tiles(seqs, pr.heads_q, false);
  const std::vector<Item> k_items = tiles(seqs, pr.heads_kv, true);
  std::vector<Scratch> scratch(static_cast<size_t>(
      host::worker_count(std::max<int64_t>(std::ssize(q_items), std::ssize(k_items)))));
  // Pass 2, then pass 3; both hand out the last tiles first, which under a causal mask see the
  // most keys (pass 2) or the fewest rows (pass 3: the first tiles are the long ones there), so
  // pass 3 walks its list forward.
  const auto n_q = static_cast<int64_t>(q_items.size());
  host::parallel_for(n_q, [&](int worker, int64_t i) {
    const Item& it = q_items[static_cast<size_t>(n_q - 1 - i)];
    Scratch& ws = scratch[static_cast<size_t>(worker)];
    ws.size_for(pr);
    dq_tile(bp, seqs[static_cast<size_t>(it.seq)], it.head, it.begin, d_all, ws);
  });
  host::parallel_for(std::ssize(k_items), [&](int worker, int64_t i) {
    const Item& it = k_items[static_cast<size_t>(i)];
    Scratch& ws = scratch[static_cast<size_t>(worker)];
    ws.size_for(pr);
    dkv_tile(bp, seqs[static_cast<size_t>(it.seq)], it.head, it.begin, d_all, ws);
  });
  return Status::success();
}

}  // namespace flashattn
