# FA2 backward (mma.sync, sm_80+).
target_sources(flashattn PRIVATE ${PROJECT_SOURCE_DIR}/src/kernels/fa2_bwd_sm80/launch.cu)
