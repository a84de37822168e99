# flashattn_cuda_arch(<target> PORTABLE|HOPPER)
#   PORTABLE: kernels that run from Ampere up (sm_80 SASS plus sm_90 SASS for Hopper).
#   HOPPER:   kernels that use wgmma/setmaxnreg; these need the arch-specific sm_90a target
#             (plain sm_90 silently drops them), so it is spelled out as -gencode.
function(flashattn_cuda_arch target kind)
  if(kind STREQUAL "PORTABLE")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:
      -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90>)
  elseif(kind STREQUAL "HOPPER")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:
      -gencode=arch=compute_90a,code=sm_90a>)
  else()
    message(FATAL_ERROR "flashattn_cuda_arch: unknown kind '${kind}'")
  endif()
endfunction()
