# Decode (split-KV, paged KV cache, GQA packing; mma.sync, sm_80+): the host API files and one
# instantiation per (dtype, head_dim).
target_sources(flashattn PRIVATE
  ${PROJECT_SOURCE_DIR}/src/api/decode.cpp
  ${PROJECT_SOURCE_DIR}/src/api/decode_splits.cpp
  ${PROJECT_SOURCE_DIR}/src/api/decode_validate.cpp
  ${PROJECT_SOURCE_DIR}/src/kernels/decode/launch.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/decode/inst/decode_bf16_hdim64.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/decode/inst/decode_bf16_hdim128.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/decode/inst/decode_bf16_hdim256.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/decode/inst/decode_fp16_hdim64.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/decode/inst/decode_fp16_hdim128.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/decode/inst/decode_fp16_hdim256.cu)
