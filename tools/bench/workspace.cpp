#include "workspace.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <utility>

#include "flashattn/reference.h"

namespace flashattn::bench {

Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::success();
  return {StatusCode::cuda_error, std::string(what) + ": " + cudaGetErrorString(err)};
}

Block::Block(Block&& other) noexcept
    : memory_(other.memory_),
      ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

Block& Block::operator=(Block&& other) noexcept {
  if (this != &other) {
    release();
    memory_ = other.memory_;
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Block::~Block() {
  release();
}

void Block::release() {
  if (ptr_ == nullptr) return;
  if (memory_ == Memory::device) {
    cudaFree(ptr_);
  } else {
    std::free(ptr_);
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

Status Block::allocate(Memory memory, size_t bytes) {
  release();
  memory_ = memory;
  const size_t n = std::max<size_t>(bytes, 1);  // never a null pointer for an empty tensor
  if (memory == Memory::device) {
    if (Status st = cuda_status(cudaMalloc(&ptr_, n), "cudaMalloc"); !st.ok()) {
      ptr_ = nullptr;
      cudaGetLastError();  // an allocation failure is not sticky; clear it
      st.message += " (" + std::to_string(n) + " bytes)";
      return st;
    }
  } else {
    ptr_ = std::malloc(n);
    if (ptr_ == nullptr) {
      return {StatusCode::unsupported, "host allocation of " + std::to_string(n) + " bytes failed"};
    }
  }
  bytes_ = bytes;
  return Status::success();
}

TensorSizes tensor_sizes(const Workload& w) {
  const auto es = static_cast<size_t>(dtype_size(w.dtype));
  const auto b = static_cast<size_t>(w.batch);
  const auto sq = static_cast<size_t>(w.seqlen_q), sk = static_cast<size_t>(w.seqlen_k);
  const auto h = static_cast<size_t>(w.heads), hkv = static_cast<size_t>(w.kv_heads);
  TensorSizes s;
  s.q = b * sq * h * static_cast<size_t>(w.hdim) * es;
  // Paged: batch * blocks_per_sequence blocks of page_size keys.
  const size_t key_rows =
      w.page_size > 0 ? b * static_cast<size_t>((w.seqlen_k + w.page_size - 1) / w.page_size) *
                            static_cast<size_t>(w.page_size)
                      : b * sk;
  s.k = key_rows * hkv * static_cast<size_t>(w.hdim) * es;
  s.v = key_rows * hkv * static_cast<size_t>(w.hdim_v) * es;
  const auto o_es = static_cast<size_t>(dtype_size(w.out_dtype()));  // bf16 for FP8 inputs
  s.o = b * sq * h * static_cast<size_t>(w.hdim_v) * o_es;
  s.lse = b * h * sq * sizeof(float);
  if (w.block_scaled()) {
    constexpr size_t kSrc = 2;  // bf16
    s.q_src = s.q * kSrc;
    s.k_src = s.k * kSrc;
    s.v_src = s.v * kSrc;
    // Rows 0 (a head dim without an FP8 kernel): no blocks; validation refuses the head dim.
    const Fp8BlockRows rows = fp8_block_rows(w.hdim);
    const auto blocks = [](size_t seqlen, int r) { return r > 0 ? (seqlen + r - 1) / r : 0; };
    s.q_block_descale = b * h * blocks(sq, rows.q) * sizeof(float);
    s.kv_block_descale = b * hkv * blocks(sk, rows.kv) * sizeof(float);
  }
  return s;
}

Status Workspace::allocate(const Workload& w, Memory memory) {
  w_ = w;
  memory_ = memory;
  sizes_ = tensor_sizes(w);
  sets_.clear();
  if (Status st = o_.allocate(memory, sizes_.o); !st.ok()) return st;
  if (Status st = lse_.allocate(memory, sizes_.lse); !st.ok()) return st;
  if (w.sinks) {
    if (Status st = sinks_.allocate(memory, static_cast<size_t>(w.heads) * sizeof(float)); !st.ok())
      return st;
  }
  if (w.fp8() && !w.block_scaled()) {
    // 1.0 until fill_inputs quantises: can_implement reads host descales before the inputs exist.
    const std::vector<float> ones(static_cast<size_t>(w.batch) * w.kv_heads, 1.f);
    for (Block& d : descales_) {
      if (Status st = d.allocate(memory, ones.size() * sizeof(float)); !st.ok()) return st;
      if (Status st = upload_descales(d, ones); !st.ok()) return st;
    }
  }
  if (w.bwd) {
    for (auto [block, bytes] : {std::pair{&dq_, sizes_.q}, {&dk_, sizes_.k}, {&dv_, sizes_.v}}) {
      if (Status st = block->allocate(memory, bytes); !st.ok()) return st;
    }
    if (w.sinks) {
      if (Status st = dsinks_.allocate(memory, static_cast<size_t>(w.heads) * sizeof(float));
          !st.ok())
        return st;
    }
  }

  if (w.varlen) {
    const auto ints = static_cast<size_t>(w.batch + 1) * sizeof(int32_t);
    if (Status st = cu_q_.allocate(memory, ints); !st.ok()) return st;
    if (Status st = cu_k_.allocate(memory, ints); !st.ok()) return st;
  }
  if (w.page_size > 0) {
    const auto ints = static_cast<size_t>(w.batch) * blocks_per_sequence() * sizeof(int32_t);
    if (Status st = block_table_.allocate(memory, ints); !st.ok()) return st;
  }
  // Filled now: can_implement reads host index arrays (the cpu family) before the inputs are.
  if (Status st = fill_indices(); !st.ok()) return st;

  const size_t bwd_bytes = w.bwd ? 2 * sizes_.o + sizes_.lse : 0;  // dout, o, lse per set
  const size_t k8_bytes = sizes_.q_src + sizes_.k_src + sizes_.v_src + sizes_.q_block_descale +
                          2 * sizes_.kv_block_descale;  // 0 unless block_scaled
  const size_t set_bytes =
      std::max<size_t>(sizes_.q + sizes_.k + sizes_.v + bwd_bytes + k8_bytes, 1);
  size_t want = std::clamp<size_t>((kRotationBytes + set_bytes - 1) / set_bytes, 1, kMaxInputSets);
  if (memory == Memory::device) {
    // Leave half of what is free to the kernel's own workspace (K1 materialises S).
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      want = std::clamp<size_t>(free_bytes / 2 / set_bytes, 1, want);
    }
  }
  for (size_t i = 0; i < want; ++i) {
    InputSet s;
    Status st = s.q.allocate(memory, sizes_.q);
    if (st.ok()) st = s.k.allocate(memory, sizes_.k);
    if (st.ok()) st = s.v.allocate(memory, sizes_.v);
    if (st.ok() && w.bwd) st = s.dout.allocate(memory, sizes_.o);
    if (st.ok() && w.bwd) st = s.o.allocate(memory, sizes_.o);
    if (st.ok() && w.bwd) st = s.lse.allocate(memory, sizes_.lse);
    if (st.ok() && w.block_scaled()) st = allocate_k8(s);
    if (!st.ok()) {
      if (sets_.empty()) return st;
      break;  // fewer sets than planned still measure something; one set is the floor
    }
    sets_.push_back(std::move(s));
  }
  return Status::success();
}

namespace {

constexpr uint64_t kBlockOrderSeed = 0x5eedb10c;

// A splitmix64 step: unrelated generator streams per tensor.
uint64_t mix_seed(uint64_t seed, uint64_t tensor) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (tensor + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// K8: set s's bf16 source of tensor t (0 q, 1 k, 2 v).
Block* source(InputSet& s, int t) {
  return t == 0 ? &s.q_src : t == 1 ? &s.k_src : &s.v_src;
}

Status copy(Memory memory, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
            cudaStream_t stream) {
  if (bytes == 0) return Status::success();
  if (memory == Memory::host) {
    std::memcpy(dst, src, bytes);
    return Status::success();
  }
  return cuda_status(cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync");
}

}  // namespace

void Workspace::fill(void* data, int64_t n, DType dtype, InputDist dist, uint64_t seed) {
  if (dist == InputDist::outliers) {
    reference::fill_outliers(data, n, dtype, seed);
  } else {
    reference::fill_normal(data, n, dtype, seed);
  }
}

void Workspace::draw_original(int t, uint64_t seed) {
  const size_t elems = first_set_bytes(t) / static_cast<size_t>(dtype_size(w_.dtype));
  std::vector<uint16_t>& original = originals_[static_cast<size_t>(t)];
  original.resize(elems);
  fill(original.data(), static_cast<int64_t>(elems), DType::bf16, w_.dist, mix_seed(seed, t));
}

Status Workspace::fill_fp8(int t, uint64_t seed, void* out) {
  // Dense (batch, rows, heads, dim): rows are seqlen_q for q, the keys (padded to whole pages
  // when paged) for k and v. A query head shares its KV head's descale: q's heads quantise in
  // groups of heads / kv_heads.
  const bool is_q = t == 0;
  const int heads = is_q ? w_.heads : w_.kv_heads;
  const int dim = t == 2 ? w_.hdim_v : w_.hdim;
  draw_original(t, seed);
  const std::vector<uint16_t>& original = originals_[static_cast<size_t>(t)];
  const auto rows = static_cast<int64_t>(original.size()) / (int64_t{w_.batch} * heads * dim);
  std::vector<float> descales(static_cast<size_t>(w_.batch) * w_.kv_heads);
  reference::quantize_e4m3_per_head(DType::bf16, original.data(), w_.batch, rows, heads, dim,
                                    is_q ? w_.heads / w_.kv_heads : 1, static_cast<uint8_t*>(out),
                                    descales.data());
  return upload_descales(descales_[static_cast<size_t>(t)], descales);
}

Status Workspace::allocate_k8(InputSet& s) const {
  const std::pair<Block*, size_t> blocks[] = {{&s.q_src, sizes_.q_src},
                                              {&s.k_src, sizes_.k_src},
                                              {&s.v_src, sizes_.v_src},
                                              {&s.q_block_descale, sizes_.q_block_descale},
                                              {&s.k_block_descale, sizes_.kv_block_descale},
                                              {&s.v_block_descale, sizes_.kv_block_descale}};
  for (const auto& [block, bytes] : blocks) {
    if (Status st = block->allocate(memory_, bytes); !st.ok()) return st;
  }
  // 1.0 until the pre-pass writes them: can_implement reads host descales before any run.
  for (Block* d : {&s.q_block_descale, &s.k_block_descale, &s.v_block_descale}) {
    if (Status st = upload_descales(*d, std::vector<float>(d->bytes() / sizeof(float), 1.f));
        !st.ok()) {
      return st;
    }
  }
  return Status::success();
}

Status Workspace::fill_sources(uint64_t seed, cudaStream_t stream) {
  for (int t = 0; t < 3; ++t) {
    draw_original(t, seed);
    const std::vector<uint16_t>& original = originals_[static_cast<size_t>(t)];
    Block* first = source(sets_[0], t);
    if (memory_ == Memory::host) {
      std::memcpy(first->get(), original.data(), first->bytes());
    } else if (Status st = cuda_status(cudaMemcpy(first->get(), original.data(), first->bytes(),
                                                  cudaMemcpyHostToDevice),
                                       "cudaMemcpy(sources)");  // done before the copies below
               !st.ok()) {
      return st;
    }
    for (size_t i = 1; i < sets_.size(); ++i) {
      if (Status st = copy(memory_, source(sets_[i], t)->get(), first->get(), first->bytes(),
                           cudaMemcpyDeviceToDevice, stream);
          !st.ok()) {
        return st;
      }
    }
  }
  if (memory_ == Memory::device) {
    return cuda_status(cudaStreamSynchronize(stream), "fill: cudaStreamSynchronize");
  }
  return Status::success();
}

Status Workspace::upload_descales(Block& dst, const std::vector<float>& src) const {
  if (memory_ == Memory::host) {
    std::memcpy(dst.get(), src.data(), dst.bytes());
    return Status::success();
  }
  return cuda_status(cudaMemcpy(dst.get(), src.data(), dst.bytes(), cudaMemcpyHostToDevice),
                     "cudaMemcpy(descales)");
}

size_t Workspace::first_set_bytes(int t) const {
  const InputSet& s = sets_[0];
  return (t == 0 ? s.q : t == 1 ? s.k : s.v).bytes();
}

int Workspace::blocks_per_sequence() const {
  return w_.page_size > 0 ? std::max((w_.seqlen_k + w_.page_size - 1) / w_.page_size, 1) : 0;
}

Status Workspace::fill_indices() {
  const auto upload = [&](Block& dst, const std::vector<int32_t>& src) {
    if (memory_ == Memory::host) {
      std::memcpy(dst.get(), src.data(), dst.bytes());
      return Status::success();
    }
    return cuda_status(cudaMemcpy(dst.get(), src.data(), dst.bytes(), cudaMemcpyHostToDevice),
                       "cudaMemcpy(indices)");
  };
  if (w_.varlen) {
    std::vector<int32_t> cu_q(static_cast<size_t>(w_.batch) + 1), cu_k(cu_q.size());
    for (size_t b = 0; b < cu_q.size(); ++b) {
      cu_q[b] = static_cast<int32_t>(b) * w_.seqlen_q;
      cu_k[b] = static_cast<int32_t>(b) * w_.seqlen_k;
    }
    if (Status st = upload(cu_q_, cu_q); !st.ok()) return st;
    if (Status st = upload(cu_k_, cu_k); !st.ok()) return st;
  }
  if (w_.page_size > 0) {
    // Every block used once, in a shuffled order that is the same in every run (a fixed seed):
    // timings of separate runs then read the same layout.
    block_table_host_.resize(static_cast<size_t>(w_.batch) * blocks_per_sequence());
    for (size_t i = 0; i < block_table_host_.size(); ++i)
      block_table_host_[i] = static_cast<int32_t>(i);
    std::shuffle(block_table_host_.begin(), block_table_host_.end(),
                 std::mt19937_64(kBlockOrderSeed));
    if (Status st = upload(block_table_, block_table_host_); !st.ok()) return st;
  }
  return Status::success();
}

Status Workspace::fill_inputs(uint64_t seed, cudaStream_t stream) {
  if (w_.sinks) {  // one logit per query head in [-4, 4]: around the scores' own range
    std::vector<float> host(static_cast<size_t>(w_.heads));
    std::mt19937_64 gen(mix_seed(seed, 7));
    std::uniform_real_distribution<float> uniform(-4.f, 4.f);
    for (float& x : host) x = uniform(gen);
    if (memory_ == Memory::host) {
      std::memcpy(sinks_.get(), host.data(), sinks_.bytes());
    } else if (Status st = cuda_status(cudaMemcpy(sinks_.get(), host.data(), sinks_.bytes(),
                                                  cudaMemcpyHostToDevice),
                                       "cudaMemcpy(sinks)");
               !st.ok()) {
      return st;
    }
  }
  if (w_.block_scaled()) return fill_sources(seed, stream);
  const int64_t es = dtype_size(w_.dtype);
  Block* first[4] = {&sets_[0].q, &sets_[0].k, &sets_[0].v, &sets_[0].dout};
  const int tensors = w_.bwd ? 4 : 3;
  for (int t = 0; t < tensors; ++t) {
    Block& dst = *first[t];
    const auto n = static_cast<int64_t>(dst.bytes()) / es;
    std::vector<std::byte> staging(memory_ == Memory::host ? 0 : dst.bytes());
    void* out = memory_ == Memory::host ? dst.get() : staging.data();
    if (w_.fp8() && t < 3) {
      if (Status st = fill_fp8(t, seed, out); !st.ok()) return st;
    } else {
      fill(out, n, w_.dtype, t < 3 ? w_.dist : InputDist::normal, mix_seed(seed, t));
    }
    if (memory_ == Memory::host) continue;
    // Synchronous: `staging` dies at the end of this iteration.
    if (Status st =
            cuda_status(cudaMemcpy(dst.get(), staging.data(), dst.bytes(), cudaMemcpyHostToDevice),
                        "cudaMemcpy");
        !st.ok()) {
      return st;
    }
  }
  for (size_t i = 1; i < sets_.size(); ++i) {
    InputSet& s = sets_[i];
    const std::pair<Block*, Block*> pairs[4] = {
        {&s.q, &sets_[0].q}, {&s.k, &sets_[0].k}, {&s.v, &sets_[0].v}, {&s.dout, &sets_[0].dout}};
    for (const auto& [dst, src] : std::span(pairs).first(static_cast<size_t>(tensors))) {
      if (Status st =
              copy(memory_, dst->get(), src->get(), src->bytes(), cudaMemcpyDeviceToDevice, stream);
          !st.ok()) {
        return st;
      }
    }
  }
  if (memory_ == Memory::device) {
    return cuda_status(cudaStreamSynchronize(stream), "fill: cudaStreamSynchronize");
  }
  return Status::success();
}

Status Workspace::prepare_backward(cudaStream_t stream, const DebugOptions& debug) {
  ForwardParams p = params(0, stream, debug);
  p.o.data = sets_[0].o.get();
  p.lse = static_cast<float*>(sets_[0].lse.get());
  if (Status st = forward(p, Kernel::automatic); !st.ok()) return st;
  for (size_t i = 1; i < sets_.size(); ++i) {
    for (auto [dst, src] : {std::pair{&sets_[i].o, &sets_[0].o}, {&sets_[i].lse, &sets_[0].lse}}) {
      if (Status st =
              copy(memory_, dst->get(), src->get(), src->bytes(), cudaMemcpyDeviceToDevice, stream);
          !st.ok()) {
        return st;
      }
    }
  }
  if (memory_ == Memory::device) {
    return cuda_status(cudaStreamSynchronize(stream), "forward for the backward");
  }
  return Status::success();
}

Status Workspace::poison_outputs(cudaStream_t stream) {
  std::vector<Block*> outputs{&o_, &lse_};
  if (w_.bwd) outputs = {&dq_, &dk_, &dv_, &dsinks_};
  if (w_.block_scaled()) {  // the pre-pass's outputs: an element it skips reaches o as NaN
    InputSet& s = sets_[0];
    outputs.insert(outputs.end(),
                   {&s.q, &s.k, &s.v, &s.q_block_descale, &s.k_block_descale, &s.v_block_descale});
  }
  for (Block* b : outputs) {
    if (b->get() == nullptr) continue;
    if (memory_ == Memory::host) {
      std::memset(b->get(), 0xFF, b->bytes());
    } else if (Status st = cuda_status(cudaMemsetAsync(b->get(), 0xFF, b->bytes(), stream),
                                       "cudaMemsetAsync");
               !st.ok()) {
      return st;
    }
  }
  return Status::success();
}

ForwardParams Workspace::params(int set, cudaStream_t stream, const DebugOptions& debug) const {
  const InputSet& s = sets_[static_cast<size_t>(set)];
  ForwardParams p;
  p.dtype = w_.dtype;
  p.out_dtype = w_.out_dtype();
  if (w_.block_scaled()) {
    p.q_block_descale = static_cast<const float*>(s.q_block_descale.get());
    p.k_block_descale = static_cast<const float*>(s.k_block_descale.get());
    p.v_block_descale = static_cast<const float*>(s.v_block_descale.get());
  } else if (w_.fp8()) {
    p.q_descale = static_cast<const float*>(descales_[0].get());
    p.k_descale = static_cast<const float*>(descales_[1].get());
    p.v_descale = static_cast<const float*>(descales_[2].get());
  }
  p.batch = w_.batch;
  p.seqlen_q = w_.seqlen_q;
  p.seqlen_k = w_.seqlen_k;
  p.heads_q = w_.heads;
  p.heads_kv = w_.kv_heads;
  p.head_dim = w_.hdim;
  p.head_dim_v = w_.hdim_v;
  p.q.data = s.q.get();
  p.k.data = s.k.get();
  p.v.data = s.v.get();
  p.o.data = o_.get();
  p.lse = static_cast<float*>(lse_.get());
  p.sinks = w_.sinks ? static_cast<const float*>(sinks_.get()) : nullptr;
  p.softcap = w_.softcap;
  set_contiguous_strides(p.q.stride, w_.seqlen_q, w_.heads, w_.hdim);
  set_contiguous_strides(p.k.stride, w_.seqlen_k, w_.kv_heads, w_.hdim);
  set_contiguous_strides(p.v.stride, w_.seqlen_k, w_.kv_heads, w_.hdim_v);
  set_contiguous_strides(p.o.stride, w_.seqlen_q, w_.heads, w_.hdim_v);
  p.causal = w_.causal;
  p.window_left = w_.window_left;
  p.window_right = w_.window_right;
  p.stream = stream;
  p.debug = debug;
  if (w_.varlen) {  // the dense buffers read as packed (total, heads, dim); LSE (heads, total)
    p.cu_seqlens_q = static_cast<const int32_t*>(cu_q_.get());
    p.cu_seqlens_k = static_cast<const int32_t*>(cu_k_.get());
    p.total_q = w_.batch * w_.seqlen_q;
    p.total_k = w_.batch * w_.seqlen_k;
  }
  if (w_.page_size > 0) {
    p.block_table = static_cast<const int32_t*>(block_table_.get());
    p.max_blocks_per_seq = blocks_per_sequence();
    p.num_blocks = w_.batch * blocks_per_sequence();
    p.page_size = w_.page_size;
    set_contiguous_strides(p.k.stride, w_.page_size, w_.kv_heads, w_.hdim);
    set_contiguous_strides(p.v.stride, w_.page_size, w_.kv_heads, w_.hdim_v);
  }
  return p;
}

QuantizedForward Workspace::quantized_params(int set, cudaStream_t stream,
                                             const DebugOptions& debug) const {
  const InputSet& s = sets_[static_cast<size_t>(set)];
  QuantizedForward call;
  call.forward = params(set, stream, debug);
  QuantizeFp8Params& q = call.quantize;
  q.dtype = DType::bf16;
  q.batch = w_.batch;
  q.seqlen_q = w_.seqlen_q;
  q.seqlen_k = w_.seqlen_k;
  q.heads_q = w_.heads;
  q.heads_kv = w_.kv_heads;
  q.head_dim = w_.hdim;
  q.head_dim_v = w_.hdim_v;
  q.q.data = s.q_src.get();
  q.k.data = s.k_src.get();
  q.v.data = s.v_src.get();
  q.q_out.data = s.q.get();
  q.k_out.data = s.k.get();
  q.v_out.data = s.v.get();
  // Dense, as the forward reads the outputs.
  std::copy(std::begin(call.forward.q.stride), std::end(call.forward.q.stride), q.q.stride);
  std::copy(std::begin(call.forward.k.stride), std::end(call.forward.k.stride), q.k.stride);
  std::copy(std::begin(call.forward.v.stride), std::end(call.forward.v.stride), q.v.stride);
  std::copy(std::begin(q.q.stride), std::end(q.q.stride), q.q_out.stride);
  std::copy(std::begin(q.k.stride), std::end(q.k.stride), q.k_out.stride);
  std::copy(std::begin(q.v.stride), std::end(q.v.stride), q.v_out.stride);
  q.q_block_descale = static_cast<float*>(s.q_block_descale.get());
  q.k_block_descale = static_cast<float*>(s.k_block_descale.get());
  q.v_block_descale = static_cast<float*>(s.v_block_descale.get());
  if (w_.fp8_scaling == Fp8Scaling::per_block_hadamard) {
    q.rotation = Fp8Rotation::hadamard;
    q.seed = kRotationSeed;
  }
  q.stream = stream;
  return call;
}

BackwardParams Workspace::backward_params(int set, cudaStream_t stream,
                                          const DebugOptions& debug) const {
  const InputSet& s = sets_[static_cast<size_t>(set)];
  BackwardParams p;
  p.dtype = w_.dtype;
  p.batch = w_.batch;
  p.seqlen_q = w_.seqlen_q;
  p.seqlen_k = w_.seqlen_k;
  p.heads_q = w_.heads;
  p.heads_kv = w_.kv_heads;
  p.head_dim = w_.hdim;
  p.head_dim_v = w_.hdim_v;
  p.q.data = s.q.get();
  p.k.data = s.k.get();
  p.v.data = s.v.get();
  p.o.data = s.o.get();
  p.dout.data = s.dout.get();
  p.lse = static_cast<const float*>(s.lse.get());
  p.dq.data = dq_.get();
  p.dk.data = dk_.get();
  p.dv.data = dv_.get();
  p.sinks = w_.sinks ? static_cast<const float*>(sinks_.get()) : nullptr;
  p.dsinks = w_.sinks ? static_cast<float*>(dsinks_.get()) : nullptr;
  p.softcap = w_.softcap;
  set_contiguous_layout(p);
  p.causal = w_.causal;
  p.window_left = w_.window_left;
  p.window_right = w_.window_right;
  p.deterministic = w_.deterministic;
  p.stream = stream;
  p.debug = debug;
  return p;
}

}  // namespace flashattn::bench
