# FA2 backward (mma.sync, sm_80+): launch.cu runs the pre/postprocess and dispatches the main
# kernel to one generated instantiation per (dtype, head dims).
target_sources(flashattn PRIVATE ${PROJECT_SOURCE_DIR}/src/kernels/fa2_bwd_sm80/launch.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/bwd_stages/stages.cu)
flashattn_instantiate(flashattn FAMILY fa2_bwd_sm80 PREFIX fa2_bwd LIST kHeadDims
  INCLUDE kernels/fa2_bwd_sm80/launch.cuh NAMESPACE flashattn::fa2_bwd BF16 __nv_bfloat16
  FP16 __half
  TEMPLATE "template Status run_main<@E@, @D@, @DV@>(const BackwardProblem&, const Workspace&)")
