// CK(call) for the standalone bench programs (k7_smoke.cu, k8_smoke.cu, k8_prepass_ab.cu): a CUDA
// error is printed with its place and ends the program with status 2 (1 is their "check failed").
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e = (x);                                                        \
    if (e != cudaSuccess) {                                                     \
      printf("CUDA %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      exit(2);                                                                  \
    }                                                                           \
  } while (0)
