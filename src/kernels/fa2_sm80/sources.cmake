# FA2 (mma.sync, sm_80+). One instantiation per (dtype, head dims).
target_sources(flashattn PRIVATE ${PROJECT_SOURCE_DIR}/src/kernels/fa2_sm80/launch.cu)
flashattn_instantiate(flashattn FAMILY fa2_sm80 PREFIX fa2 LIST kHeadDims
  INCLUDE kernels/fa2_sm80/launch.cuh NAMESPACE flashattn::fa2 BF16 __nv_bfloat16 FP16 __half
  TEMPLATE "template Status run_forward<@E@, @D@, @DV@>(const Problem&)")
