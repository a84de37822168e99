"""Context-parallel (ring) attention over torch.distributed: one sequence sharded along its length
across the ranks of a process group, K/V passed around the ring, forward and backward.

    from flashattn.distributed import ring_flash_attn_func, shard, unshard
    q_loc, k_loc, v_loc = (shard(t, rank, world, "zigzag") for t in (q, k, v))
    out_loc = ring_flash_attn_func(q_loc, k_loc, v_loc, causal=True)     # layout="zigzag"
    out = unshard(out_loc, world, "zigzag")                               # the full sequence
    out_loc.backward(dout_loc)      # q_loc.grad, k_loc.grad, v_loc.grad: this rank's shards

Layouts (N ranks, the full sequence of length S):
- "contiguous": the sequence cut into N chunks of S/N; rank r holds chunk r.
- "zigzag": the sequence cut into 2N chunks of S/(2N); rank r holds chunks r and 2N-1-r,
  concatenated. With a causal mask every rank then does the same work at every ring step (the
  load balancing of ring-flash-attn and Megatron's context parallelism).
Without a mask the layout changes nothing in the computation (every query sees every key); it
only says how the caller sharded the sequence.

Each of the N ring steps attends the local queries to one rank's K/V with flashattn's
flash_attn_func (any kernel family, return_lse=True) while the next rank's K/V are in flight
(torch.distributed batched isend/irecv); the partial outputs are merged exactly through their
LSE in fp32 and rounded to the input dtype once at the end.

The backward passes K/V around the ring again, in the forward's order and with the forward's
sub-blocks, and runs flashattn's backward op (flashattn::bwd) on each block with the merged
(global) out and LSE that the forward saved: P = exp(S - lse) and D = rowsum(dO * O) are then those
of the whole row, so every block's dQ, dK, dV is its exact share of the gradient. dQ accumulates
locally in fp32; each K/V block's dK/dV accumulate in fp32 buffers that travel the ring one step
behind it (the next K/V in flight while a block is computed, the accumulators of the block just
finished sent on while the next is computed) and reach the block's owner one hop after the last
step. Each block's gradients come out of the kernel in the input dtype (the library writes dq, dk,
dv in q's dtype), so the ring's gradients carry one rounding per block on top of the
single-process kernel's one.
"""
import torch
import torch.distributed as dist

from . import _checks, ops
from .interface import flash_attn_func

LAYOUTS = ("zigzag", "contiguous")


def _layout(layout):
    if layout not in LAYOUTS:
        raise ValueError(f"layout: must be one of {LAYOUTS}, got {layout!r}")
    return layout


def _chunks(layout, world_size):
    return 2 * world_size if layout == "zigzag" else world_size


def _owned(layout, rank, world_size):
    """The chunk indices rank `rank` holds, in the order they are concatenated."""
    if layout == "zigzag":
        return (rank, 2 * world_size - 1 - rank)
    return (rank,)


def shard(x, rank, world_size, layout="zigzag", dim=1):
    """The part of the full-sequence tensor `x` that rank `rank` of `world_size` holds in
    `layout`, along dimension `dim` (1 for (batch, seqlen, heads, head_dim); 2 for an LSE
    (batch, heads, seqlen)). Returns a new contiguous tensor. x.shape[dim] must be divisible by
    2*world_size (zigzag) or world_size (contiguous)."""
    _layout(layout)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank: must be in [0, world_size={world_size}), got {rank}")
    n = _chunks(layout, world_size)
    if x.shape[dim] % n:
        raise ValueError(f"x.shape[{dim}] (seqlen): must be divisible by {n} for layout "
                         f"{layout!r} over {world_size} ranks, got {x.shape[dim]}")
    parts = x.chunk(n, dim=dim)
    return torch.cat([parts[i] for i in _owned(layout, rank, world_size)], dim=dim).contiguous()


def unshard(local, world_size, layout="zigzag", group=None, dim=1):
    """The full-sequence tensor from every rank's `local` shard (the inverse of shard), by an
    all_gather over `group` (default: the WORLD group, which must have world_size ranks). Every
    rank gets the whole tensor. local.shape[dim] must be the same on every rank and divisible by
    2 for the zigzag layout."""
    _layout(layout)
    if world_size != dist.get_world_size(group):
        raise ValueError(f"world_size: must equal the group's size ({dist.get_world_size(group)}),"
                         f" got {world_size}")
    per_rank = len(_owned(layout, 0, world_size))
    if local.shape[dim] % per_rank:
        raise ValueError(f"local.shape[{dim}] (local seqlen): must be even for layout 'zigzag', "
                         f"got {local.shape[dim]}")
    local = local.contiguous()
    gathered = [torch.empty_like(local) for _ in range(world_size)]
    dist.all_gather(gathered, local, group=group)
    chunks = [None] * _chunks(layout, world_size)
    for rank, part in enumerate(gathered):
        for index, piece in zip(_owned(layout, rank, world_size), part.chunk(per_rank, dim=dim)):
            chunks[index] = piece
    return torch.cat(chunks, dim=dim)


def _merge(acc_out, acc_lse, out, lse):
    """Adds one partial result to the fp32 accumulators in place: out = sum_i exp(lse_i - lse)
    out_i, lse = logsumexp_i lse_i. acc_out/out (b, s, h, dv), acc_lse/lse (b, h, s). A row whose
    merged lse is -inf (no key seen yet) keeps out 0 and lse -inf instead of 0/0."""
    new_lse = torch.logaddexp(acc_lse, lse)
    seen = torch.isfinite(new_lse)
    safe = torch.where(seen, new_lse, 0.0)
    w_acc = torch.where(seen, torch.exp(acc_lse - safe), 0.0).transpose(1, 2).unsqueeze(-1)
    w_new = torch.where(seen, torch.exp(lse - safe), 0.0).transpose(1, 2).unsqueeze(-1)
    acc_out.mul_(w_acc).add_(out.float() * w_new)
    acc_lse.copy_(new_lse)


def _blocks(step, rank, world_size, causal, layout, seqlen):
    """The attention calls of one ring step for this rank, the K/V having come from rank
    (rank - step) mod N: a list of (query rows, key rows, causal), rows as slices of the local
    shards, an empty list when nothing is visible.

    Step 0 (the rank's own K/V): one call over the whole shard with the caller's mask. In the
    zigzag layout the local sequence is [chunk r, chunk 2N-1-r], and the square causal mask over
    it is exactly the global one (flashattn's bottom-right causal is the diagonal mask when
    query and key lengths are equal): chunk r sees itself, chunk 2N-1-r sees chunk r whole and
    itself on the diagonal.
    Other steps, causal, source rank src: a chunk sees an earlier chunk whole, a later one not at
    all. Zigzag: src < r, both query chunks see chunk src and not chunk 2N-1-src -> all queries
    against the first half of K/V; src > r, only chunk 2N-1-r sees anything, and it sees both of
    src's chunks -> the second half of the queries against all K/V. Both cost 2 c^2 for chunks of
    c, so every rank is equally busy at every step. Contiguous: src < r whole, src > r nothing
    (unbalanced: rank N-1 works N times as much as rank 0).
    """
    every = slice(0, seqlen)
    if step == 0 or not causal:
        return [(every, every, causal and step == 0)]
    src = (rank - step) % world_size
    if layout == "contiguous":
        return [(every, every, False)] if src < rank else []
    half = seqlen // 2
    if src < rank:
        return [(every, slice(0, half), False)]
    return [(slice(half, seqlen), every, False)]


def _peers(group):
    """Global ranks of the next and the previous rank in the ring of `group`."""
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    if group is None or group is dist.group.WORLD:
        return (rank + 1) % size, (rank - 1) % size
    return (dist.get_global_rank(group, (rank + 1) % size),
            dist.get_global_rank(group, (rank - 1) % size))


def _exchange(sends, recvs, nxt, prv, group):
    """One batch: `sends` to the next rank, `recvs` filled from the previous one. Every rank posts
    the same sequence of batches, so sends and receives pair up in order (NCCL has no tags)."""
    return dist.batch_isend_irecv([dist.P2POp(dist.isend, t, nxt, group) for t in sends] +
                                  [dist.P2POp(dist.irecv, t, prv, group) for t in recvs])


def _wait(pending):
    for work in pending or ():
        work.wait()


def _ring_forward(q, k, v, causal, softmax_scale, group, layout, kernel, sinks):
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    nxt, prv = _peers(group)
    batch, seqlen, heads, _ = q.shape
    acc_out = torch.zeros(batch, seqlen, heads, v.shape[3], dtype=torch.float32, device=q.device)
    acc_lse = torch.full((batch, heads, seqlen), float("-inf"), dtype=torch.float32,
                         device=q.device)
    # The K/V being attended and the K/V arriving: one batch of isend/irecv per step, issued
    # before the step's attention and waited for after it. With NCCL the transfers run on
    # ProcessGroupNCCL's own stream, ordered after the work already queued on the current
    # stream (so the send reads finished K/V), and wait() makes the current stream wait for them:
    # the transfer overlaps the attention without a stream of our own.
    cur_k, cur_v = k.contiguous(), v.contiguous()
    for step in range(world_size):
        pending = None
        if step + 1 < world_size:
            nxt_k, nxt_v = torch.empty_like(cur_k), torch.empty_like(cur_v)
            pending = _exchange([cur_k, cur_v], [nxt_k, nxt_v], nxt, prv, group)
        try:
            for rows, cols, block_causal in _blocks(step, rank, world_size, causal, layout,
                                                    seqlen):
                # Sinks join each row's softmax denominator once: only in step 0, which every
                # row takes part in (its own keys); the merge carries them into the total.
                out, lse = flash_attn_func(q[:, rows], cur_k[:, cols], cur_v[:, cols],
                                           softmax_scale=softmax_scale, causal=block_causal,
                                           return_lse=True, kernel=kernel,
                                           sinks=sinks if step == 0 else None)
                _merge(acc_out[:, rows], acc_lse[:, :, rows], out, lse)
        finally:
            # Also when the attention raised (a refused argument raises on every rank alike):
            # every rank posted this step's transfers, so they complete and none is left behind.
            _wait(pending)
        if pending is not None:
            cur_k, cur_v = nxt_k, nxt_v
    return acc_out.to(q.dtype), acc_lse


def _ring_backward(dout, q, k, v, out, lse, sinks, causal, softmax_scale, group, layout, kernel,
                   deterministic, needs):
    """dq, dk, dv, dsinks of this rank's shards (None where `needs` says no), given dout of the
    local out. The ring of the forward again, block for block: the block backward reads the
    saved global out and lse, so each block's gradients are exact and simply add up."""
    need_dq, need_dk, need_dv, need_dsinks = needs
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    nxt, prv = _peers(group)
    seqlen = q.shape[1]
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    bwd_kernel = ops.backward_kernel(kernel)
    dout = ops._readable(dout)  # once here, not a copy per block (a row slice stays readable)
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device) if need_dq else None
    # The accumulators that travel: dK and/or dV of the K/V block held at a step.
    travel = [t for t, need in ((k, need_dk), (v, need_dv)) if need]
    dsinks = None
    cur_k, cur_v = k.contiguous(), v.contiguous()
    kv_pending = acc_pending = None
    arriving, sent = [], []
    try:
        for step in range(world_size):
            if step + 1 < world_size:
                nxt_k, nxt_v = torch.empty_like(cur_k), torch.empty_like(cur_v)
                kv_pending = _exchange([cur_k, cur_v], [nxt_k, nxt_v], nxt, prv, group)
            acc = [torch.zeros(t.shape, dtype=torch.float32, device=t.device) for t in travel]
            for rows, cols, block_causal in _blocks(step, rank, world_size, causal, layout,
                                                    seqlen):
                # Sinks as in the forward: only step 0 counted them, so only step 0's backward
                # sees them (with the global lse, P_sink = exp(sink - lse) is the whole row's).
                g_q, g_k, g_v, g_sinks = ops.bwd(
                    dout[:, rows], q[:, rows], cur_k[:, cols], cur_v[:, cols], out[:, rows],
                    lse[:, :, rows], scale, block_causal, -1, -1, deterministic, bwd_kernel,
                    sinks if step == 0 else None)
                if need_dq:
                    dq[:, rows] += g_q
                for a, g in zip(acc, [g for g, need in ((g_k, need_dk), (g_v, need_dv))
                                      if need]):
                    a[:, cols] += g
                if step == 0 and need_dsinks:
                    dsinks = g_sinks
            if travel and world_size > 1:
                # The accumulators of this block from the ranks that held it before (posted by
                # the previous rank a step ago, carried over this step's compute), plus ours,
                # go on to the next rank: after the last step that is the block's owner.
                _wait(acc_pending)
                acc_pending = None
                for a, got in zip(acc, arriving):
                    a += got
                arriving = [torch.empty_like(a) for a in acc]
                sent = acc  # referenced until its transfer is waited for, a step later
                acc_pending = _exchange(sent, arriving, nxt, prv, group)
            elif travel:
                arriving = acc  # one rank: the block never leaves
            _wait(kv_pending)
            if kv_pending is not None:
                cur_k, cur_v = nxt_k, nxt_v
                kv_pending = None
        _wait(acc_pending)  # the last hop: this rank's own dK/dV, summed over every rank
        acc_pending, sent = None, []
    finally:
        # As in the forward: when a block raised (on every rank alike), the posted transfers
        # still complete so that the ring is left usable.
        _wait(kv_pending)
        _wait(acc_pending)
    grads = dict(zip([n for n, need in (("dk", need_dk), ("dv", need_dv)) if need], arriving))
    if dsinks is not None:
        # The sinks are the same parameter on every rank: each rank's dsinks is the sum over all
        # ranks' rows. all_gather and a sum in rank order (not all_reduce, whose order is the
        # backend's) keep it bitwise reproducible.
        parts = [torch.empty_like(dsinks) for _ in range(world_size)]
        dist.all_gather(parts, dsinks.contiguous(), group=group)
        dsinks = torch.stack(parts).sum(0)
    return (None if dq is None else dq.to(q.dtype),
            grads["dk"].to(k.dtype) if need_dk else None,
            grads["dv"].to(v.dtype) if need_dv else None,
            dsinks)


class _RingAttention(torch.autograd.Function):
    # The received K/V are not part of the autograd graph (the per-block ops' own autograd would
    # miss their gradients), so the ring is one Function with its own backward.
    @staticmethod
    def forward(ctx, q, k, v, causal, softmax_scale, group, layout, kernel, sinks,
                deterministic):
        out, lse = _ring_forward(q, k, v, causal, softmax_scale, group, layout, kernel, sinks)
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(q, k, v, out, lse, sinks)
        ctx.args = (causal, softmax_scale, group, layout, kernel, deterministic)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse, sinks = ctx.saved_tensors
        needs = ctx.needs_input_grad
        dq, dk, dv, dsinks = _ring_backward(
            grad_out, q, k, v, out, lse, sinks, *ctx.args,
            (needs[0], needs[1], needs[2], sinks is not None and needs[8]))
        return dq, dk, dv, None, None, None, None, None, dsinks, None


def ring_flash_attn_func(q, k, v, causal=False, softmax_scale=None, group=None, layout="zigzag",
                         return_lse=False, kernel="auto", *, sinks=None, deterministic=False):
    """Attention over a sequence sharded along its length across the ranks of `group`.

    q: (batch, local_seqlen, heads_q, head_dim); k: (batch, local_seqlen_k, heads_kv, head_dim);
    v: (batch, local_seqlen_k, heads_kv, head_dim_v): this rank's shards in `layout` (see the
    module docstring and shard()). Every rank must pass the same shapes, dtypes and arguments
    (the ring's receive buffers are shaped after the local K/V). dtype, head dims and GQA
    (heads_kv divides heads_q) as flash_attn_func. group: a torch.distributed process group
    (default WORLD); gloo for CPU tensors, NCCL for CUDA tensors (each rank on its own device,
    set with torch.cuda.set_device). causal: the global causal mask of the full sequence
    (needs local_seqlen == local_seqlen_k). layout: "zigzag" (load-balanced for causal) or
    "contiguous". kernel: as flash_attn_func ("auto" picks "cpu" for CPU tensors). sinks: as
    flash_attn_func, one logit per query head joining each row's denominator once.

    Returns out (batch, local_seqlen, heads_q, head_dim_v) in q's dtype, the rows of this rank's
    queries; with return_lse, (out, lse), lse (batch, heads_q, local_seqlen) fp32 (unshard it
    with dim=2). The partial results are merged in fp32, so out is rounded to q's dtype once.

    Differentiable (lse is not): the backward is a ring too, so every rank must run it (and with
    the same inputs requiring gradients), as for any collective. q, k, v get the gradients of
    their local shards, with respect to the sum of every rank's loss (dK/dV come back around the
    ring from every rank that attended to them). sinks, replicated on every rank, gets the
    gradient of that same sum, identical on every rank: it is already reduced over `group`, so
    a data-parallel reduction must not sum it over `group` again. The backward runs on the
    forward's family when it has one, else "auto" (as flash_attn_func). deterministic: passed to
    every block's backward; the sums across blocks and ranks run in a fixed order (ring order,
    dsinks summed in rank order), so with it repeated backward calls give bitwise identical
    gradients.
    """
    _checks.dense(q, k, v)
    _layout(layout)
    if causal:
        if k.shape[1] != q.shape[1]:
            raise ValueError(f"k.shape[1] (local seqlen_k): must equal q.shape[1] ({q.shape[1]}) "
                             f"with causal, got {k.shape[1]}")
        if layout == "zigzag" and q.shape[1] % 2:
            raise ValueError(f"q.shape[1] (local seqlen): must be even for layout 'zigzag' (two "
                             f"chunks of equal length per rank), got {q.shape[1]}")
    out, lse = _RingAttention.apply(q, k, v, bool(causal), softmax_scale, group, layout, kernel,
                                    sinks, bool(deterministic))
    return (out, lse) if return_lse else out
