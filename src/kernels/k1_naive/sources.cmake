# K1: naive three-launch baseline (one translation unit), plus the shared workspace pool.
target_sources(flashattn PRIVATE
  ${PROJECT_SOURCE_DIR}/src/common/workspace.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/k1_naive/launch.cu)
