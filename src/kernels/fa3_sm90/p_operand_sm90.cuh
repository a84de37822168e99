// How the softmax's P (the fp32 S accumulator of Q·Kᵀ, exponentiated in place) becomes the
// register A operand of O += P·V. A Config names one (Config::POperand); the mainloop calls
//     rP = fragment<Element>(tSrS);  tOrP = as_a_operand(rP);  ...  convert(tSrS, rP);
//
// 16-bit (POperand16): a k16 wgmma's A fragment holds, per thread, the same (row, column) pairs
// as the accumulator: P is rounded element for element and read through a reshaped view.
//
// e4m3 (POperandE4m3): a k32 8-bit wgmma's A fragment holds, per thread and 32-key slice, four
// bytes of consecutive keys 4t..4t+3 (t = lane % 4) of rows r and r + 8 and the same of keys
// 16 + 4t..: register a0 = (r, 4t..4t+3), a1 = (r + 8, 4t..), a2 = (r, 16 + 4t..), a3 = (r + 8,
// 16 + 4t..). The accumulator holds keys 2t, 2t + 1 of every 8-key group instead. Rather than
// move bytes between the lanes of a quad (FlashAttention-3's shuffles), the bytes stay in their
// thread and the keys are relabelled: A position p of a slice holds the key
//     key_of_a_position(p) = 16·(p / 16) + 2·((p % 16) / 4) + (p % 2) + 8·((p % 4) / 2),
// and the producer writes Vᵀ with its keys in the same order (transpose_v_sm90.cuh), so that
// Σ_p P[key(p)]·V[key(p)] is still P·V. No shuffle, no O permutation: the cost is four cvt and
// two movs per 8 P values, and the relabelling is free inside the transpose the producer does
// anyway.
#pragma once

#include <cute/tensor.hpp>
#include <cstdint>

namespace flashattn::fa3 {

using namespace cute;

// The S accumulator ((2, 2, N/8), 1, 1) read as the register A operand of a k16 wgmma:
// ((2, 2, 2), 1, N/16) — two neighbouring 8-column groups make one k16 slice.
template <class L>
__device__ __forceinline__ constexpr auto acc_as_a_operand(L l) {
  auto groups = logical_divide(get<0, 2>(l), Layout<_2>{});  // (2, V/2)
  return make_layout(make_layout(get<0, 0>(l), get<0, 1>(l), get<0>(groups)), get<1>(l),
                     make_layout(get<1>(groups), get<2>(l)));
}

// fp32 fragment -> a 16-bit fragment of the same size (rounded to nearest even).
template <class TensorF, class TensorH>
__device__ __forceinline__ void convert_into(const TensorF& from, TensorH& to) {
  using Element = typename TensorH::value_type;
#pragma unroll
  for (int i = 0; i < size(from); ++i) to(i) = static_cast<Element>(from(i));
}

struct POperand16 {
  template <class Element, class FragS>
  __device__ __forceinline__ static auto fragment(const FragS& s) {
    return make_tensor_like<Element>(s);
  }
  template <class FragP>
  __device__ __forceinline__ static auto as_a_operand(FragP& p) {
    return make_tensor(p.data(), acc_as_a_operand(p.layout()));
  }
  template <class FragS, class FragP>
  __device__ __forceinline__ static void convert(const FragS& s, FragP& p) {
    convert_into(s, p);
  }
};

// Position p (0..31) of a 32-key slice of the e4m3 A operand -> the key of the slice it holds.
__host__ __device__ constexpr int key_of_a_position(int p) {
  return 16 * (p / 16) + 2 * ((p % 16) / 4) + (p % 2) + 8 * ((p % 4) / 2);
}

// Four fp32 values -> four e4m3 bytes (x0 in the lowest), rounded to nearest even, saturating
// to ±448. (cvt's e4m3x2 puts its first source in the upper byte.)
__device__ __forceinline__ uint32_t pack_e4m3x4(float x0, float x1, float x2, float x3) {
  uint32_t out;
  asm("{\n"
      "  .reg .b16 lo, hi;\n"
      "  cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "  cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "  mov.b32 %0, {lo, hi};\n"
      "}\n"
      : "=r"(out)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return out;
}

struct POperandE4m3 {
  // ((4, 2, 2), 1, N/32): the A fragment of the k32 slices, in the atom's register order.
  template <class Element, class FragS>
  __device__ __forceinline__ static auto fragment(const FragS& s) {
    static_assert(size(FragS{}) % 16 == 0, "8-bit P·V needs key blocks of a multiple of 32");
    return make_tensor<Element>(Shape<Shape<_4, _2, _2>, _1, Int<size(FragS{}) / 16>>{});
  }
  template <class FragP>
  __device__ __forceinline__ static auto as_a_operand(FragP& p) {
    return make_tensor(p.data(), p.layout());
  }
  // Accumulator value i = c + 2·half + 4·g (column 2t + c of 8-key group g, row r + 8·half);
  // slice k holds groups 4k..4k+3.
  template <class FragS, class FragP>
  __device__ __forceinline__ static void convert(const FragS& s, FragP& p) {
    Tensor words = recast<uint32_t>(p);
#pragma unroll
    for (int k = 0; k < size(s) / 16; ++k) {
      const int a = 16 * k;
      words(4 * k + 0) = pack_e4m3x4(s(a + 0), s(a + 1), s(a + 4), s(a + 5));
      words(4 * k + 1) = pack_e4m3x4(s(a + 2), s(a + 3), s(a + 6), s(a + 7));
      words(4 * k + 2) = pack_e4m3x4(s(a + 8), s(a + 9), s(a + 12), s(a + 13));
      words(4 * k + 3) = pack_e4m3x4(s(a + 10), s(a + 11), s(a + 14), s(a + 15));
    }
  }
};

}  // namespace flashattn::fa3
