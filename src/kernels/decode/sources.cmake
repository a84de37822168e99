# Decode (split-KV, paged KV cache, GQA packing; mma.sync, sm_80+): the host API files and one
# instantiation file per (dtype, head dim) of kDecodeHeadDims, each with the 16-bit and the e4m3 cache.
target_sources(flashattn PRIVATE
  ${PROJECT_SOURCE_DIR}/src/api/decode.cpp
  ${PROJECT_SOURCE_DIR}/src/api/decode_splits.cpp
  ${PROJECT_SOURCE_DIR}/src/api/decode_validate.cpp
  ${PROJECT_SOURCE_DIR}/src/kernels/decode/launch.cu)
flashattn_instantiate(flashattn FAMILY decode PREFIX decode LIST kDecodeHeadDims
  INCLUDE kernels/decode/launch.cuh NAMESPACE flashattn::decoding BF16 __nv_bfloat16 FP16 __half
  TEMPLATE "template Status run_decode<@E@, @D@, false>(const DecodeProblem&)"
           "template Status blocks_per_sm<@E@, @D@, false>(int*)"
           "template Status run_decode<@E@, @D@, true>(const DecodeProblem&)"
           "template Status blocks_per_sm<@E@, @D@, true>(int*)")
