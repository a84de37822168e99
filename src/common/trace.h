// The one trace-hook scheme of the kernel families, for diagnosis builds only.
//
// FA_TRACE(role, tag, after) marks a point of a kernel: `role` says who records (a warp role of
// the Hopper kernels; which kernel of the decode family), `tag` names the point (an enumerator of
// the family's trace tags, or a slot number), `after` is a value the stamp must be ordered after
// (0 for none). FA_TRACE_INIT() runs once per block before its first barrier, FA_TRACE_DUMP(path)
// on the host after a launch. All three are empty (no instruction, no register) unless the
// translation unit defined FA_TRACE_HOOK(role, tag, after) before including any kernel header:
//   - the Hopper timeline build (cmake -DFLASHATTN_TIMELINE=ON): fa3_sm90/timeline.cuh;
//   - bench/decode_timeline.cu: globaltimer and clock64 stamps of the decode kernels.
// Never ship a build with hooks: the stamps cost registers and global stores.
#pragma once

#ifdef FA_TRACE_HOOK
#define FA_TRACE(role, tag, after) FA_TRACE_HOOK(role, tag, after)
#else
#define FA_TRACE(role, tag, after) \
  do {                             \
  } while (0)
#endif

#ifndef FA_TRACE_INIT_HOOK
#define FA_TRACE_INIT() \
  do {                  \
  } while (0)
#else
#define FA_TRACE_INIT() FA_TRACE_INIT_HOOK()
#endif

#ifndef FA_TRACE_DUMP_HOOK
#define FA_TRACE_DUMP(path) \
  do {                      \
    (void)(path);           \
  } while (0)
#else
#define FA_TRACE_DUMP(path) FA_TRACE_DUMP_HOOK(path)
#endif
