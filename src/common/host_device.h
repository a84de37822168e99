// FA_HD: a function compiled for the host and, under nvcc, for the device too (inlined there), so
// kernels and the CPU reference / tests share one definition.
#pragma once

#if defined(__CUDACC__)
#define FA_HD __host__ __device__ __forceinline__
#else
#define FA_HD inline
#endif
