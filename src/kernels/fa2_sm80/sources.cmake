# FA2 (mma.sync, sm_80+). One instantiation per (dtype, head_dim[, head_dim_v]).
target_sources(flashattn PRIVATE
  ${PROJECT_SOURCE_DIR}/src/kernels/fa2_sm80/launch.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/fa2_sm80/inst/fa2_bf16_hdim64.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/fa2_sm80/inst/fa2_bf16_hdim96.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/fa2_sm80/inst/fa2_bf16_hdim128.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/fa2_sm80/inst/fa2_bf16_hdim192.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/fa2_sm80/inst/fa2_bf16_hdim192x128.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/fa2_sm80/inst/fa2_bf16_hdim256.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/fa2_sm80/inst/fa2_fp16_hdim64.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/fa2_sm80/inst/fa2_fp16_hdim96.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/fa2_sm80/inst/fa2_fp16_hdim128.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/fa2_sm80/inst/fa2_fp16_hdim192.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/fa2_sm80/inst/fa2_fp16_hdim192x128.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/fa2_sm80/inst/fa2_fp16_hdim256.cu)
