#include "devices/cpu/fused.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_map>

#include <unistd.h>

#include "core/env.hpp"
#include "core/error.hpp"
#include "devices/cpu/ew_kernels.hpp"
#include "devices/cpu/isa.hpp"
#include "devices/cpu/thread_pool.hpp"
#include "ir/op_registry.hpp"

namespace rlx::cpu {

namespace {

enum class InMode { Direct, Convert, Strided, Scalar };

struct InputPlan {
  InMode mode = InMode::Direct;
  DType dtype = DType::F32;
  CK ck = CK::F32;
  const char* base = nullptr;
  std::vector<int64_t> shape, strides;  // collapsed view over the region (Strided)
  int buf = -1;                         // scratch buffer (Convert, Strided; Scalar when broadcast)
  alignas(8) unsigned char scalar[8] = {};
};

// x * mul + add: at most one product (m) then one sum (a), each rounded. The constants are
// held in double: an f32 step's came from f32 scalars, so they convert back exactly.
struct Transform {
  bool m = false, a = false;
  AffineD f;  // identity where absent (mul 1, add -0)
  bool any() const { return m || a; }
  Affine f32() const { return Affine{float(f.mul), float(f.add)}; }
};

struct Step {
  EwOp op = EwOp::Add;
  CK in_ck = CK::F32;  // the first operand's kind (where: the value operands')
  DType out_dtype = DType::F32;
  CK out_ck = CK::F32;
  DType cast_to = DType::F32;
  int args[3] = {-1, -1, -1};
  bool bcast[3] = {false, false, false};  // a scalar input read from its broadcast buffer
  int nargs = 0;
  int form = 0;  // binary: 0 arrays, 1 b scalar, 2 a scalar
  int buf = -1;         // scratch buffer, or -1: written straight into out[direct_out]
  int direct_out = -1;
  bool narrow = false;  // f16/bf16 result: round the f32 values to the type
  std::vector<int> stores;  // outputs converted from the scratch buffer after the step
  bool deleted = false;     // folded into a later step
  Transform pre, post;      // folded scalar steps, see fold_scalar_steps
  int dot_sum = -1;         // a product only summed: its fused sum's index, the product never stored
  int bg_weight = 0;        // share of the chunk's background memory work (0: none)
};

struct Plan {
  int64_t numel = 0;
  std::vector<InputPlan> inputs;
  std::vector<Step> steps;
  std::vector<std::pair<int, int>> input_outputs;  // (output, input): outputs that are region inputs
  int nbuf = 0;
  int bg_total = 0;     // sum of the steps' bg_weight: 0 when no kernel takes background work
  bool stream = false;  // outputs written with non-temporal stores
  bool defer = false;   // ... from pending buffers, in the background of the next chunk
  std::vector<char*> out_base;
  std::vector<DType> out_dtype;
  std::vector<int> sum_value;  // per fused sum: the value (step) it reduces
  double* partial = nullptr;   // [chunk][sum] partial sums
};


// Per-thread scratch, kept across calls.
struct Scratch {
  char* p = nullptr;
  size_t bytes = 0;
  ~Scratch() { std::free(p); }
  char* get(size_t n) {
    if (n > bytes) {
      std::free(p);
      p = static_cast<char*>(std::aligned_alloc(64, (n + 63) / 64 * 64));
      if (!p) throw Error("cpu device: scratch allocation failed");
      bytes = n;
    }
    return p;
  }
};
thread_local Scratch t_scratch;

constexpr size_t kBufBytes = size_t(kChunk) * 8;

// Strides of t seen over `shape` (NumPy alignment: 0 on broadcast dims), collapsed.
void broadcast_view(const Tensor& t, const Shape& shape, std::vector<int64_t>& cs, std::vector<int64_t>& cst) {
  int r = int(shape.size()), tr = t.rank();
  std::vector<int64_t> st(size_t(r), 0);
  for (int d = 0; d < r; ++d) {
    int td = d - (r - tr);
    if (td >= 0 && t.shape()[size_t(td)] != 1) st[size_t(d)] = t.strides()[size_t(td)];
  }
  cs.clear();
  cst.clear();
  for (int d = 0; d < r; ++d) {
    if (shape[size_t(d)] == 1) continue;
    if (!cs.empty() && cst.back() == st[size_t(d)] * shape[size_t(d)]) {
      cs.back() *= shape[size_t(d)];
      cst.back() = st[size_t(d)];
    } else {
      cs.push_back(shape[size_t(d)]);
      cst.push_back(st[size_t(d)]);
    }
  }
}

// The bytes a (possibly strided) tensor touches.
std::pair<const char*, const char*> byte_range(const Tensor& t) {
  const char* p = static_cast<const char*>(t.raw());
  int64_t lo = 0, hi = 0;
  for (int d = 0; d < t.rank(); ++d) {
    if (t.shape()[size_t(d)] == 0) return {p, p};
    int64_t span = (t.shape()[size_t(d)] - 1) * t.strides()[size_t(d)];
    (span < 0 ? lo : hi) += span;
  }
  int64_t es = int64_t(dtype_size(t.dtype()));
  return {p + lo * es, p + (hi + 1) * es};
}

bool overlaps(std::pair<const char*, const char*> a, std::pair<const char*, const char*> b) {
  return a.first < b.second && b.first < a.second;
}

EwOp op_of(const ir::Node& n) {
  // Looked up on every launch of every region: remember each op's answer (per thread, so
  // no lock) instead of comparing its name against the kernel table each time.
  thread_local std::unordered_map<const ir::OpDef*, std::optional<EwOp>> known;
  auto it = known.find(n.op);
  if (it == known.end()) it = known.emplace(n.op, ew_op_from_name(n.op->name)).first;
  if (!it->second) throw InternalError("cpu fused executor: " + n.op->name + " is not an elementwise op");
  return *it->second;
}

void exec_chunks(const Plan& P, int64_t c0, int64_t c1) {
  const size_t nin = P.inputs.size(), nout = P.out_base.size();
  // Deferred streaming: streamed outputs are computed into one of two pending buffers
  // and copied out (non-temporal) in the background of the next chunk's kernels.
  const bool defer = P.defer;
  char* scratch = t_scratch.get((size_t(P.nbuf) + (defer ? 2 * nout : 0)) * kBufBytes);
  auto buf = [&](int b) { return scratch + size_t(b) * kBufBytes; };
  auto pending = [&](size_t o, int64_t c) { return buf(P.nbuf + int(2 * o + size_t(c & 1))); };
  // Scalars some kernel needs as arrays: broadcast once per call.
  for (const auto& ip : P.inputs)
    if (ip.mode == InMode::Scalar && ip.buf >= 0) fill_ck(ip.ck, ip.scalar, buf(ip.buf), kChunk);

  std::vector<const void*> ptr(nin + P.steps.size());
  Background prev_copies;  // the previous chunk's deferred outputs

  for (int64_t c = c0; c < c1; ++c) {
    const int64_t start = c * kChunk, n = std::min<int64_t>(kChunk, P.numel - start);
    // The next chunk of each contiguous input is prefetched while this one computes:
    // inside the f32 kernels' loops when the region has such kernels (the loads then
    // overlap their arithmetic), else in slices between the steps.
    const bool prefetch = c + 1 < c1;
    const int64_t pf_start = start + kChunk, pf_n = prefetch ? std::min<int64_t>(kChunk, P.numel - pf_start) : 0;
    Background bg = prev_copies;
    prev_copies = Background{};
    if (prefetch)
      for (const auto& ip : P.inputs)
        if ((ip.mode == InMode::Direct || ip.mode == InMode::Convert) && bg.nprefetch < 6) {
          const int64_t es = int64_t(dtype_size(ip.dtype));
          bg.prefetch[bg.nprefetch] = ip.base + pf_start * es;
          bg.prefetch_bytes[bg.nprefetch++] = pf_n * es;
        }
    const bool in_kernel = P.bg_total > 0;
    const size_t nslices = P.steps.size() + 1;
    auto prefetch_slice = [&](size_t k) {
      if (in_kernel) return;
      for (int r = 0; r < bg.nprefetch; ++r) {
        const int64_t b0 = bg.prefetch_bytes[r] * int64_t(k) / int64_t(nslices) & ~int64_t(63);
        const int64_t b1 = bg.prefetch_bytes[r] * int64_t(k + 1) / int64_t(nslices);
        for (int64_t off = b0; off < b1; off += 64) __builtin_prefetch(bg.prefetch[r] + off, 0, 3);
      }
    };
    prefetch_slice(0);
    int64_t bg_done = 0;
    for (size_t i = 0; i < nin; ++i) {
      const InputPlan& ip = P.inputs[i];
      switch (ip.mode) {
        case InMode::Direct: ptr[i] = ip.base + start * int64_t(ck_size(ip.ck)); break;
        case InMode::Convert:
          load_convert(ip.dtype, ip.base + start * int64_t(dtype_size(ip.dtype)), buf(ip.buf), n);
          ptr[i] = buf(ip.buf);
          break;
        case InMode::Strided:
          load_strided(ip.dtype, ip.base, ip.shape.data(), ip.strides.data(), int(ip.shape.size()), start, n,
                       buf(ip.buf));
          ptr[i] = buf(ip.buf);
          break;
        case InMode::Scalar: ptr[i] = ip.scalar; break;
      }
    }
    for (size_t s = 0; s < P.steps.size(); ++s) {
      const Step& st = P.steps[s];
      prefetch_slice(s + 1);
      if (st.deleted) continue;
      if (st.dot_sum >= 0) {
        P.partial[size_t(c) * P.sum_value.size() + size_t(st.dot_sum)] = ew_dot(st.out_ck, ptr[size_t(st.args[0])],
                                                                                ptr[size_t(st.args[1])], n);
        continue;
      }
      void* dst = st.buf >= 0            ? static_cast<void*>(buf(st.buf))
                  : st.direct_out >= 0 && defer ? static_cast<void*>(pending(size_t(st.direct_out), c))
                                         : static_cast<void*>(P.out_base[size_t(st.direct_out)] +
                                                              start * int64_t(ck_size(st.out_ck)));
      auto arg = [&](int k) -> const void* {
        int v = st.args[k];
        return st.bcast[k] ? buf(P.inputs[size_t(v)].buf) : ptr[size_t(v)];
      };
      if (st.out_ck == CK::F64 && (st.pre.any() || st.post.any())) {
        ew_binary_f64_affine(st.op, st.form, static_cast<const double*>(arg(0)), static_cast<const double*>(arg(1)),
                             static_cast<double*>(dst), n, st.pre.any() ? &st.pre.f : nullptr,
                             st.post.any() ? &st.post.f : nullptr);
      } else if (st.pre.any() || st.post.any() || st.bg_weight > 0) {
        const Affine pre_f = st.pre.f32(), post_f = st.post.f32();
        const Affine* pre = st.pre.any() ? &pre_f : nullptr;
        const Affine* post = st.post.any() ? &post_f : nullptr;
        // This step's share of the background work, by weight.
        Background part;
        if (st.bg_weight > 0) {
          const int64_t w0 = bg_done, w1 = bg_done + st.bg_weight, W = P.bg_total;
          auto cut = [&](int64_t bytes, int64_t w) { return w == W ? bytes : (bytes * w / W) & ~int64_t(63); };
          for (int r = 0; r < bg.nprefetch; ++r) {
            int64_t lo = cut(bg.prefetch_bytes[r], w0), hi = cut(bg.prefetch_bytes[r], w1);
            part.prefetch[part.nprefetch] = bg.prefetch[r] + lo;
            part.prefetch_bytes[part.nprefetch++] = hi - lo;
          }
          for (int r = 0; r < bg.ncopy; ++r) {
            int64_t lo = cut(bg.copy_bytes[r], w0), hi = cut(bg.copy_bytes[r], w1);
            part.copy_dst[part.ncopy] = bg.copy_dst[r] + lo;
            part.copy_src[part.ncopy] = bg.copy_src[r] + lo;
            part.copy_bytes[part.ncopy++] = hi - lo;
          }
          bg_done = w1;
        }
        const Background* pb = st.bg_weight > 0 ? &part : nullptr;
        if (st.nargs == 1)
          ew_unary_f32_affine(st.op, static_cast<const float*>(arg(0)), static_cast<float*>(dst), n, pre, post, pb);
        else
          ew_binary_f32_affine(st.op, st.form, static_cast<const float*>(arg(0)), static_cast<const float*>(arg(1)),
                               static_cast<float*>(dst), n, pre, post, pb);
      } else switch (st.nargs) {
        case 1:
          if (st.op == EwOp::Cast) ew_cast(st.in_ck, st.cast_to, arg(0), dst, n);
          else ew_unary(st.op, st.in_ck, arg(0), dst, n);
          break;
        case 2: ew_binary(st.op, st.in_ck, st.form, arg(0), arg(1), dst, n); break;
        case 3: ew_where(st.in_ck, static_cast<const uint8_t*>(arg(0)), arg(1), arg(2), dst, n); break;
      }
      // f16/bf16 results are rounded as if stored, so fusion never changes a result.
      if (st.narrow) round_to_storage(st.out_dtype, static_cast<float*>(dst), n);
      ptr[nin + s] = dst;
      for (size_t k = 0; k < P.sum_value.size(); ++k)
        if (P.sum_value[k] == int(nin + s)) P.partial[size_t(c) * P.sum_value.size() + k] = ew_sum(st.out_ck, dst, n);
      if (st.direct_out >= 0 && defer) {
        const size_t o = size_t(st.direct_out);
        const int64_t es = int64_t(dtype_size(P.out_dtype[o]));
        int r = prev_copies.ncopy++;
        prev_copies.copy_dst[r] = P.out_base[o] + start * es;
        prev_copies.copy_src[r] = static_cast<const char*>(dst);
        prev_copies.copy_bytes[r] = n * es;
      }
      for (int o : st.stores) {
        const DType od = P.out_dtype[size_t(o)];
        char* d = P.out_base[size_t(o)] + start * int64_t(dtype_size(od));
        if (P.stream && od != DType::F16 && od != DType::BF16)
          stream_store(d, dst, size_t(n) * dtype_size(od));
        else
          store_convert(od, dst, d, n);
      }
    }
    for (auto [o, i] : P.input_outputs) {
      const InputPlan& ip = P.inputs[size_t(i)];
      char* d = P.out_base[size_t(o)] + start * int64_t(dtype_size(P.out_dtype[size_t(o)]));
      if (ip.mode == InMode::Scalar) {
        char tmp[kBufBytes];
        fill_ck(ip.ck, ip.scalar, tmp, n);
        store_convert(P.out_dtype[size_t(o)], tmp, d, n);
      } else {
        store_convert(P.out_dtype[size_t(o)], ptr[size_t(i)], d, n);
      }
    }
  }
  for (int r = 0; r < prev_copies.ncopy; ++r)  // the last chunk's deferred outputs
    stream_store(prev_copies.copy_dst[r], prev_copies.copy_src[r], size_t(prev_copies.copy_bytes[r]));
  if (P.stream) stream_fence();
}

// Bytes of last-level cache; regions that move more than a quarter of it stream their
// outputs (the cache is shared: on this class of machine streaming already pays at
// 128 MiB moved against a 480 MiB L3).
int64_t llc_bytes() {
  static const int64_t b = [] {
    long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (v <= 0) v = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return int64_t(v > 0 ? v : 32 << 20);
  }();
  return b;
}

// RLX_CPU_FOLD=0 turns folding of scalar steps off (for measurements).
bool fold_enabled() {
  return env_choice("RLX_CPU_FOLD", {"1", "0"}) == 0;  // (read per call: tests switch it)
}

// RLX_CPU_STREAM=0 or 1 forces streaming stores off or on; unset: by size.
int stream_override() {
  return env_choice("RLX_CPU_STREAM", {"auto", "0", "1"}) - 1;  // (read per call: tests switch it)
}


// Folds mul/add/sub steps with one scalar operand into a neighbouring step of the same
// type (f32: unary and binary steps; f64: binary ones, the Krylov solvers' axpy forms):
// into the step that produces their operand (a post transform), or into the step that
// consumes their result (a pre transform), when that value has no other use. A transform
// is at most one product followed by one sum, each rounded as the node it replaces, so
// results do not change; passes over the chunk do (gelu(x*a+b): 7 passes become 3).
void fold_scalar_steps(Plan& P, int nin, const std::vector<bool>& is_output) {
  const int total = nin + int(P.steps.size());
  std::vector<int> uses(size_t(total), 0);
  for (const Step& st : P.steps)
    for (int k = 0; k < st.nargs; ++k) uses[size_t(st.args[k])]++;
  auto dtype_of = [&](int v) { return v < nin ? P.inputs[size_t(v)].dtype : P.steps[size_t(v - nin)].out_dtype; };
  auto scalar_value = [&](int v) -> double {
    const InputPlan& ip = P.inputs[size_t(v)];
    if (ip.ck == CK::F64) {
      double d;
      std::memcpy(&d, ip.scalar, 8);
      return d;
    }
    float f;
    std::memcpy(&f, ip.scalar, 4);
    return f;
  };
  // Steps whose kernel can carry transforms: f32 unary and binary, f64 binary.
  auto foldable = [&](const Step& st) {
    if (st.deleted || st.nargs > 2) return false;
    const DType t = st.out_dtype;
    if (t == DType::F32 ? !ew_affine_ok(st.op) : t != DType::F64 || st.nargs != 2 || !ew_affine_ok_f64(st.op))
      return false;
    for (int k = 0; k < st.nargs; ++k)
      if (st.bcast[k] || dtype_of(st.args[k]) != t) return false;
    return true;
  };
  // A step computing op(v, scalar) (with, possibly, a folded sum after a product):
  // its operand v and transform.
  auto affine_of = [&](const Step& st, int& src, Transform& t) {
    if (!foldable(st) || st.nargs != 2 || st.form == 0 || st.pre.any()) return false;
    if (st.op != EwOp::Mul && st.op != EwOp::Add && st.op != EwOp::Sub) return false;
    const bool scalar_b = st.form == 1;
    src = st.args[scalar_b ? 0 : 1];
    const double c = scalar_value(st.args[scalar_b ? 1 : 0]);
    t = Transform{};
    if (st.op == EwOp::Mul) {
      t.m = true;
      t.f.mul = c;
    } else if (st.op == EwOp::Add) {  // c + v == v + c
      t.a = true;
      t.f.add = c;
    } else if (scalar_b) {  // v - c == v + (-c)
      t.a = true;
      t.f.add = -c;
    } else {  // c - v == (-v) + c
      t.m = t.a = true;
      t.f.mul = -1.0;
      t.f.add = c;
    }
    if (st.post.any()) {  // then the folded transform: only a product then a sum composes
      if (t.a || st.post.m) return false;
      t.a = true;
      t.f.add = st.post.f.add;
    }
    return true;
  };
  auto single_use = [&](int v) { return v >= nin && uses[size_t(v)] == 1 && !is_output[size_t(v)]; };

  for (size_t s = 0; s < P.steps.size(); ++s) {
    Step& st = P.steps[s];
    if (st.deleted) continue;
    int src;
    Transform t;
    // Post: the producer of this step's operand moves here and applies this step after.
    if (affine_of(st, src, t) && single_use(src)) {
      Step& p = P.steps[size_t(src - nin)];
      const bool composes = !p.post.any() || (!p.post.a && !t.m);
      if (foldable(p) && composes) {
        Step moved = p;
        p.deleted = true;
        if (t.m) {
          moved.post.m = true;
          moved.post.f.mul = t.f.mul;
        }
        if (t.a) {
          moved.post.a = true;
          moved.post.f.add = t.f.add;
        }
        st = moved;
        continue;
      }
    }
    // Pre: a transform step feeding operand 0 (or operand 1 of add/mul, swapped) is
    // applied on the way in; so is a product feeding operand 1 of sub, as u + v * (-c):
    // u - v * c rounds the same (negation is exact, and -(v * c) == v * (-c) to the sign
    // of a zero), the Krylov solvers' r - alpha q.
    if (!foldable(st) || st.pre.any()) continue;
    for (int k = 0; k < st.nargs; ++k) {
      const int v = st.args[k];
      if (!single_use(v)) continue;
      const bool sub = st.op == EwOp::Sub;
      if (k == 1 && ((st.op != EwOp::Add && st.op != EwOp::Mul && !sub) || st.form == 1)) continue;
      Step& a = P.steps[size_t(v - nin)];
      if (!affine_of(a, src, t)) continue;
      if (k == 1 && sub) {
        // Only a product (-(v * c + d) may differ in a zero's sign) by a number (u - v * NaN
        // gives NaN's sign flipped when folded).
        if (!t.m || t.a || std::isnan(t.f.mul)) continue;
        t.f.mul = -t.f.mul;
        st.op = EwOp::Add;
      }
      if (k == 1) {  // commutative: the transformed operand goes first
        std::swap(st.args[0], st.args[1]);
        if (st.form == 2) st.form = 1;
      }
      st.args[0] = src;
      st.pre = t;
      a.deleted = true;
      break;
    }
  }
}

}  // namespace

bool elementwise_supported(const ir::Node& n, const std::vector<DType>& in) {
  auto op = ew_op_from_name(n.op->name);
  if (!op || in.empty()) return false;
  if (*op == EwOp::Where) {
    if (in.size() != 3 || in[0] != DType::Bool) return false;
    return ew_supported(*op, in[1]);
  }
  if (*op == EwOp::Cast) return ew_supported(*op, in[0]) && n.attrs.get_dtype("dtype") != DType::I4;
  return ew_supported(*op, in[0]);
}

void run_elementwise(const std::vector<const ir::Node*>& nodes, const std::vector<ir::Value>& inputs,
                     const std::vector<ir::Value>& outputs, const Shape& shape, std::span<const Tensor> in,
                     std::span<Tensor> out, const std::vector<FusedSum>& sums) {
  if (in.size() != inputs.size() || out.size() != outputs.size())
    throw InternalError("cpu fused executor: tensor counts differ from the region's");
  auto store_sum = [](const Tensor& t, double v) {
    if (t.dtype() == DType::F64) *t.data<double>() = v;
    else *t.data<float>() = float(v);
  };
  Plan P;
  P.numel = numel(shape);
  if (P.numel == 0) {
    for (const auto& fs : sums) store_sum(fs.out, 0.0);
    return;
  }
  const int nin = int(inputs.size());

  // An input may share memory with an output (the planner writes elementwise results
  // in place over dying inputs). When it is the same elements, reading each chunk into
  // scratch before the chunk's first write is enough; any other overlap gets a copy.
  std::vector<Tensor> held(in.begin(), in.end());
  std::vector<bool> chunk_copy(held.size(), false);
  for (size_t i = 0; i < held.size(); ++i) {
    Tensor& t = held[i];
    if (!t.is_host()) throw InternalError("cpu fused executor: input not in host memory");
    for (const Tensor& o : out) {
      if (!overlaps(byte_range(t), byte_range(o))) continue;
      if (t.raw() == o.raw() && t.is_contiguous() && t.numel() == P.numel && dtype_size(t.dtype()) == dtype_size(o.dtype())) {
        chunk_copy[i] = true;
        continue;
      }
      t = t.to(host_allocator());
      chunk_copy[i] = false;
      break;
    }
  }
  for (const Tensor& o : out) {
    if (!o.is_contiguous() || o.numel() != P.numel)
      throw InternalError("cpu fused executor: outputs must be contiguous and region-shaped");
    P.out_base.push_back(static_cast<char*>(o.raw()));
    P.out_dtype.push_back(o.dtype());
  }

  int nbuf = 0;
  P.inputs.resize(size_t(nin));
  for (int i = 0; i < nin; ++i) {
    const Tensor& t = held[size_t(i)];
    InputPlan& ip = P.inputs[size_t(i)];
    ip.dtype = t.dtype();
    ip.ck = ck_of(t.dtype());
    ip.base = static_cast<const char*>(t.raw());
    if (t.dtype() == DType::I4) throw InternalError("cpu fused executor: i4 operand");
    if (t.numel() == 1 && P.numel > 1) {
      ip.mode = InMode::Scalar;
      load_convert(t.dtype(), t.raw(), ip.scalar, 1);
    } else if (t.numel() == P.numel && t.is_contiguous()) {
      ip.mode = (t.dtype() == DType::F16 || t.dtype() == DType::BF16 || chunk_copy[size_t(i)]) ? InMode::Convert
                                                                                               : InMode::Direct;
    } else {
      ip.mode = InMode::Strided;
      broadcast_view(t, shape, ip.shape, ip.strides);
    }
    if (ip.mode == InMode::Convert || ip.mode == InMode::Strided) ip.buf = nbuf++;
  }

  // Values: inputs [0, nin), then steps.
  // (a region holds a handful of nodes: a scan costs less than building a map per launch)
  auto value_id = [&](ir::Value v) -> int {
    if (v.index == 0)
      for (size_t s = 0; s < nodes.size(); ++s)
        if (nodes[s]->id == v.node) return nin + int(s);
    for (int i = 0; i < nin; ++i)
      if (inputs[size_t(i)] == v) return i;
    throw InternalError("cpu fused executor: operand %" + std::to_string(v.node) + " is neither a region input nor an earlier region node");
  };
  auto ck_of_value = [&](int v) { return v < nin ? P.inputs[size_t(v)].ck : P.steps[size_t(v - nin)].out_ck; };

  P.steps.resize(nodes.size());
  std::vector<int> last_use(size_t(nin) + nodes.size(), -1);
  for (size_t s = 0; s < nodes.size(); ++s) {
    const ir::Node& n = *nodes[s];
    Step& st = P.steps[s];
    st.op = op_of(n);
    st.nargs = int(n.inputs.size());
    if (st.nargs != ew_arity(st.op) || st.nargs > 3)
      throw InternalError("cpu fused executor: " + n.op->name + " has " + std::to_string(st.nargs) + " operands");
    for (int k = 0; k < st.nargs; ++k) {
      int v = value_id(n.inputs[size_t(k)]);
      if (v >= nin + int(s)) throw InternalError("cpu fused executor: nodes out of order");
      st.args[k] = v;
      last_use[size_t(v)] = int(s);
    }
    st.in_ck = ck_of_value(st.args[st.op == EwOp::Where ? 1 : 0]);
    st.out_dtype = n.out().dtype;
    st.out_ck = ck_of(st.out_dtype);
    st.narrow = st.out_dtype == DType::F16 || st.out_dtype == DType::BF16;
    if (st.op == EwOp::Cast) st.cast_to = n.attrs.get_dtype("dtype");
    if (n.out().shape != shape && numel(n.out().shape) != P.numel)
      throw InternalError("cpu fused executor: node %" + std::to_string(n.id) + " is not region-shaped");
    // Scalar inputs: binary kernels take one scalar operand as is; elsewhere a scalar is
    // read from a buffer filled once per thread.
    auto is_scalar = [&](int v) { return v < nin && P.inputs[size_t(v)].mode == InMode::Scalar; };
    for (int k = 0; k < st.nargs; ++k) {
      if (!is_scalar(st.args[k])) continue;
      bool as_array = st.nargs != 2 || (k == 0 && is_scalar(st.args[1]));
      if (!as_array) {
        st.form = k == 1 ? 1 : 2;
        continue;
      }
      st.bcast[k] = true;
      InputPlan& ip = P.inputs[size_t(st.args[k])];
      if (ip.buf < 0) ip.buf = nbuf++;
    }
  }
  {
    std::vector<bool> is_output(size_t(nin) + P.steps.size(), false);
    for (const auto& v : outputs) is_output[size_t(value_id(v))] = true;
    for (const auto& fs : sums) {  // a reduced value must exist in full: never folded away
      int v = value_id(fs.operand);
      if (v < nin) throw InternalError("cpu fused executor: a fused sum reads a region input");
      if (ck_of_value(v) != CK::F32 && ck_of_value(v) != CK::F64)
        throw InternalError("cpu fused executor: fused sums take f32 or f64 values");
      is_output[size_t(v)] = true;
      P.sum_value.push_back(v);
    }
    if (fold_enabled()) fold_scalar_steps(P, nin, is_output);
    std::fill(last_use.begin(), last_use.end(), -1);
    for (size_t s = 0; s < P.steps.size(); ++s)
      if (!P.steps[s].deleted)
        for (int k = 0; k < P.steps[s].nargs; ++k) last_use[size_t(P.steps[s].args[k])] = int(s);
  }
  // A product read by nothing but its one fused sum is summed as it is computed (ew_dot:
  // the same bits as summing the stored product), neither stored nor given a buffer; it
  // takes no share of the background work below, which it would not do.
  {
    std::vector<bool> region_output(size_t(nin) + P.steps.size(), false);
    for (const auto& v : outputs) region_output[size_t(value_id(v))] = true;
    for (size_t k = 0; k < P.sum_value.size(); ++k) {
      const int v = P.sum_value[k];
      Step& st = P.steps[size_t(v - nin)];
      const bool once = std::count(P.sum_value.begin(), P.sum_value.end(), v) == 1;
      const bool scalar_or_bcast = st.form != 0 || st.bcast[0] || st.bcast[1];
      if (!once || st.deleted || st.op != EwOp::Mul || st.nargs != 2 || scalar_or_bcast || st.pre.any() ||
          st.post.any() || st.narrow || (st.out_ck != CK::F32 && st.out_ck != CK::F64) || st.in_ck != st.out_ck ||
          last_use[size_t(v)] >= 0 || region_output[size_t(v)])
        continue;
      st.dot_sum = int(k);
    }
  }
  // The f32 kernels share the background memory work of each chunk (prefetching the
  // next chunk's inputs, streaming out the previous chunk's outputs) by their cost.
  for (Step& st : P.steps) {
    bool bcast = st.bcast[0] || st.bcast[1];
    if (st.deleted || st.dot_sum >= 0 || st.nargs > 2 || bcast || !ew_affine_ok(st.op) || st.in_ck != CK::F32 ||
        st.out_ck != CK::F32)
      continue;
    switch (st.op) {
      case EwOp::Exp: case EwOp::Log: case EwOp::Erf: case EwOp::Tanh: st.bg_weight = 8; break;
      case EwOp::Sqrt: case EwOp::Rsqrt: case EwOp::Recip: case EwOp::Div: st.bg_weight = 2; break;
      default: st.bg_weight = 1; break;
    }
    P.bg_total += st.bg_weight;
  }
  // Regions that move more bytes than the last-level cache can keep write their outputs
  // with streaming stores (no read-for-ownership, no eviction of useful lines). Regions whose
  // outputs are all f64 (the Krylov solvers' vector updates, read again within the
  // iteration) store plainly on AMD (PCG 128^3 on one Zen 4 core: 4.21 s against 4.60 s
  // streaming, medians of 4) and elsewhere stream only past the whole cache: on one core of
  // the 300 MiB-L3 Xeon the x/r/z pass (134 MB) ran 11.0 against 12.0 ms with plain stores,
  // faster in each of 3 rounds, its outputs staying in the L3 for their next reads.
  {
    int64_t moved = 0;
    bool all_f64 = !out.empty();
    for (const Tensor& t : held) moved += int64_t(t.nbytes());
    for (const Tensor& o : out) moved += int64_t(o.nbytes()), all_f64 &= o.dtype() == DType::F64;
    static const bool amd = cpu_is_amd();
    const int ov = stream_override();
    P.stream = ov >= 0 ? ov == 1 : all_f64 ? !amd && moved > llc_bytes() : moved > llc_bytes() / 4;
    P.defer = P.stream && P.bg_total > 0 && outputs.size() <= 4;
  }
  // Outputs: the first output of a node whose storage is its compute type is written in
  // place (unless streaming); others are converted from scratch after the node runs.
  for (size_t o = 0; o < outputs.size(); ++o) {
    int v = value_id(outputs[o]);
    if (v < nin) {
      P.input_outputs.push_back({int(o), v});
      continue;
    }
    Step& st = P.steps[size_t(v - nin)];
    DType od = P.out_dtype[o];
    if (od != st.out_dtype) throw InternalError("cpu fused executor: output dtype differs from its node's");
    if ((!P.stream || P.defer) && st.direct_out < 0 && ck_size(st.out_ck) == dtype_size(od) && od != DType::F16 &&
        od != DType::BF16)
      st.direct_out = int(o);
    else
      st.stores.push_back(int(o));
  }
  // Scratch buffers for the other steps, reused once a value is dead.
  std::vector<int> free_bufs;
  for (size_t s = 0; s < P.steps.size(); ++s) {
    Step& st = P.steps[s];
    if (st.deleted) continue;
    if (st.direct_out < 0 && st.dot_sum < 0) {
      if (!free_bufs.empty()) {
        st.buf = free_bufs.back();
        free_bufs.pop_back();
      } else {
        st.buf = nbuf++;
      }
    }
    for (int k = 0; k < st.nargs; ++k) {
      int v = st.args[k];
      bool dup = false;
      for (int j = 0; j < k; ++j) dup |= st.args[j] == v;
      if (!dup && v >= nin && last_use[size_t(v)] == int(s) && P.steps[size_t(v - nin)].buf >= 0)
        free_bufs.push_back(P.steps[size_t(v - nin)].buf);
    }
    bool reduced = std::find(P.sum_value.begin(), P.sum_value.end(), int(size_t(nin) + s)) != P.sum_value.end();
    if (last_use[size_t(nin) + s] < 0 && st.buf >= 0 && !reduced) free_bufs.push_back(st.buf);  // unused result
  }
  P.nbuf = nbuf;

  const int64_t nchunks = (P.numel + kChunk - 1) / kChunk;
  std::vector<double> partial(size_t(nchunks) * sums.size());
  P.partial = partial.data();
  auto finish_sums = [&] {
    for (size_t k = 0; k < sums.size(); ++k) {
      double acc = 0;
      for (int64_t c = 0; c < nchunks; ++c) acc += partial[size_t(c) * sums.size() + k];
      store_sum(sums[k].out, acc);
    }
  };
  // Threads only pay off from a few chunks each.
  ThreadPool& pool = ThreadPool::instance();
  int nt = int(std::min<int64_t>(pool.size(), nchunks / 4));
  if (nt <= 1) {
    exec_chunks(P, 0, nchunks);
    finish_sums();
    return;
  }
  // Threads take runs of chunks from a shared counter, so a thread slowed down by other
  // work on its core does not hold the others up.
  const int64_t batch = std::clamp<int64_t>(nchunks / (int64_t(nt) * 8), 1, 32);
  std::atomic<int64_t> next{0};
  pool.run(nt, [&](int, int) {
    for (;;) {
      int64_t c0 = next.fetch_add(batch, std::memory_order_relaxed);
      if (c0 >= nchunks) break;
      exec_chunks(P, c0, std::min(nchunks, c0 + batch));
    }
  });
  finish_sums();
}

}  // namespace rlx::cpu
