# K8's pre-pass (bf16/fp16 -> e4m3 with per-block descales, optional Hadamard rotation of q and k):
# one kernel per (input dtype, head dim), no instantiation files (three head dims, small kernels).
target_sources(flashattn PRIVATE ${PROJECT_SOURCE_DIR}/src/kernels/quant/quantize_fp8.cu)
