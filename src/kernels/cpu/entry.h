// The cpu family's entry point for the dispatch layer: FlashAttention's tiled forward on the host,
// multithreaded (forward.cpp). Takes a validated Problem over host memory; returns when done.
#pragma once

#include "common/problem.h"

namespace flashattn {

Status cpu_forward(const Problem& problem);

}  // namespace flashattn
