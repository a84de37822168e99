// The correctness oracle, public so that tests, the benchmark CLI and users share one definition.
//
// reference::forward computes attention exactly in fp64 on the host (Precision::fp64), or the way a
// same-precision kernel would (Precision::emulate: fp32 accumulation, P rounded to the input type
// before P·V). check() applies FlashAttention's rule to a kernel's output:
//     max|out - ref| <= 2 * max|pt - ref| + atol
// with ref the fp64 result, pt the emulated one and atol the rounding floor of the output type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

namespace flashattn::reference {

enum class Precision { fp64, emulate };

// One query row of one (batch, query head). `params` points at host memory (q, k, v); o and lse
// are not read. Writes head_dim_v values to `out` and the natural-log LSE to `lse`.
// A row that sees no key gets out = 0 and lse = -inf.
void forward_row(const ForwardParams& params, Precision precision, int batch, int head, int row,
                 double* out, double* lse);

// Every row, multithreaded. `out` is dense (batch, seqlen_q, heads_q, head_dim_v); `lse` dense
// (batch, heads_q, seqlen_q); either may be null.
void forward(const ForwardParams& params, Precision precision, double* out, double* lse);

struct RowId {
  int batch, head, row;
};

struct CheckResult {
  bool ok = false;
  double max_err = 0;     // max |out - ref| over checked elements
  double max_err_pt = 0;  // max |pt - ref|
  double atol = 0;        // rounding floor of the output type
  double lse_max_err = 0, lse_max_err_pt = 0, lse_atol = 0;
  int64_t checked = 0;      // output elements compared
  int64_t not_finite = 0;   // outputs that are NaN/inf (poison left behind, or a blow-up)
  std::string detail;       // first failure, human readable
};

// Checks a kernel's outputs. `params.q/k/v` point at host copies of the inputs; `params.o` at a
// host copy of the output (params.dtype, params.o.stride); `params.lse` at a host copy of the LSE
// or null to skip it. `rows` lists the rows to check; empty means every row.
CheckResult check(const ForwardParams& params, const std::vector<RowId>& rows = {});

// Up to `count` rows drawn evenly (always including the first and last row of each sequence and
// any fully masked row), for shapes too large to check whole on the CPU.
std::vector<RowId> sample_rows(const ForwardParams& params, int count, uint64_t seed);

// n values of `dtype` drawn from N(0, sigma^2) with a seeded generator (never zeros).
void fill_normal(void* data, int64_t n, DType dtype, uint64_t seed, float sigma = 1.0f);

}  // namespace flashattn::reference
