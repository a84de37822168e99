// can_implement(): every rule a forward call must satisfy, each failure naming the argument and
// the rule. Nothing here launches work; a refused call touches no memory.
#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "api/validate.h"

#include "api/capabilities.h"
#include "api/selection.h"
#include "api/tensor_check.h"
#include "common/head_dims.h"
#include "common/paged_kv.h"
#include "flashattn/flashattn.h"

namespace flashattn {
namespace {

// "64, 96, 128, 192 or 256 with head_dim_v equal to it, or head_dim 192 with head_dim_v 128":
// the rule kHeadDims states.
std::string head_dims_rule() {
  int n_equal = 0;
  for (const HeadDims& h : kHeadDims) n_equal += h.qk == h.v;
  std::string equal, differs;
  int i = 0;
  for (const HeadDims& h : kHeadDims) {
    if (h.qk != h.v) {
      differs +=
          ", or head_dim " + std::to_string(h.qk) + " with head_dim_v " + std::to_string(h.v);
      continue;
    }
    if (i > 0) equal += i == n_equal - 1 ? " or " : ", ";
    equal += std::to_string(h.qk);
    ++i;
  }
  return equal + " with head_dim_v equal to it" + differs;
}

std::string str(int64_t x) {
  return std::to_string(x);
}

std::string num(float x) {  // shortest form: "0", "-1", "nan", "0.125"
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(x));
  return buf;
}

// o's element type: out_dtype for FP8 inputs, else the inputs' dtype (make_problem's rule).
DType o_dtype(const ForwardParams& p) {
  return dtype_is_fp8(p.dtype) ? p.out_dtype : p.dtype;
}

// q, k, v and o with their logical shapes. Packed (varlen) tensors are one batch of total
// tokens, and their unused batch stride is not checked. With a block table, k and v are the
// cache's blocks (num_blocks, page_size, heads_kv, dim), every stride used.

std::array<TensorArg, 4> forward_tensors(const ForwardParams& p) {
  const int dv = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const bool paged = p.block_table != nullptr;
  const int64_t nb = varlen ? 1 : p.batch;
  const int64_t sq = varlen ? p.total_q : p.seqlen_q;
  const int64_t sk = varlen ? p.total_k : p.seqlen_k;
  const int first = varlen ? 1 : 0;
  const int64_t kb = paged ? p.num_blocks : nb, kr = paged ? p.page_size : sk;
  const int k_first = paged ? 0 : first;
  return {tensor_arg("q", p.q, {nb, sq, p.heads_q, p.head_dim}, p.dtype, first),
          tensor_arg("k", p.k, {kb, kr, p.heads_kv, p.head_dim}, p.dtype, k_first),
          tensor_arg("v", p.v, {kb, kr, p.heads_kv, dv}, p.dtype, k_first),
          tensor_arg("o", p.o, {nb, sq, p.heads_q, dv}, o_dtype(p), first)};
}

// The shape rules of a paged call (ForwardParams::block_table); nothing when there is no table.
Status check_paged_shapes(const ForwardParams& p) {
  if (p.block_table == nullptr) return Status::success();
  if (p.cu_seqlens_q == nullptr) {
    return invalid(
        "block_table: needs cu_seqlens_q/cu_seqlens_k (paged KV is a variable-length call: "
        "sequence b has cu_seqlens_k[b + 1] - cu_seqlens_k[b] keys)");
  }
  if (p.page_size < 1) {
    return invalid("page_size: must be >= 1 with block_table, got " + str(p.page_size));
  }
  if (p.num_blocks < 1) {
    return invalid("num_blocks: must be >= 1 with block_table, got " + str(p.num_blocks));
  }
  if (p.max_blocks_per_seq < 1) {
    return invalid("max_blocks_per_seq: must be >= 1 with block_table, got " +
                   str(p.max_blocks_per_seq));
  }
  if (p.block_table_stride != 0 && p.block_table_stride < p.max_blocks_per_seq) {
    return invalid("block_table_stride: must be 0 or >= max_blocks_per_seq (" +
                   str(p.max_blocks_per_seq) + "), got " + str(p.block_table_stride));
  }
  if (reinterpret_cast<uintptr_t>(p.block_table) % 4 != 0) {
    return invalid("block_table: must be a 4-byte aligned int32 array");
  }
  // The GPU gather's packed copy holds every sequence at its longest (common/paged_kv.h) and is
  // addressed by the kernels with int32 token counts.
  if (paged_gather_rows(p) > INT_MAX) {
    return invalid("block_table: batch * min(seqlen_k, max_blocks_per_seq * page_size) = " +
                   str(paged_gather_rows(p) - kPagedTailRows) + " keys to gather, more than " +
                   str(int64_t{INT_MAX} - kPagedTailRows));
  }
  return Status::success();
}

// The FP8 descales: (batch, heads_kv) fp32 inputs, each optional.
struct Descale {
  const char* name;
  const float* data;
};
std::array<Descale, 3> descales(const ForwardParams& p) {
  return {{{"q_descale", p.q_descale}, {"k_descale", p.k_descale}, {"v_descale", p.v_descale}}};
}
int64_t descale_count(const ForwardParams& p) {
  return int64_t{p.batch} * p.heads_kv;
}

// K8's block descales: (batch, heads, ceil(seqlen / rows)) fp32 inputs, all three or none.
std::array<Descale, 3> block_descales(const ForwardParams& p) {
  return {{{"q_block_descale", p.q_block_descale},
           {"k_block_descale", p.k_block_descale},
           {"v_block_descale", p.v_block_descale}}};
}
bool has_block_descales(const ForwardParams& p) {
  return p.q_block_descale != nullptr || p.k_block_descale != nullptr ||
         p.v_block_descale != nullptr;
}
// The descales each block array holds (rows per block: fp8_block_rows(head_dim)) and their shape
// for messages: "batch * heads_q * ceil(seqlen_q / 128)".
struct BlockCount {
  int heads;       // heads_q or heads_kv
  int64_t blocks;  // per (sequence, head)
  int64_t n;       // batch * heads * blocks
  std::string shape;
};
std::array<BlockCount, 3> block_counts(const ForwardParams& p) {
  const Fp8BlockRows rows = fp8_block_rows(p.head_dim);
  auto count = [&](int heads, int seqlen, int r, const char* h, const char* s) {
    const int64_t blocks = r > 0 ? (int64_t{seqlen} + r - 1) / r : 0;
    return BlockCount{heads, blocks, int64_t{p.batch} * heads * blocks,
                      std::string("batch * ") + h + " * ceil(" + s + " / " + str(r) + ")"};
  };
  const BlockCount kv = count(p.heads_kv, p.seqlen_k, rows.kv, "heads_kv", "seqlen_k");
  return {count(p.heads_q, p.seqlen_q, rows.q, "heads_q", "seqlen_q"), kv, kv};
}

// The invalid_argument rules of block descales: all three or none, e4m3 inputs, no per-head
// descales beside them, dense batches, and a head dim whose rows per block are defined.
Status check_block_descales(const ForwardParams& p) {
  if (!has_block_descales(p)) return Status::success();
  const std::array<Descale, 3> blocks = block_descales(p);
  const Descale& given = *std::find_if(blocks.begin(), blocks.end(),
                                       [](const Descale& d) { return d.data != nullptr; });
  if (p.dtype != DType::e4m3) {
    return invalid(std::string(given.name) +
                   ": only with dtype e4m3 (FP8 inputs, as quantize_fp8() writes them), got "
                   "dtype " +
                   dtype_name(p.dtype));
  }
  for (const Descale& d : blocks) {
    if (d.data == nullptr) {
      return invalid(std::string(d.name) + ": null while " + given.name +
                     " is set (the block descales come all three or none)");
    }
  }
  for (const Descale& d : descales(p)) {
    if (d.data != nullptr) {
      return invalid(std::string(d.name) +
                     ": must be null with block descales (q_block_descale...): each block of "
                     "rows carries its own descale");
    }
  }
  if (p.block_table != nullptr) {
    return invalid(
        "block_table: not with block descales (q_block_descale...), which describe dense "
        "batches only");
  }
  if (p.cu_seqlens_q != nullptr) {
    return invalid(
        "cu_seqlens_q: not with block descales (q_block_descale...): their layout (batch, "
        "heads, ceil(seqlen / rows)) describes dense batches only");
  }
  const int dv = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  if (dv != p.head_dim || fp8_block_rows(p.head_dim).q == 0) {
    return invalid("head_dim: block descales need head_dim " + head_dims_text<kFp8HeadDims>() +
                   " with head_dim_v equal (their rows per block are the FP8 kernel's tiles, "
                   "fp8_block_rows), got " +
                   str(p.head_dim) + " / " + str(dv));
  }
  return Status::success();
}

// The invalid_argument rules of FP8 inputs: o's element type, and descales only with FP8.
Status check_fp8_arguments(const ForwardParams& p) {
  if (!dtype_is_fp8(p.dtype)) {
    for (const Descale& d : descales(p)) {
      if (d.data != nullptr) {
        return invalid(std::string(d.name) + ": only with FP8 inputs (dtype e4m3), got dtype " +
                       dtype_name(p.dtype));
      }
    }
    return Status::success();
  }
  if (!dtype_is_16bit(p.out_dtype)) {
    return invalid(std::string("out_dtype: must be bf16 or fp16 with FP8 inputs (o's element "
                               "type), got ") +
                   dtype_name(p.out_dtype));
  }
  return Status::success();
}

// Features no family runs with FP8 inputs (valid requests: `unsupported`).
Status check_fp8_features(const ForwardParams& p) {
  if (!dtype_is_fp8(p.dtype)) return Status::success();
  const std::string with = std::string(" with FP8 inputs (dtype ") + dtype_name(p.dtype) + ")";
  if (p.sinks != nullptr) return unsupported("sinks: attention sinks are not supported" + with);
  if (p.softcap > 0.f) return unsupported("softcap: soft-capping is not supported" + with);
  if (p.block_table != nullptr) {
    return unsupported("block_table: paged KV is not supported" + with);
  }
  return Status::success();
}

// Host descales the cpu family multiplies by as given: each finite and > 0 (flashattn.h).
Status check_host_descales(const ForwardParams& p) {
  for (const Descale& d : descales(p)) {
    if (d.data == nullptr) continue;
    for (int64_t i = 0; i < descale_count(p); ++i) {
      if (!std::isfinite(d.data[i]) || d.data[i] <= 0.f) {
        return invalid(std::string(d.name) + "[" + str(i) + "] (batch " + str(i / p.heads_kv) +
                       ", kv head " + str(i % p.heads_kv) + "): must be finite and > 0, got " +
                       num(d.data[i]));
      }
    }
  }
  return Status::success();
}

// Host block descales, as check_host_descales: each finite and > 0.
Status check_host_block_descales(const ForwardParams& p) {
  if (!has_block_descales(p)) return Status::success();
  const std::array<Descale, 3> blocks = block_descales(p);
  const std::array<BlockCount, 3> counts = block_counts(p);
  for (int t = 0; t < 3; ++t) {
    const BlockCount& c = counts[t];
    for (int64_t i = 0; i < c.n; ++i) {
      const float x = blocks[t].data[i];
      if (std::isfinite(x) && x > 0.f) continue;
      return invalid(std::string(blocks[t].name) + "[" + str(i) + "] (batch " +
                     str(i / c.blocks / c.heads) + (t == 0 ? ", head " : ", kv head ") +
                     str(i / c.blocks % c.heads) + ", block " + str(i % c.blocks) +
                     "): must be finite and > 0, got " + num(x));
    }
  }
  return Status::success();
}

// A host block table: each sequence fits its row, and every block it uses is in range.
Status check_host_block_table(const ForwardParams& p) {
  const int64_t stride = p.block_table_stride > 0 ? p.block_table_stride : p.max_blocks_per_seq;
  const int64_t capacity = int64_t{p.max_blocks_per_seq} * p.page_size;
  for (int b = 0; b < p.batch; ++b) {
    const int64_t len = int64_t{p.cu_seqlens_k[b + 1]} - p.cu_seqlens_k[b];
    if (len > capacity) {
      return invalid("cu_seqlens_k: sequence " + str(b) + " has " + str(len) +
                     " keys, more than its block_table row holds (max_blocks_per_seq * "
                     "page_size = " + str(capacity) + ")");
    }
    for (int64_t i = 0; i * p.page_size < len; ++i) {
      const int32_t block = p.block_table[b * stride + i];
      if (block < 0 || block >= p.num_blocks) {
        return invalid("block_table[" + str(b) + "][" + str(i) + "]: block " + str(block) +
                       " is outside [0, num_blocks = " + str(p.num_blocks) + ") and would be read");
      }
    }
  }
  return Status::success();
}

Status check_host_indices(const ForwardParams& p) {
  if (p.cu_seqlens_q == nullptr) return Status::success();
  const bool paged = p.block_table != nullptr;
  if (Status s = check_host_cu_seqlens("cu_seqlens_q", p.cu_seqlens_q, p.batch, p.seqlen_q,
                                       "seqlen_q", "total_q", p.total_q);
      !s.ok()) {
    return s;
  }
  // With a block table there is no packed k: total_k is not used.
  if (Status s = check_host_cu_seqlens("cu_seqlens_k", p.cu_seqlens_k, p.batch, p.seqlen_k,
                                       "seqlen_k", paged ? nullptr : "total_k", p.total_k);
      !s.ok()) {
    return s;
  }
  return paged ? check_host_block_table(p) : Status::success();
}

}  // namespace

// Host index arrays the cpu family reads as given: a bad entry would index outside the tensors,
// so their contents are checked (GPU families cannot read device arrays without a
// synchronisation and trust them: flashattn.h). Shared with the backward (api/validate.h).
Status check_host_cu_seqlens(const std::string& n, const int32_t* cu, int batch, int max_len,
                             const char* max_name, const char* total_name, int total) {
  if (cu[0] != 0) return invalid(n + "[0]: must be 0, got " + str(cu[0]));
  for (int b = 0; b < batch; ++b) {
    const int64_t len = int64_t{cu[b + 1]} - cu[b];
    if (len < 0) {
      return invalid(n + "[" + str(b + 1) + "]: must be >= " + n + "[" + str(b) +
                     "] (prefix sums never decrease), got " + str(cu[b + 1]) + " < " + str(cu[b]));
    }
    if (len > max_len) {
      return invalid(n + ": sequence " + str(b) + " has " + str(len) + " tokens, more than " +
                     max_name + " (" + str(max_len) + ")");
    }
  }
  if (total_name != nullptr && cu[batch] != total) {
    return invalid(std::string(total_name) + ": must equal " + n + "[batch] (" + str(cu[batch]) +
                   "), got " + str(total));
  }
  return Status::success();
}

Status check_attention_shapes(const ForwardParams& p) {
  if (!dtype_is_16bit(p.dtype) && !dtype_is_fp8(p.dtype)) {
    return invalid("dtype: must be bf16 or fp16 (16-bit) or e4m3/e5m2 (FP8), got DType " +
                   std::to_string(static_cast<int>(p.dtype)));
  }
  const std::pair<const char*, int> positive[] = {{"batch", p.batch},
                                                  {"heads_q", p.heads_q},
                                                  {"heads_kv", p.heads_kv},
                                                  {"head_dim", p.head_dim}};
  for (const auto& [name, value] : positive) {
    if (value <= 0) {
      return invalid(std::string(name) + ": must be positive, got " + std::to_string(value));
    }
  }
  const std::pair<const char*, int> non_negative[] = {
      {"seqlen_q", p.seqlen_q}, {"seqlen_k", p.seqlen_k}, {"head_dim_v", p.head_dim_v}};
  for (const auto& [name, value] : non_negative) {
    if (value < 0) {
      return invalid(std::string(name) + ": must be >= 0, got " + std::to_string(value));
    }
  }
  if (p.heads_q % p.heads_kv != 0) {
    return invalid("heads_q: must be a multiple of heads_kv (" + std::to_string(p.heads_q) +
                   " is not a multiple of " + std::to_string(p.heads_kv) + ")");
  }
  const int dv = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  if (!head_dims_supported(p.head_dim, dv)) {
    return invalid("head_dim: must be " + head_dims_rule() + "; got head_dim " +
                   std::to_string(p.head_dim) + ", head_dim_v " + std::to_string(dv));
  }
  if (!std::isfinite(p.softmax_scale)) return invalid("softmax_scale: must be finite");
  if (!std::isfinite(p.softcap)) return invalid("softcap: must be finite (0: off)");
  if (p.softcap < 0.f) {
    return invalid("softcap: must be >= 0 (0: off), got " + std::to_string(p.softcap));
  }
  if (p.window_left < -1) {
    return invalid("window_left: must be >= -1 (-1 is unbounded), got " +
                   std::to_string(p.window_left));
  }
  if (p.window_right < -1) {
    return invalid("window_right: must be >= -1 (-1 is unbounded), got " +
                   std::to_string(p.window_right));
  }
  if (p.causal && p.window_right > 0) {
    return invalid(
        "window_right: must be -1 or 0 when causal (causal sees no key right of the "
        "diagonal), got " +
        std::to_string(p.window_right));
  }
  if ((p.cu_seqlens_q == nullptr) != (p.cu_seqlens_k == nullptr)) {
    return invalid("cu_seqlens_q/cu_seqlens_k: give both or neither");
  }
  if (p.cu_seqlens_q != nullptr) {
    if (p.total_q < 0 || p.total_k < 0) {
      return invalid("total_q/total_k: must be >= 0 with cu_seqlens, got " +
                     std::to_string(p.total_q) + "/" + std::to_string(p.total_k));
    }
    if (reinterpret_cast<uintptr_t>(p.cu_seqlens_q) % 4 != 0 ||
        reinterpret_cast<uintptr_t>(p.cu_seqlens_k) % 4 != 0) {
      return invalid("cu_seqlens_q/cu_seqlens_k: must be 4-byte aligned int32 arrays");
    }
  }
  return Status::success();
}

namespace {

// "bf16 and fp16", "e4m3": the dtypes of a capability table's entry, for messages.
std::string dtypes_text(unsigned dtypes) {
  std::vector<const char*> names;
  for (DType d : {DType::bf16, DType::fp16, DType::e4m3, DType::e5m2}) {
    if ((dtypes & dtype_bit(d)) != 0) names.push_back(dtype_name(d));
  }
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += names[i];
  }
  return out;
}

Status check_shapes(const ForwardParams& p) {
  if (Status s = check_attention_shapes(p); !s.ok()) return s;
  if (Status s = check_paged_shapes(p); !s.ok()) return s;
  if (Status s = check_fp8_arguments(p); !s.ok()) return s;
  if (Status s = check_block_descales(p); !s.ok()) return s;
  // Valid input that no kernel runs: after every invalid_argument rule.
  if (!dtype_has_kernel(p.dtype, &kernel_caps)) {
    return unsupported(std::string("dtype: ") + dtype_name(p.dtype) +
                       " has no kernel in this build (FP8 inputs run as e4m3)");
  }
  return check_fp8_features(p);
}

Status check_memory(const ForwardParams& p, Kernel kernel, const KernelCaps& caps) {
  const std::array<TensorArg, 4> tensors = forward_tensors(p);
  if (Status s = check_tensors(tensors); !s.ok()) return s;
  if (reinterpret_cast<uintptr_t>(p.lse) % alignof(float) != 0) {
    return invalid("lse: must be 4-byte aligned");
  }
  if (Status s = check_sinks_pointer(p.sinks); !s.ok()) return s;
  for (const Descale& d : descales(p)) {
    if (reinterpret_cast<uintptr_t>(d.data) % alignof(float) != 0) {
      return invalid(std::string(d.name) +
                     ": must be a 4-byte aligned fp32 array of batch * heads_kv descales");
    }
  }
  const std::array<Descale, 3> blocks = block_descales(p);
  const std::array<BlockCount, 3> counts = block_counts(p);
  for (int t = 0; t < 3; ++t) {
    if (reinterpret_cast<uintptr_t>(blocks[t].data) % alignof(float) != 0) {
      return invalid(std::string(blocks[t].name) + ": must be a 4-byte aligned fp32 array of " +
                     counts[t].shape + " descales");
    }
  }
  // Outputs must not alias inputs or each other: a kernel reads K/V tiles after writing O.
  const TensorArg& o = tensors[3];
  const TensorArg outputs[] = {o, lse_arg(p.lse, o.size[0], p.heads_q, o.size[1])};
  const int64_t nd = descale_count(p);
  const TensorArg inputs[] = {tensors[0],
                              tensors[1],
                              tensors[2],
                              sinks_arg(p.sinks, p.heads_q),
                              fp32_array_arg("q_descale", p.q_descale, nd),
                              fp32_array_arg("k_descale", p.k_descale, nd),
                              fp32_array_arg("v_descale", p.v_descale, nd),
                              fp32_array_arg(blocks[0].name, blocks[0].data, counts[0].n),
                              fp32_array_arg(blocks[1].name, blocks[1].data, counts[1].n),
                              fp32_array_arg(blocks[2].name, blocks[2].data, counts[2].n)};
  if (Status s = check_no_aliasing(outputs, inputs); !s.ok()) return s;

  // Host or device memory, as the kernel needs, and a device the kernel runs on.
  const NamedPointer pointers[] = {data_pointer(tensors[0]),
                                   data_pointer(tensors[1]),
                                   data_pointer(tensors[2]),
                                   data_pointer(tensors[3]),
                                   {"lse", p.lse},
                                   {"cu_seqlens_q", p.cu_seqlens_q},
                                   {"cu_seqlens_k", p.cu_seqlens_k},
                                   {"sinks", p.sinks},
                                   {"block_table", p.block_table},
                                   {"q_descale", p.q_descale},
                                   {"k_descale", p.k_descale},
                                   {"v_descale", p.v_descale},
                                   {blocks[0].name, blocks[0].data},
                                   {blocks[1].name, blocks[1].data},
                                   {blocks[2].name, blocks[2].data}};
  const Placement where{std::string("kernel ") + kernel_name(kernel), caps.host, caps.min_cc,
                        caps.max_cc_major};
  if (Status s = check_placement(where, pointers); !s.ok()) return s;
  if (!caps.host) return Status::success();
  if (Status s = check_host_descales(p); !s.ok()) return s;
  if (Status s = check_host_block_descales(p); !s.ok()) return s;
  return check_host_indices(p);
}

Status check_features(const ForwardParams& p, Kernel kernel, const KernelCaps& caps) {
  const std::string k = kernel_name(kernel);
  if (!runs_dtype(caps, p.dtype)) {
    return unsupported("dtype: kernel " + k + " runs " + dtypes_text(caps.dtypes) + ", not " +
                       dtype_name(p.dtype) +
                       (dtype_is_fp8(p.dtype) ? " (k7, k8 and cpu run e4m3)" : ""));
  }
  using BlockDescales = KernelCaps::BlockDescales;
  if (has_block_descales(p) && caps.block_descales == BlockDescales::refused) {
    return unsupported("q_block_descale: kernel " + k +
                       " takes per-head descales only (q_descale, k_descale, v_descale); block "
                       "descales run on k8 (and cpu)");
  }
  if (!has_block_descales(p) && caps.block_descales == BlockDescales::required) {
    return unsupported("q_block_descale: kernel " + k +
                       " needs block descales (q/k/v_block_descale, as quantize_fp8() makes "
                       "them); FP8 inputs with per-head descales run on k7");
  }
  if (p.cu_seqlens_q != nullptr && !caps.varlen) {
    return unsupported("cu_seqlens_q: kernel " + k + " does not support variable length");
  }
  if (p.sinks != nullptr && !caps.sinks) {
    return unsupported("sinks: kernel " + k +
                       " does not support attention sinks (k6, fa2 and cpu do)");
  }
  if (p.softcap > 0.f && !caps.softcap) {
    return unsupported("softcap: kernel " + k + " does not support softcap (k6, fa2 and cpu do)");
  }
  const int dv = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  if (dv != p.head_dim && !caps.hdim_v_differs) {
    return unsupported("head_dim_v: kernel " + k + " needs head_dim_v == head_dim");
  }
  if (caps.only_head_dim != 0 && (p.head_dim != caps.only_head_dim || dv != caps.only_head_dim)) {
    return unsupported("head_dim: kernel " + k + " is built for head_dim " +
                       std::to_string(caps.only_head_dim) + " only (k6 has every head dim)");
  }
  if (!runs_head_dims(caps, p.head_dim, dv)) {
    return unsupported("head_dim: kernel " + k + " is built for head_dim " + head_dims_text(caps) +
                       " (head_dim_v equal); got " + std::to_string(p.head_dim) + " / " +
                       std::to_string(dv));
  }
  if (p.block_table != nullptr && !caps.paged) {
    return unsupported("block_table: kernel " + k + " does not support paged KV");
  }
  if (caps.tma) {
    // With a block table the kernel reads the gather's dense copies of k and v, not the blocks.
    const std::array<TensorArg, 4> tensors = forward_tensors(p);
    return check_tma_strides(std::span(tensors).first(p.block_table != nullptr ? 1 : 3),
                             "kernel " + k);
  }
  return Status::success();
}

}  // namespace

namespace {

// auto's GPU candidates, fastest first: those whose block-descale rule the request meets (k8
// needs block descales, k7 refuses them), so that a refusal of auto names a family that could
// have run the request.
std::vector<Kernel> gpu_preference(const ForwardParams& p) {
  using BlockDescales = KernelCaps::BlockDescales;
  const BlockDescales unfit =
      has_block_descales(p) ? BlockDescales::refused : BlockDescales::required;
  std::vector<Kernel> out;
  for (Kernel k : kGpuPreference) {
    if (kernel_caps(k).block_descales != unfit) out.push_back(k);
  }
  return out;
}

}  // namespace

Kernel select_kernel(const ForwardParams& p) {
  return select_family(p.q.data, gpu_preference(p), &kernel_caps,
                       [&](Kernel k) { return can_implement(p, k).ok(); });
}

Status can_implement(const ForwardParams& p, Kernel kernel) {
  if (Status s = check_shapes(p); !s.ok()) return s;
  if (kernel == Kernel::automatic) {
    kernel = select_kernel(p);
    if (kernel == Kernel::automatic) {
      return refusal_of_auto(
          gpu_preference(p), &kernel_caps, p.dtype, [&](Kernel k) { return can_implement(p, k); },
          "kernel auto: no kernel family is built");
    }
  }
  const KernelCaps caps = kernel_caps(kernel);
  if (!caps.built) {
    return unsupported(std::string("kernel ") + kernel_name(kernel) +
                       ": not built in this version of flashattn");
  }
  if (Status s = check_features(p, kernel, caps); !s.ok()) return s;
  return check_memory(p, kernel, caps);
}

}  // namespace flashattn
