# K2: fused SIMT forward (a step of the lineage). One instantiation per (dtype, head dims).
target_sources(flashattn PRIVATE ${PROJECT_SOURCE_DIR}/src/kernels/k2_simt/launch.cu)
flashattn_instantiate(flashattn FAMILY k2_simt PREFIX k2 LIST kHeadDims
  INCLUDE kernels/k2_simt/launch.cuh NAMESPACE flashattn::k2 BF16 __nv_bfloat16 FP16 __half
  TEMPLATE "template Status run_forward<@E@, @D@, @DV@>(const Problem&)")
