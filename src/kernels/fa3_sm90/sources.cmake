# Hopper forward (K3-K6): TMA, wgmma and setmaxnreg need the arch-specific sm_90a target, so
# these translation units build as their own object library with HOPPER arch flags and are linked
# into flashattn. One instantiation per (schedule, dtype, head dims): K6, the production path, for
# every pair of kHeadDims; K3, K4, K5 (steps of the lineage, FLASHATTN_LINEAGE) for
# kLineageHeadDims (head dim 128).
add_library(flashattn_sm90 OBJECT ${PROJECT_SOURCE_DIR}/src/kernels/fa3_sm90/launch.cu)
flashattn_instantiate(flashattn_sm90 FAMILY fa3_sm90 PREFIX k6 LIST kHeadDims
  INCLUDE kernels/fa3_sm90/launch.cuh NAMESPACE flashattn::fa3
  BF16 cutlass::bfloat16_t FP16 cutlass::half_t
  TEMPLATE "template Status run_forward<@E@, @D@, @DV@, ScheduleK6>(const Problem&, const DebugOptions&)")
# K7, the FP8 (e4m3) forward: one instantiation per output dtype and pair of kFp8HeadDims.
flashattn_instantiate(flashattn_sm90 FAMILY fa3_sm90 PREFIX k7 LIST kFp8HeadDims
  INCLUDE kernels/fa3_sm90/launch.cuh NAMESPACE flashattn::fa3
  BF16 cutlass::bfloat16_t FP16 cutlass::half_t
  TEMPLATE "template Status run_forward_fp8<@E@, @D@, ScheduleK6, false>(const Problem&, const DebugOptions&)")
# K8: K7 with per-block descales (block quantisation; the pre-pass is src/kernels/quant).
flashattn_instantiate(flashattn_sm90 FAMILY fa3_sm90 PREFIX k8 LIST kFp8HeadDims
  INCLUDE kernels/fa3_sm90/launch.cuh NAMESPACE flashattn::fa3
  BF16 cutlass::bfloat16_t FP16 cutlass::half_t
  TEMPLATE "template Status run_forward_fp8<@E@, @D@, ScheduleK6, true>(const Problem&, const DebugOptions&)")
# wgmma N outside {8, 16, 32, 64, 96, 128, 192, 256} is one of CUTLASS's "extended" GMMA shapes,
# declared only under CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED; without it CuTe's atom selector tiles
# such an N with n16 or n8 atoms (d 192's 80- and 112-key Q·Kᵀ ran as five and seven m64n16k16
# per k step). The extended headers add ~20 s to a translation unit, so only the instantiations
# whose tiles need them get the define (the configs' static_assert names any that is missing).
foreach(inst k6_bf16_hdim192 k6_fp16_hdim192 k6_bf16_hdim192x128 k6_fp16_hdim192x128)
  set(file ${PROJECT_BINARY_DIR}/inst/fa3_sm90/${inst}.cu)
  if(EXISTS ${file})
    set_source_files_properties(${file} PROPERTIES COMPILE_DEFINITIONS
      CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED)
  endif()
endforeach()
# The backward's main kernel (wgmma): one instantiation per (dtype, head dim) of kBwdSm90HeadDims.
target_sources(flashattn_sm90 PRIVATE ${PROJECT_SOURCE_DIR}/src/kernels/fa3_sm90/launch_bwd.cu)
flashattn_instantiate(flashattn_sm90 FAMILY fa3_sm90 PREFIX bwd_sm90 LIST kBwdSm90HeadDims
  INCLUDE kernels/fa3_sm90/launch_bwd.cuh NAMESPACE flashattn::fa3
  BF16 cutlass::bfloat16_t FP16 cutlass::half_t
  TEMPLATE "template Status run_backward_main<@E@, @D@>(const BackwardProblem&, const bwd::Workspace&)")
if(FLASHATTN_LINEAGE)
  target_sources(flashattn_sm90 PRIVATE ${PROJECT_SOURCE_DIR}/src/kernels/fa3_sm90/launch_k3.cu)
  foreach(step k4 k5)
    string(TOUPPER ${step} STEP)
    flashattn_instantiate(flashattn_sm90 FAMILY fa3_sm90 PREFIX ${step} LIST kLineageHeadDims
      INCLUDE kernels/fa3_sm90/launch.cuh NAMESPACE flashattn::fa3
      BF16 cutlass::bfloat16_t FP16 cutlass::half_t
      TEMPLATE "template Status run_forward<@E@, @D@, @DV@, Schedule${STEP}>(const Problem&, const DebugOptions&)")
  endforeach()
  flashattn_instantiate(flashattn_sm90 FAMILY fa3_sm90 PREFIX k3 LIST kLineageHeadDims
    INCLUDE kernels/fa3_sm90/launch_k3.cuh NAMESPACE flashattn::fa3
    BF16 cutlass::bfloat16_t FP16 cutlass::half_t
    TEMPLATE "template Status run_forward_tma_simt<@E@, @D@>(const Problem&)")
endif()
target_include_directories(flashattn_sm90 PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
target_link_libraries(flashattn_sm90 PRIVATE flashattn_cutlass)
target_compile_options(flashattn_sm90 PRIVATE
  -Xcompiler=-Wall,-Wextra --expt-relaxed-constexpr -lineinfo -Xptxas=--warn-on-spills)
flashattn_cuda_arch(flashattn_sm90 HOPPER)
target_sources(flashattn PRIVATE $<TARGET_OBJECTS:flashattn_sm90>)
# Every sm_90a object is compiled through a launcher that fails the build on spills, serialized
# wgmma or missing wgmma/setmaxnreg in the PTX (cmake/hopper_compile_check.sh): the CI machine has
# no GPU, so this is its proof that the Hopper kernels are what they claim to be.
# A diagnosis build (cmake -DFLASHATTN_TIMELINE=ON, in its own build directory) compiles in the
# per-warp timeline stamps of timeline.cuh; they take registers (the 24-register producer spills),
# so that build skips the check. Never ship it.
option(FLASHATTN_TIMELINE "Per-warp timeline stamps in the Hopper kernels (diagnosis only)" OFF)
if(FLASHATTN_TIMELINE)
  target_compile_definitions(flashattn_sm90 PRIVATE FLASHATTN_TIMELINE)
else()
  set_target_properties(flashattn_sm90 PROPERTIES
    CUDA_COMPILER_LAUNCHER ${PROJECT_SOURCE_DIR}/cmake/hopper_compile_check.sh)
endif()
target_compile_definitions(flashattn_sm90 PRIVATE FLASHATTN_LINEAGE=$<BOOL:${FLASHATTN_LINEAGE}>)
