# Locates the CuTe/CUTLASS 4.2 C++ headers, which come from PyPI (nvidia-cutlass==4.2.0.0 ships
# them under cutlass_library/source/include) and are never committed. They are required: the
# tensor-core families are built from CuTe.
#   1. -DFLASHATTN_CUTLASS_DIR=<dir containing cute/ and cutlass/> wins;
#   2. else Python is asked where cutlass_library lives, looking first in .deps/cutlass (where
#      scripts/bootstrap.sh installs it) and then in the interpreter's own site-packages.
set(FLASHATTN_CUTLASS_DIR "" CACHE PATH "Directory holding the cute/ and cutlass/ header trees")
if(NOT FLASHATTN_CUTLASS_DIR)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c
        "import sys, os; sys.path.insert(0, '${PROJECT_SOURCE_DIR}/.deps/cutlass'); import cutlass_library as c; print(os.path.join(os.path.dirname(c.__file__), 'source', 'include'))"
      OUTPUT_VARIABLE _fa_cutlass OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _fa_rc ERROR_QUIET)
    if(_fa_rc EQUAL 0 AND EXISTS "${_fa_cutlass}/cute/tensor.hpp")
      set(FLASHATTN_CUTLASS_DIR "${_fa_cutlass}" CACHE PATH "" FORCE)
    endif()
  endif()
endif()
if(FLASHATTN_CUTLASS_DIR AND EXISTS "${FLASHATTN_CUTLASS_DIR}/cute/tensor.hpp")
  message(STATUS "flashattn: CuTe/CUTLASS headers in ${FLASHATTN_CUTLASS_DIR}")
  add_library(flashattn_cutlass INTERFACE)
  target_include_directories(flashattn_cutlass SYSTEM INTERFACE ${FLASHATTN_CUTLASS_DIR})
  set(FLASHATTN_HAVE_CUTLASS ON)
else()
  message(FATAL_ERROR
    "flashattn: CuTe/CUTLASS 4.2 headers not found (no cute/tensor.hpp under "
    "'${FLASHATTN_CUTLASS_DIR}'). The tensor-core families (fa2 and later) need them: run "
    "scripts/bootstrap.sh, which installs nvidia-cutlass==4.2.0.0 into .deps/cutlass, or pass "
    "-DFLASHATTN_CUTLASS_DIR=<dir holding cute/ and cutlass/>.")
endif()
