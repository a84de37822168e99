# Paged KV in prefill: the gather step (GPU and host) the dispatch layer runs before the
# variable-length forward. No instantiations: it copies bytes, whatever the dtype and head dim.
target_sources(flashattn PRIVATE
  ${PROJECT_SOURCE_DIR}/src/api/paged_forward.cpp
  ${PROJECT_SOURCE_DIR}/src/kernels/paged/gather.cu
  ${PROJECT_SOURCE_DIR}/src/kernels/paged/gather_host.cpp)
