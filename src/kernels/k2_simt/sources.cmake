# K2: fused SIMT forward. One instantiation per (dtype, head_dim[, head_dim_v]).
target_sources(flashattn PRIVATE
  ${PROJECT_SOURCE_DIR}/src/kernels/k2_simt/launch.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/k2_simt/inst/k2_bf16_hdim64.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/k2_simt/inst/k2_bf16_hdim96.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/k2_simt/inst/k2_bf16_hdim128.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/k2_simt/inst/k2_bf16_hdim192.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/k2_simt/inst/k2_bf16_hdim192x128.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/k2_simt/inst/k2_bf16_hdim256.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/k2_simt/inst/k2_fp16_hdim64.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/k2_simt/inst/k2_fp16_hdim96.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/k2_simt/inst/k2_fp16_hdim128.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/k2_simt/inst/k2_fp16_hdim192.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/k2_simt/inst/k2_fp16_hdim192x128.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/k2_simt/inst/k2_fp16_hdim256.cu)
