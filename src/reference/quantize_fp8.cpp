// K8's pre-pass on the host (flashattn/fp8.h has the contract): per (sequence, head, block of
// rows) of q, k and v, the rows as fp32, q's and k's rotated by diag(s)·H/√d, the block's amax,
// then e4m3(x · f) and the descale (common/fp8_block_scale.h: amax/448, v's the power of two at or
// above it). The same fp32 operations in the same order as
// kernels/quant/quantize_fp8.cu, so the two write the same bytes: the butterfly's adds are exact
// to reorder only as a + b = b + a, the sign products are exact, and nothing else could contract
// into a fused multiply-add (each multiply's result is rounded or stored before any add).
#include "reference/quantize_fp8.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/fp8_block_scale.h"
#include "common/hadamard.h"
#include "common/host_dtype.h"
#include "common/host_parallel.h"

namespace flashattn::reference {
namespace {


// One tensor of the pre-pass: (batch, seqlen, heads, dim) in, e4m3 out, descales
// (batch, heads, blocks).
struct Job {
  DType dtype = DType::bf16;
  const void* in = nullptr;
  int64_t in_stride[4] = {};
  uint8_t* out = nullptr;
  int64_t out_stride[4] = {};
  float* descale = nullptr;
  int seqlen = 0, heads = 0, dim = 0, rows = 0, blocks = 0;
  bool rotate = false;
  bool power_of_two = false;  // v: the descale is the power of two at or above amax/448
  uint64_t seed = 0;

  int64_t items(int batch) const { return int64_t{batch} * heads * blocks; }
};

Job job_of(const QuantizeFp8Params& p, const TensorRef& in, const MutableTensorRef& out,
           float* descale, int seqlen, int heads, int dim, int rows, bool rotate,
           bool power_of_two) {
  Job j;
  j.dtype = p.dtype;
  j.in = in.data;
  j.out = static_cast<uint8_t*>(out.data);
  std::copy(in.stride, in.stride + 4, j.in_stride);
  std::copy(out.stride, out.stride + 4, j.out_stride);
  j.descale = descale;
  j.seqlen = seqlen;
  j.heads = heads;
  j.dim = dim;
  j.rows = rows;
  j.blocks = seqlen > 0 ? (seqlen + rows - 1) / rows : 0;
  j.rotate = rotate;
  j.power_of_two = power_of_two;
  j.seed = p.seed;
  return j;
}

// Block `item` of a job ((batch, head, block) row-major, the descales' order); `x` is scratch.
void quantize_block(const Job& job, int64_t item, std::vector<float>& x) {
  const int block = static_cast<int>(item % job.blocks);
  const int head = static_cast<int>(item / job.blocks % job.heads);
  const int batch = static_cast<int>(item / job.blocks / job.heads);
  const int row0 = block * job.rows;
  const int nrows = std::min(job.rows, job.seqlen - row0);
  const int d = job.dim;
  x.resize(static_cast<size_t>(job.rows) * d);

  float amax = 0.f;
  for (int r = 0; r < nrows; ++r) {
    float* row = x.data() + static_cast<ptrdiff_t>(r) * d;
    const int64_t at = host::offset(job.in_stride, batch, row0 + r, head);
    for (int c = 0; c < d; ++c) row[c] = load_as_float(job.in, at + c, job.dtype);
    if (job.rotate) hadamard_rotate_row(row, d, job.seed);
    for (int c = 0; c < d; ++c) amax = std::fmax(amax, std::abs(row[c]));
  }
  const Fp8BlockScale scale = fp8_block_scale(amax, job.power_of_two);
  const float f = scale.factor;
  job.descale[item] = scale.descale;
  for (int r = 0; r < nrows; ++r) {
    const float* row = x.data() + static_cast<ptrdiff_t>(r) * d;
    uint8_t* out = job.out + host::offset(job.out_stride, batch, row0 + r, head);
    for (int c = 0; c < d; ++c) out[c] = float_to_e4m3(row[c] * f);
  }
}

}  // namespace

void hadamard_rotate_row(float* x, int d, uint64_t seed) {
  for (int j = 0; j < d; ++j) x[j] *= hadamard_sign(seed, j);
  for (int h = 1; h < d; h *= 2) {
    for (int j = 0; j < d; ++j) {
      if ((j & h) != 0) continue;
      const float a = x[j], b = x[j + h];
      x[j] = a + b;
      x[j + h] = a - b;
    }
  }
  const float norm = hadamard_norm(d);
  for (int j = 0; j < d; ++j) x[j] *= norm;
}

void quantize_fp8_host(const QuantizeFp8Params& p) {
  const Fp8BlockRows rows = fp8_block_rows(p.head_dim);
  const bool rotate = p.rotation == Fp8Rotation::hadamard;
  const int dv = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  const Job jobs[3] = {
      job_of(p, p.q, p.q_out, p.q_block_descale, p.seqlen_q, p.heads_q, p.head_dim, rows.q, rotate,
             false),
      job_of(p, p.k, p.k_out, p.k_block_descale, p.seqlen_k, p.heads_kv, p.head_dim, rows.kv,
             rotate, false),
      job_of(p, p.v, p.v_out, p.v_block_descale, p.seqlen_k, p.heads_kv, dv, rows.kv, false,
             true)};
  const int64_t n0 = jobs[0].items(p.batch), n1 = jobs[1].items(p.batch);
  const int64_t total = n0 + n1 + jobs[2].items(p.batch);
  std::vector<std::vector<float>> scratch(static_cast<size_t>(host::worker_count(total)));
  host::parallel_for(total, [&](int worker, int64_t i) {
    const int t = i < n0 ? 0 : i < n0 + n1 ? 1 : 2;
    const int64_t item = i - (t == 0 ? 0 : t == 1 ? n0 : n0 + n1);
    quantize_block(jobs[t], item, scratch[static_cast<size_t>(worker)]);
  });
}

}  // namespace flashattn::reference
