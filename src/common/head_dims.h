// The one list of head dims flashattn is built for, and the one compile-time dispatch from
// run-time (head_dim, head_dim_v) and dtype to a family's instantiation. Validation
// (src/api/validate.cpp), every family's launch.cu and the CMake instantiation lists
// (cmake/instantiations.cmake reads this list) use it; a new head dim is one line here.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "flashattn/flashattn.h"

namespace flashattn {

struct HeadDims {
  int qk;  // head_dim: q and k
  int v;   // head_dim_v: v and o
};

// Every (head_dim, head_dim_v) pair the library accepts. cmake/instantiations.cmake parses these
// arrays as written here ("HeadDims <name>[] = {{d, dv}, ...};"): keep that form.
inline constexpr HeadDims kHeadDims[] = {{64, 64},   {96, 96},   {128, 128},
                                         {192, 192}, {192, 128}, {256, 256}};
// The pairs the decode family is built for: every head_dim of kHeadDims with head_dim_v equal to
// it (decode's q, k, v and o share one head dim).
inline constexpr HeadDims kDecodeHeadDims[] = {
    {64, 64}, {96, 96}, {128, 128}, {192, 192}, {256, 256}};
// The pair the lineage's Hopper steps (K3, K4, K5) are built for.
inline constexpr HeadDims kLineageHeadDims[] = {{128, 128}};
// The pairs the FP8 (e4m3) forward, K7, is built for.
inline constexpr HeadDims kFp8HeadDims[] = {{64, 64}, {128, 128}, {256, 256}};
// The pairs the Hopper backward (K6's family) is built for; the others run on fa2's backward.
inline constexpr HeadDims kBwdSm90HeadDims[] = {{64, 64}, {128, 128}, {256, 256}};

template <const auto& kList>
constexpr bool head_dims_in(int qk, int v) {
  for (const HeadDims& h : kList) {
    if (h.qk == qk && h.v == v) return true;
  }
  return false;
}
constexpr bool head_dims_supported(int qk, int v) { return head_dims_in<kHeadDims>(qk, v); }

// "64, 96, 128, 192 or 256" style text of the distinct head_dim values of a list, for messages.
template <const auto& kList>
std::string head_dims_text() {
  std::string out;
  int seen[std::size(kList)] = {};
  int n = 0;
  for (const HeadDims& h : kList) {
    bool dup = false;
    for (int i = 0; i < n; ++i) dup = dup || seen[i] == h.qk;
    if (!dup) seen[n++] = h.qk;
  }
  for (int i = 0; i < n; ++i) {
    if (i > 0) out += i == n - 1 ? " or " : ", ";
    out += std::to_string(seen[i]);
  }
  return out;
}

// A compile-time (head_dim, head_dim_v) pair handed to a dispatch callback.
template <HeadDims kDims>
struct HeadDimTag {
  static constexpr int qk = kDims.qk;
  static constexpr int v = kDims.v;
};

// A compile-time dtype handed to a dispatch callback; each family maps it to its element type.
template <DType kDType>
struct DTypeTag {
  static constexpr DType value = kDType;
};

// Calls fn(DTypeTag<dtype>{}, HeadDimTag<pair>{}) for the pair of kList that (qk, v) names and
// returns its Status; a dtype or pair the family is not built for is `unsupported`, naming
// `family`. The one dispatch idiom of every family's launch.cu.
template <const auto& kList, class Fn>
Status dispatch(const char* family, DType dtype, int qk, int v, Fn&& fn) {
  auto by_dims = [&](auto dtype_tag) -> Status {
    Status result{StatusCode::unsupported, std::string(family) +
                                               ": no instantiation for head_dim " +
                                               std::to_string(qk) + " / head_dim_v " +
                                               std::to_string(v)};
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (void)((kList[I].qk == qk && kList[I].v == v
                  ? (result = fn(dtype_tag, HeadDimTag<kList[I]>{}), true)
                  : false) ||
             ...);
    }(std::make_index_sequence<std::size(kList)>{});
    return result;
  };
  switch (dtype) {
    case DType::bf16: return by_dims(DTypeTag<DType::bf16>{});
    case DType::fp16: return by_dims(DTypeTag<DType::fp16>{});
    default: break;
  }
  return {StatusCode::unsupported,
          std::string(family) + ": no instantiation for dtype " + dtype_name(dtype)};
}

}  // namespace flashattn
