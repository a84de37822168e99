# K1: naive three-launch baseline (one translation unit; a step of the lineage).
target_sources(flashattn PRIVATE ${PROJECT_SOURCE_DIR}/src/kernels/k1_naive/launch.cu)
