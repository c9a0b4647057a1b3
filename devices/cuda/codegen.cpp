// Elementwise code generation for the cuda device: source emission, NVRTC compilation,
// the in-memory and on-disk kernel caches, and the launch. codegen.hpp describes it.
#include "devices/cuda/codegen.hpp"

#include <cuda_runtime.h>
#include <nvrtc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "core/collapse_dims.hpp"
#include "core/error.hpp"
#include "core/fast_divisor.hpp"
#include "devices/cuda/common.hpp"
#include "ir/op_registry.hpp"

namespace rlx::cuda {

namespace {

// ---------------------------------------------------------------- compute domains
// Every value is held in the domain of its dtype: integers and bool as long long,
// f16/bf16/f32 as float, f64 as double, c64 as a pair of doubles.
enum class Dom { I, F, D, C };

Dom dom(DType t) {
  switch (t) {
    case DType::F16: case DType::BF16: case DType::F32: return Dom::F;
    case DType::F64: return Dom::D;
    case DType::C64: return Dom::C;
    default: return Dom::I;
  }
}

const char* ctype(DType t) {
  switch (dom(t)) {
    case Dom::I: return "i64";
    case Dom::F: return "float";
    case Dom::D: return "double";
    case Dom::C: return "cplx";
  }
  return "";
}

// Helper names carry the dtype's own name (ld_f16, rnd_i8, st_bool, ...).
const char* tag(DType t) { return dtype_name(t); }

// The C type a dtype is stored as (what ld_/st_ read and write).
const char* stype(DType t) {
  switch (t) {
    case DType::Bool: case DType::U8: return "unsigned char";
    case DType::I8: return "signed char";
    case DType::I32: return "int";
    case DType::I64: return "long long";
    case DType::F16: case DType::BF16: return "unsigned short";
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::C64: return "f2";
    default: throw InternalError(std::string("cuda: no storage type for ") + dtype_name(t));
  }
}

// The fixed part of every generated module: storage conversions, rounding to each dtype,
// the reference's integer and NaN rules, complex arithmetic.
const char* kPrelude = R"(typedef long long i64;
typedef unsigned long long u64;
struct cplx { double re, im; };
struct alignas(8) f2 { float x, y; };
// U neighbouring elements moved as one access (up to 16 bytes; wider packs in 16-byte parts).
template <class S, int U> struct alignas(sizeof(S) * U < 16 ? sizeof(S) * U : 16) pk { S v[U]; };
__device__ __forceinline__ float h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float b2f(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ __forceinline__ unsigned short f2b(float f) { unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
// double -> float rounded to odd: rounding that to f16/bf16 is one correct rounding of v.
__device__ __forceinline__ float odd(double v) {
  float f = __double2float_rz(v);
  if (v == v && (double)f != v && !isinf(f)) f = __uint_as_float(__float_as_uint(f) | 1u);
  return f;
}
// As odd(), from an integer: the float toward zero, made odd when inexact (int64 -> double
// would itself round first).
__device__ __forceinline__ float oddi(i64 v) {
  float f = __ll2float_rz(v);
  if ((i64)f != v) f = __uint_as_float(__float_as_uint(f) | 1u);
  return f;
}
__device__ __forceinline__ i64 rnd_bool(i64 x) { return x != 0; }
__device__ __forceinline__ i64 rnd_i8(i64 x) { return (i64)(signed char)x; }
__device__ __forceinline__ i64 rnd_u8(i64 x) { return (i64)(unsigned char)x; }
__device__ __forceinline__ i64 rnd_i32(i64 x) { return (i64)(int)x; }
__device__ __forceinline__ i64 rnd_i64(i64 x) { return x; }
__device__ __forceinline__ float rnd_f16(float x) { return h2f(f2h(x)); }
__device__ __forceinline__ float rnd_bf16(float x) { return b2f(f2b(x)); }
__device__ __forceinline__ float rnd_f32(float x) { return x; }
__device__ __forceinline__ double rnd_f64(double x) { return x; }
__device__ __forceinline__ cplx rnd_c64(cplx z) { return cplx{(double)(float)z.re, (double)(float)z.im}; }
__device__ __forceinline__ i64 ld_bool(const void* p, i64 o) { return ((const unsigned char*)p)[o] != 0; }
__device__ __forceinline__ i64 ld_i8(const void* p, i64 o) { return ((const signed char*)p)[o]; }
__device__ __forceinline__ i64 ld_u8(const void* p, i64 o) { return ((const unsigned char*)p)[o]; }
__device__ __forceinline__ i64 ld_i32(const void* p, i64 o) { return ((const int*)p)[o]; }
__device__ __forceinline__ i64 ld_i64(const void* p, i64 o) { return ((const long long*)p)[o]; }
__device__ __forceinline__ float ld_f16(const void* p, i64 o) { return h2f(((const unsigned short*)p)[o]); }
__device__ __forceinline__ float ld_bf16(const void* p, i64 o) { return b2f(((const unsigned short*)p)[o]); }
__device__ __forceinline__ float ld_f32(const void* p, i64 o) { return ((const float*)p)[o]; }
__device__ __forceinline__ double ld_f64(const void* p, i64 o) { return ((const double*)p)[o]; }
__device__ __forceinline__ cplx ld_c64(const void* p, i64 o) { f2 v = ((const f2*)p)[o]; return cplx{v.x, v.y}; }
__device__ __forceinline__ void st_bool(void* p, i64 o, i64 v) { ((unsigned char*)p)[o] = v != 0; }
__device__ __forceinline__ void st_i8(void* p, i64 o, i64 v) { ((signed char*)p)[o] = (signed char)v; }
__device__ __forceinline__ void st_u8(void* p, i64 o, i64 v) { ((unsigned char*)p)[o] = (unsigned char)v; }
__device__ __forceinline__ void st_i32(void* p, i64 o, i64 v) { ((int*)p)[o] = (int)v; }
__device__ __forceinline__ void st_i64(void* p, i64 o, i64 v) { ((long long*)p)[o] = v; }
__device__ __forceinline__ void st_f16(void* p, i64 o, float v) { ((unsigned short*)p)[o] = f2h(v); }
__device__ __forceinline__ void st_bf16(void* p, i64 o, float v) { ((unsigned short*)p)[o] = f2b(v); }
__device__ __forceinline__ void st_f32(void* p, i64 o, float v) { ((float*)p)[o] = v; }
__device__ __forceinline__ void st_f64(void* p, i64 o, double v) { ((double*)p)[o] = v; }
__device__ __forceinline__ void st_c64(void* p, i64 o, cplx v) { f2 w; w.x = (float)v.re; w.y = (float)v.im; ((f2*)p)[o] = w; }
// Float -> integer: truncate toward zero, saturate to [lo, hi], NaN -> 0.
__device__ __forceinline__ i64 sat(double v, i64 lo, i64 hi) {
  if (v != v) return 0;
  v = trunc(v);
  if (v <= (double)lo) return lo;
  if (v >= (double)hi) return hi;
  return (i64)v;
}
__device__ __forceinline__ i64 wadd(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
__device__ __forceinline__ i64 wsub(i64 a, i64 b) { return (i64)((u64)a - (u64)b); }
__device__ __forceinline__ i64 wmul(i64 a, i64 b) { return (i64)((u64)a * (u64)b); }
__device__ __forceinline__ i64 idiv(i64 a, i64 b) {
  if (b == 0) return 0;
  if (a == (i64)0x8000000000000000ull && b == -1) return a;
  return a / b;
}
template <class T> __device__ __forceinline__ T nmax(T a, T b) { return (a != a || b != b) ? a + b : (a < b ? b : a); }
template <class T> __device__ __forceinline__ T nmin(T a, T b) { return (a != a || b != b) ? a + b : (b < a ? b : a); }
template <class T> __device__ __forceinline__ T fsign(T x) { return x > 0 ? T(1) : (x < 0 ? T(-1) : x); }
__device__ __forceinline__ cplx cadd(cplx a, cplx b) { return cplx{a.re + b.re, a.im + b.im}; }
__device__ __forceinline__ cplx csub(cplx a, cplx b) { return cplx{a.re - b.re, a.im - b.im}; }
__device__ __forceinline__ cplx cmul(cplx a, cplx b) { return cplx{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }
__device__ __forceinline__ cplx cdiv(cplx a, cplx b) {
  double s = fabs(b.re) > fabs(b.im) ? fabs(b.re) : fabs(b.im);
  if (s == 0) return cplx{a.re / 0.0, a.im / 0.0};
  double br = b.re / s, bi = b.im / s, d = br * br + bi * bi;
  return cplx{(a.re * br + a.im * bi) / s / d, (a.im * br - a.re * bi) / s / d};
}
__device__ __forceinline__ cplx cexp_(cplx z) { double e = exp(z.re); return cplx{e * cos(z.im), e * sin(z.im)}; }
)";

// Integer range of a dtype for saturating casts.
std::pair<const char*, const char*> int_range(DType t) {
  switch (t) {
    case DType::I8: return {"-128", "127"};
    case DType::U8: return {"0", "255"};
    case DType::I32: return {"-2147483648LL", "2147483647LL"};
    default: return {"(i64)0x8000000000000000ull", "0x7fffffffffffffffLL"};
  }
}

// The expression converting x (domain of `from`) to the domain of `to`, before rounding
// to `to`: the reference's cast rules.
std::string convert(const std::string& x, DType from, DType to) {
  Dom a = dom(from), b = dom(to);
  if (to == DType::Bool) {
    if (a == Dom::C) return "(i64)((" + x + ").re != 0 || (" + x + ").im != 0)";
    return "(i64)(" + x + " != 0)";
  }
  switch (b) {
    case Dom::I:
      if (a == Dom::I) return x;
      {
        auto [lo, hi] = int_range(to);
        std::string v = a == Dom::C ? "(" + x + ").re" : "(double)(" + x + ")";
        return std::string("sat(") + v + ", " + lo + ", " + hi + ")";
      }
    case Dom::F: {
      // To f16/bf16 from a double-precision source: round to odd first (one rounding).
      bool narrow = to != DType::F32;
      std::string re = a == Dom::C ? "(" + x + ").re" : x;
      if (a == Dom::F) return re;
      if (a == Dom::I) return narrow ? "oddi(" + re + ")" : "(float)(" + re + ")";
      return narrow ? "odd(" + re + ")" : "(float)(" + re + ")";
    }
    case Dom::D:
      if (a == Dom::C) return "(" + x + ").re";
      return "(double)(" + x + ")";
    case Dom::C:
      if (a == Dom::C) return x;
      if (a == Dom::I) return "cplx{(double)(float)(" + x + "), 0.0}";
      return "cplx{(double)(" + x + "), 0.0}";
  }
  return x;
}

// Float-domain math: f32 functions for F, double ones for D.
std::string fn(const char* name, Dom d, const std::string& a) {
  return std::string(name) + (d == Dom::F ? "f(" : "(") + a + ")";
}

// The expression of node n (operands already named), in the domain of its result.
// Empty when the op or operand domain is not generated.
// t0: the dtype of the domain-deciding operand (the first; `where`'s second).
std::string expr(const ir::Node& n, DType t0, const std::vector<std::string>& a) {
  const std::string& op = n.op->name;
  DType out = n.out().dtype;
  Dom d = dom(t0);
  const bool fl = d == Dom::F || d == Dom::D;
  const std::string one = d == Dom::F ? "1.0f" : "1.0";
  if (op == "cast") return convert(a[0], t0, out);
  if (op == "where") return "(" + a[0] + " ? " + a[1] + " : " + a[2] + ")";
  if (op == "make_complex") return "cplx{(double)(" + a[0] + "), (double)(" + a[1] + ")}";
  if (op == "neg") return d == Dom::I ? "wsub(0, " + a[0] + ")" : d == Dom::C ? "cplx{-" + a[0] + ".re, -" + a[0] + ".im}" : "-" + a[0];
  if (op == "abs") {
    if (d == Dom::I) return "(" + a[0] + " < 0 ? wsub(0, " + a[0] + ") : " + a[0] + ")";
    if (d == Dom::C) return "(float)hypot(" + a[0] + ".re, " + a[0] + ".im)";
    return fn("fabs", d, a[0]);
  }
  if (op == "exp") return d == Dom::C ? "cexp_(" + a[0] + ")" : fl ? fn("exp", d, a[0]) : "";
  if (op == "real") return "(float)" + a[0] + ".re";
  if (op == "imag") return "(float)" + a[0] + ".im";
  if (op == "conj") return "cplx{" + a[0] + ".re, -" + a[0] + ".im}";
  if (op == "logical_not") return "(i64)(" + a[0] + " == 0)";
  if (op == "sign") return d == Dom::I ? "(i64)((" + a[0] + " > 0) - (" + a[0] + " < 0))" : "fsign(" + a[0] + ")";
  if (fl) {
    static const std::map<std::string, const char*> unary = {{"log", "log"},   {"sqrt", "sqrt"}, {"sin", "sin"},
                                                             {"cos", "cos"},   {"tanh", "tanh"}, {"erf", "erf"},
                                                             {"floor", "floor"}, {"ceil", "ceil"}, {"round", "rint"}};
    if (auto it = unary.find(op); it != unary.end()) return fn(it->second, d, a[0]);
    // In double for f32 too: 1/sqrt rounded once, as the reference (two f32 roundings are not).
    if (op == "rsqrt") return d == Dom::F ? "(float)(1.0 / sqrt((double)" + a[0] + "))" : one + " / " + fn("sqrt", d, a[0]);
    if (op == "recip") return one + " / " + a[0];
    if (op == "pow") return std::string(d == Dom::F ? "powf(" : "pow(") + a[0] + ", " + a[1] + ")";
  }
  if (op == "add") return d == Dom::I ? "wadd(" + a[0] + ", " + a[1] + ")" : d == Dom::C ? "cadd(" + a[0] + ", " + a[1] + ")" : a[0] + " + " + a[1];
  if (op == "sub") return d == Dom::I ? "wsub(" + a[0] + ", " + a[1] + ")" : d == Dom::C ? "csub(" + a[0] + ", " + a[1] + ")" : a[0] + " - " + a[1];
  if (op == "mul") return d == Dom::I ? "wmul(" + a[0] + ", " + a[1] + ")" : d == Dom::C ? "cmul(" + a[0] + ", " + a[1] + ")" : a[0] + " * " + a[1];
  if (op == "div") return d == Dom::I ? "idiv(" + a[0] + ", " + a[1] + ")" : d == Dom::C ? "cdiv(" + a[0] + ", " + a[1] + ")" : a[0] + " / " + a[1];
  if (op == "maximum" && d != Dom::C) return "nmax(" + a[0] + ", " + a[1] + ")";
  if (op == "minimum" && d != Dom::C) return "nmin(" + a[0] + ", " + a[1] + ")";
  if (op == "eq" || op == "ne") {
    std::string e = d == Dom::C ? "(" + a[0] + ".re == " + a[1] + ".re && " + a[0] + ".im == " + a[1] + ".im)"
                                : "(" + a[0] + " == " + a[1] + ")";
    return op == "eq" ? "(i64)" + e : "(i64)!" + e;
  }
  static const std::map<std::string, const char*> cmp = {{"lt", "<"}, {"le", "<="}, {"gt", ">"}, {"ge", ">="}};
  if (auto it = cmp.find(op); it != cmp.end() && d != Dom::C) return "(i64)(" + a[0] + " " + it->second + " " + a[1] + ")";
  if (op == "logical_and") return "(i64)(" + a[0] + " && " + a[1] + ")";
  if (op == "logical_or") return "(i64)(" + a[0] + " || " + a[1] + ")";
  return "";
}

template <class TypeOf> DType domain_dtype(const ir::Node& n, TypeOf type_of) {
  if (n.inputs.empty()) return n.out().dtype;
  return type_of(n.inputs[n.op->name == "where" ? 1 : 0]);
}

const std::vector<std::string>& ew_ops() {
  static const std::vector<std::string> v = {
      "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "recip", "floor", "ceil",
      "round", "sign", "logical_not", "real", "imag", "conj", "add", "sub", "mul", "div", "pow", "maximum",
      "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "make_complex", "where", "cast"};
  return v;
}

// ---------------------------------------------------------------- NVRTC and caches

[[noreturn]] void nvrtc_fail(nvrtcResult r, const std::string& what) {
  throw DeviceError("cuda: NVRTC " + what + ": " + nvrtcGetErrorString(r) +
                    (current_node().empty() ? "" : " (node " + current_node() + ")"));
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string nvrtc_version() {
  int ma = 0, mi = 0;
  nvrtcVersion(&ma, &mi);
  return std::to_string(ma) + "." + std::to_string(mi);
}

}  // namespace

std::string cache_dir() {
  if (const char* d = std::getenv("RLX_CACHE_DIR"); d && *d) return (std::filesystem::path(d) / "cuda").string();
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return (std::filesystem::path(d) / "rlx" / "cuda").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (std::filesystem::path(h) / ".cache" / "rlx" / "cuda").string();
  return (std::filesystem::temp_directory_path() / "rlx-cuda-cache").string();
}

namespace {
bool put_cache_file(const std::filesystem::path& p, const std::string& data) {
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) return false;
  std::filesystem::path tmp = p;
  tmp += ".tmp" + std::to_string(::getpid());
  std::ofstream o(tmp, std::ios::binary);
  o.write(data.data(), std::streamsize(data.size()));
  o.close();
  if (o) std::filesystem::rename(tmp, p, ec);
  if (!o || ec) {
    std::filesystem::remove(tmp, ec);
    return false;
  }
  return true;
}

std::string get_cache_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return {};
  std::stringstream b;
  b << f.rdbuf();
  return b.str();
}

std::filesystem::path cache_entry_path(const std::string& key, const std::string& suffix) {
  char name[24];
  std::snprintf(name, sizeof name, "%016llx", (unsigned long long)fnv1a(key));
  return std::filesystem::path(cache_dir()) / (name + suffix);
}
}  // namespace

std::string get_cache_entry(const std::string& key, const std::string& suffix) {
  const std::filesystem::path p = cache_entry_path(key, suffix);
  std::filesystem::path kp = p;
  kp += ".key";
  std::string data = get_cache_file(p);
  return !data.empty() && get_cache_file(kp) == key ? data : std::string();  // a hash collision cannot alias
}

void put_cache_entry(const std::string& key, const std::string& suffix, const std::string& data) {
  const std::filesystem::path p = cache_entry_path(key, suffix);
  std::filesystem::path kp = p;
  kp += ".key";
  if (put_cache_file(kp, key)) put_cache_file(p, data);
}

std::string nvrtc_compile(const std::string& src, int cc, std::string* log) {
  nvrtcProgram prog;
  nvrtcResult r = nvrtcCreateProgram(&prog, src.c_str(), "rlx_region.cu", 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) nvrtc_fail(r, "create");
  const std::string archopt = "--gpu-architecture=sm_" + std::to_string(cc);
  // No FMA contraction: each node rounds exactly as the IR says.
  const bool fmad = src.rfind("// fmad\n", 0) == 0;
  const char* opts[] = {archopt.c_str(), "--std=c++17", fmad ? "--fmad=true" : "--fmad=false", "-default-device"};
  r = nvrtcCompileProgram(prog, 4, opts);
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string l(n, '\0');
    nvrtcGetProgramLog(prog, l.data());
    nvrtcDestroyProgram(&prog);
    if (log) *log = l;
    return {};
  }
  size_t n = 0;
  nvrtcGetCUBINSize(prog, &n);
  std::string cubin(n, '\0');
  nvrtcGetCUBIN(prog, cubin.data());
  nvrtcDestroyProgram(&prog);
  return cubin;
}

namespace {

// Compiles source to a cubin for this GPU, or reads it from the disk cache, keyed by the
// source, the target and the compiler version.
std::string compile_cubin(const std::string& src) {
  const std::string arch = "sm_" + std::to_string(compute_capability());
  const std::string key = src + "\n//" + arch + " nvrtc " + nvrtc_version();
  if (std::string cached = get_cache_entry(key, ".cubin"); !cached.empty()) return cached;
  std::string log;
  std::string cubin = nvrtc_compile(src, compute_capability(), &log);
  if (cubin.empty())
    throw InternalError("cuda: generated kernel does not compile (a bug in rlx):\n" + log + "\n--- source ---\n" + src);
  put_cache_entry(key, ".cubin", cubin);
  return cubin;
}

struct Module {
  cudaLibrary_t lib = nullptr;
  cudaKernel_t main = nullptr, finish = nullptr;
};

const Module& module_for(const std::string& src, bool has_finish) {
  static std::mutex mu;
  static std::unordered_map<std::string, Module> cache;
  std::lock_guard<std::mutex> lk(mu);
  auto it = cache.find(src);
  if (it != cache.end()) return it->second;
  std::string cubin = compile_cubin(src);
  Module m;
  check(cudaLibraryLoadData(&m.lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0), "loading a generated module");
  check(cudaLibraryGetKernel(&m.main, m.lib, "rlx_ew"), "finding rlx_ew");
  if (has_finish) check(cudaLibraryGetKernel(&m.finish, m.lib, "rlx_ew_finish"), "finding rlx_ew_finish");
  return cache.emplace(src, m).first->second;
}

// How kernel input k is addressed: 0 = contiguous (offset i), 1 = one element (offset 0),
// 2 = strided through the output's coordinates.
enum InputKind { kContig = 0, kScalar = 1, kStrided = 2 };

constexpr int kThreads = 256;

// The vector layout needs contiguous operands (a scalar is fine) and a power-of-two U > 1.
bool vector_layout_possible(const std::vector<int>& kinds, int unroll) {
  for (int k : kinds)
    if (k == kStrided) return false;
  return unroll > 1 && unroll <= 16 && (unroll & (unroll - 1)) == 0;
}

// prefix followed by a number (one append at a time: GCC 12 warns falsely on "x" + to_string).
std::string num(const char* prefix, long long v) {
  std::string r(prefix);
  r += std::to_string(v);
  return r;
}

}  // namespace

// ---------------------------------------------------------------- public

namespace {
std::mutex g_opt_mu;
CodegenOptions g_opt;
}  // namespace

void set_codegen_options(const CodegenOptions& o) {
  std::lock_guard<std::mutex> lk(g_opt_mu);
  g_opt = o;
}
CodegenOptions codegen_options() {
  std::lock_guard<std::mutex> lk(g_opt_mu);
  return g_opt;
}

bool is_elementwise_op(const std::string& op) {
  for (const std::string& o : ew_ops())
    if (o == op) return true;
  return false;
}

std::string elementwise_unsupported(const ir::Node& n, const ir::Graph& g) {
  if (!is_elementwise_op(n.op->name)) return "no cuda kernel for " + n.op->name;
  if (n.out().dtype == DType::I4) return "no i4 " + n.op->name + " on cuda";
  std::vector<std::string> names;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (g.type(n.inputs[i]).dtype == DType::I4) return "no i4 " + n.op->name + " on cuda";
    names.push_back("x");
  }
  DType t0 = domain_dtype(n, [&](ir::Value v) { return g.type(v).dtype; });
  if (expr(n, t0, names).empty()) return std::string("no ") + dtype_name(t0) + " " + n.op->name + " on cuda";
  return {};
}

int compute_capability() {
  static int cc = [] {
    int dev = 0, ma = 0, mi = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&ma, cudaDevAttrComputeCapabilityMajor, dev), "compute capability");
    check(cudaDeviceGetAttribute(&mi, cudaDevAttrComputeCapabilityMinor, dev), "compute capability");
    return ma * 10 + mi;
  }();
  return cc;
}

std::string compiler_description() { return "NVRTC " + nvrtc_version() + ", kernel cache " + cache_dir(); }

std::string elementwise_source(const std::vector<const ir::Node*>& nodes, const std::vector<ir::Value>& inputs,
                               const std::vector<DType>& input_dtypes, const std::vector<ir::Value>& outputs,
                               const std::vector<int>& kinds, int rank, bool wide, const std::vector<ir::Value>& sums,
                               const std::vector<DType>& sum_dtypes, bool vector) {
  const size_t ni = inputs.size(), no = outputs.size(), ns = sums.size();
  int nstrided = 0;
  for (int k : kinds) nstrided += k == kStrided;
  std::ostringstream s;
  if (codegen_options().fmad) s << "// fmad\n";
  s << kPrelude;
  // Parameters: one 8-byte-aligned block, laid out exactly as the host packs it.
  s << "struct Params {\n  const void* in[" << std::max<size_t>(ni, 1) << "];\n  void* out[" << std::max<size_t>(no, 1)
    << "];\n  double* partial[" << std::max<size_t>(ns, 1) << "];\n  i64 n;\n  i64 shape[" << std::max(rank, 1)
    << "];\n  i64 st[" << std::max(nstrided, 1) << "][" << std::max(rank, 1) << "];\n  unsigned dm[" << std::max(rank, 1)
    << "][2];\n};\n";
  const char* idx = wide ? "i64" : "int";
  // Without strided inputs each thread takes U elements per trip and issues all their
  // loads before any arithmetic. Grid-stride layout: the U elements lie a grid stride
  // apart. Vector layout (`vector`, U a power of two, every pointer aligned to its pack):
  // they are U neighbours, loaded and stored as one pack of up to 16 bytes per access.
  const CodegenOptions opt = codegen_options();
  const int U = nstrided ? 1 : std::max(1, std::min(opt.unroll, 16));
  vector = vector && vector_layout_possible(kinds, opt.unroll);
  s << "extern \"C\" __global__ void __launch_bounds__(" << kThreads << ") rlx_ew(const Params p) {\n";
  for (size_t j = 0; j < ns; ++j) s << "  double acc" << j << " = 0;\n";
  s << "  const " << idx << " n = (" << idx << ")p.n;\n";
  s << "  const " << idx << " T = (" << idx << ")gridDim.x * blockDim.x;\n";
  // Names of values: region inputs x<k>, node results v<id>; and their dtypes.
  std::map<std::pair<int32_t, int32_t>, DType> type;
  for (size_t k = 0; k < ni; ++k) type[{inputs[k].node, inputs[k].index}] = input_dtypes[k];
  for (const ir::Node* n : nodes) type[{n->id, 0}] = n->out().dtype;
  auto type_of = [&](ir::Value v) { return type.at({v.node, v.index}); };
  std::map<std::pair<int32_t, int32_t>, std::string> scalar_name;
  for (size_t k = 0; k < ni; ++k)
    if (kinds[k] == kScalar) {
      DType t = input_dtypes[k];
      s << "  const " << ctype(t) << " x" << k << " = ld_" << tag(t) << "(p.in[" << k << "], 0);\n";
      scalar_name[{inputs[k].node, inputs[k].index}] = num("x", (long long)k);
    }
  auto sfx = [](int u) { return num("_", u); };
  using Names = std::map<std::pair<int32_t, int32_t>, std::string>;
  // One element's loads: input k of element u read from `from(k)` at offset `off(k)`.
  auto emit_loads = [&](int u, Names& nm, auto from, auto off) {
    for (size_t k = 0; k < ni; ++k) {
      if (kinds[k] == kScalar) continue;
      DType t = input_dtypes[k];
      std::string x = num("x", (long long)k) + sfx(u);
      s << "    const " << ctype(t) << " " << x << " = ld_" << tag(t) << "(" << from(k) << ", " << off(k) << ");\n";
      nm[{inputs[k].node, inputs[k].index}] = x;
    }
  };
  // One element's nodes, each result rounded to its dtype.
  auto emit_nodes = [&](int u, Names& nm) {
    for (const ir::Node* n : nodes) {
      std::vector<std::string> a;
      for (ir::Value v : n->inputs) a.push_back(nm.at({v.node, v.index}));
      DType t = n->out().dtype;
      std::string e = expr(*n, domain_dtype(*n, type_of), a);
      if (e.empty()) throw InternalError("cuda: no generator for " + n->op->name);
      std::string v = num("v", n->id) + sfx(u);
      s << "    const " << ctype(t) << " " << v << " = rnd_" << tag(t) << "(" << e << ");\n";
      nm[{n->id, 0}] = v;
    }
  };
  auto emit_sums = [&](const Names& nm, const char* indent) {
    for (size_t j = 0; j < ns; ++j)
      s << indent << "acc" << j << " += (double)" << nm.at({sums[j].node, sums[j].index}) << ";\n";
  };
  // One element's stores (and sum terms) at index i<u>, guarded by i<u> < n.
  auto emit_scalar_stores = [&](int u, const Names& nm) {
    s << "    if (i" << sfx(u) << " < n) {\n";
    for (size_t j = 0; j < no; ++j) {
      DType t = type_of(outputs[j]);
      s << "      st_" << tag(t) << "(p.out[" << j << "], i" << sfx(u) << ", " << nm.at({outputs[j].node, outputs[j].index})
        << ");\n";
    }
    emit_sums(nm, "      ");
    s << "    }\n";
  };
  auto pack = [&](DType t) { return "pk<" + std::string(stype(t)) + ", " + std::to_string(U) + ">"; };
  if (vector) {
    // Whole packs, then the last n % U elements one per thread.
    s << "  const " << idx << " nv = n / " << U << ";\n";
    s << "  for (" << idx << " j = (" << idx << ")blockIdx.x * blockDim.x + threadIdx.x; j < nv; j += T) {\n";
    for (size_t k = 0; k < ni; ++k)
      if (kinds[k] != kScalar)
        s << "    const " << pack(input_dtypes[k]) << " r" << k << " = ((const " << pack(input_dtypes[k]) << "*)p.in[" << k
          << "])[j];\n";
    std::vector<Names> name(size_t(U), scalar_name);
    for (int u = 0; u < U; ++u)
      emit_loads(u, name[size_t(u)], [&](size_t k) { return num("r", (long long)k) + ".v"; },
                 [&](size_t) { return std::to_string(u); });
    for (int u = 0; u < U; ++u) emit_nodes(u, name[size_t(u)]);
    for (size_t j = 0; j < no; ++j) {
      DType t = type_of(outputs[j]);
      s << "    " << pack(t) << " w" << j << ";\n";
      for (int u = 0; u < U; ++u)
        s << "    st_" << tag(t) << "(w" << j << ".v, " << u << ", " << name[size_t(u)].at({outputs[j].node, outputs[j].index})
          << ");\n";
      s << "    ((" << pack(t) << "*)p.out[" << j << "])[j] = w" << j << ";\n";
    }
    for (int u = 0; u < U; ++u) emit_sums(name[size_t(u)], "    ");
    s << "  }\n";
    s << "  for (" << idx << " i_0 = nv * " << U << " + (" << idx
      << ")blockIdx.x * blockDim.x + threadIdx.x; i_0 < n; i_0 += T) {\n";
    Names nm = scalar_name;
    emit_loads(0, nm, [&](size_t k) { return num("p.in[", (long long)k) + "]"; }, [&](size_t) { return std::string("i_0"); });
    emit_nodes(0, nm);
    emit_scalar_stores(0, nm);
    s << "  }\n";
  } else {
    s << "  for (" << idx << " i0 = (" << idx << ")blockIdx.x * blockDim.x + threadIdx.x; i0 < n; i0 += " << U
      << " * T) {\n";
    // Element indices; a lane past the end re-reads element i0 (always valid) and stores nothing.
    for (int u = 0; u < U; ++u) s << "    const " << idx << " i" << sfx(u) << " = i0 + " << u << " * T;\n";
    if (nstrided) {
      // The coordinates of element i0. Below 2^31 elements each division by an extent is a
      // multiply-high and a shift by the host's constants (dm: magic, shift), where 64-bit
      // division by a runtime value costs some 70 instructions a dimension — enough to make
      // a broadcasting region over a large tensor compute-bound.
      for (int d = 0; d < rank; ++d) s << "    i64 c" << d << ";\n";
      if (wide) {
        s << "    { i64 r = i0;\n";
        for (int d = rank - 1; d > 0; --d) s << "      c" << d << " = r % p.shape[" << d << "]; r /= p.shape[" << d << "];\n";
        s << "      c0 = r;\n    }\n";
      } else {
        s << "    { unsigned r = (unsigned)i0, q;\n";
        for (int d = rank - 1; d > 0; --d)
          s << "      q = (__umulhi(r, p.dm[" << d << "][0]) + r) >> p.dm[" << d << "][1]; c" << d << " = (i64)(r - q * (unsigned)p.shape["
            << d << "]); r = q;\n";
        s << "      c0 = (i64)r;\n    }\n";
      }
    }
    std::vector<Names> name(size_t(U), scalar_name);
    for (int u = 0; u < U; ++u) {
      const std::string iu = num("i_", u), safe = u == 0 ? iu : "(" + iu + " < n ? " + iu + " : i0)";
      std::vector<std::string> offs(ni, safe);
      int si = 0;
      for (size_t k = 0; k < ni; ++k)
        if (kinds[k] == kStrided) {
          std::string off = "0";
          for (int d = 0; d < rank; ++d) off += num(" + c", d) + num(" * p.st[", si) + num("][", d) + "]";
          offs[k] = off;
          ++si;
        }
      emit_loads(u, name[size_t(u)], [&](size_t k) { return num("p.in[", (long long)k) + "]"; },
                 [&](size_t k) { return offs[k]; });
    }
    for (int u = 0; u < U; ++u) {
      emit_nodes(u, name[size_t(u)]);
      emit_scalar_stores(u, name[size_t(u)]);
    }
    s << "  }\n";
  }
  if (ns) {
    // Block partials: a fixed-order tree (warp shuffles, then the block's warps).
    s << "  __shared__ double red[" << ns << "][" << kThreads / 32 << "];\n";
    s << "  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;\n";
    for (size_t j = 0; j < ns; ++j) {
      s << "  for (int o = 16; o > 0; o >>= 1) acc" << j << " += __shfl_down_sync(0xffffffffu, acc" << j << ", o);\n";
      s << "  if (lane == 0) red[" << j << "][w] = acc" << j << ";\n";
    }
    s << "  __syncthreads();\n  if (threadIdx.x == 0) {\n";
    for (size_t j = 0; j < ns; ++j) {
      s << "    { double t = 0; for (int k = 0; k < " << kThreads / 32 << "; ++k) t += red[" << j << "][k]; p.partial["
        << j << "][blockIdx.x] = t; }\n";
    }
    s << "  }\n";
  }
  s << "}\n";
  if (ns) {
    // One block per sum adds the partials in a fixed order and stores the result.
    s << "struct Finish {\n  double* partial[" << ns << "];\n  void* out[" << ns << "];\n  int nblocks;\n};\n";
    s << "extern \"C\" __global__ void __launch_bounds__(" << kThreads << ") rlx_ew_finish(const Finish f) {\n";
    s << "  __shared__ double red[" << kThreads << "];\n";
    s << "  double t = 0;\n  for (int k = threadIdx.x; k < f.nblocks; k += blockDim.x) t += f.partial[blockIdx.x][k];\n";
    s << "  red[threadIdx.x] = t;\n  __syncthreads();\n";
    s << "  for (int w = blockDim.x / 2; w > 0; w >>= 1) { if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w]; "
         "__syncthreads(); }\n";
    s << "  if (threadIdx.x == 0) {\n";
    for (size_t j = 0; j < ns; ++j) {
      DType t = sum_dtypes[j];
      s << "    if (blockIdx.x == " << j << ") st_" << tag(t) << "(f.out[" << j << "], 0, (" << ctype(t) << ")red[0]);\n";
    }
    s << "  }\n}\n";
  }
  return s.str();
}

void run_elementwise(const std::vector<const ir::Node*>& nodes, const std::vector<ir::Value>& inputs, const std::vector<ir::Value>& outputs, const Shape& shape,
                     std::span<const Tensor> in, std::span<Tensor> out, const std::vector<FusedSum>& sums) {
  const int64_t n = numel(shape);
  if (shape.size() > size_t(kMaxRank))
    throw InputError("cuda: elementwise regions of rank " + std::to_string(shape.size()) + " (at most 8)");
  // Every input's view broadcast to `shape`, then the dimensions collapsed over the inputs'
  // strides (core/collapse_dims.hpp; the contiguous output merges wherever they do): a causal
  // mask [T, S] broadcast over scores [B, KV, G, T, S] becomes [B*KV*G, T*S], one division
  // per element instead of four.
  Shape cshape = shape;
  std::vector<std::vector<int64_t>> cst;
  std::vector<int64_t*> sets;
  for (const Tensor& t : in)
    if (t.numel() != 1) {
      const View v = broadcast_view(t, shape);
      cst.emplace_back(v.strides, v.strides + shape.size());
    }
  for (std::vector<int64_t>& st : cst) sets.push_back(st.data());
  const int rank = std::max(1, collapse_dims(int(shape.size()), cshape.data(), sets));
  cshape.resize(size_t(rank), 1);  // (a region of one element keeps one dimension)
  for (std::vector<int64_t>& st : cst) st.resize(size_t(rank), 0);
  // Classify inputs; collect the strided ones' coalesced strides.
  std::vector<int> kinds;
  std::vector<View> strided;
  size_t vi = 0;
  for (const Tensor& t : in) {
    if (t.numel() == 1) {
      kinds.push_back(kScalar);
      continue;
    }
    const std::vector<int64_t>& st = cst[vi++];
    bool contig = true;
    int64_t step = 1;
    for (int d = rank - 1; d >= 0; --d) {
      if (st[size_t(d)] != step) contig = false;
      step *= cshape[size_t(d)];
    }
    kinds.push_back(contig ? kContig : kStrided);
    if (!contig) {
      View v;
      v.rank = rank;
      for (int d = 0; d < rank; ++d) v.shape[d] = cshape[size_t(d)], v.strides[d] = st[size_t(d)];
      strided.push_back(v);
    }
  }
  // Element offsets fit in int when every byte offset does; sums add partials per block.
  // (Lanes run up to 4 grid strides past n before their bound check: keep that in range.)
  const bool wide = n >= (int64_t(1) << 31) - (int64_t(1) << 23);
  std::vector<ir::Value> sum_values;
  std::vector<DType> sum_dtypes, input_dtypes;
  for (const FusedSum& f : sums) {
    sum_values.push_back(f.operand);
    sum_dtypes.push_back(f.out.dtype());
  }
  for (const Tensor& t : in) input_dtypes.push_back(t.dtype());
  const CodegenOptions opt = codegen_options();
  // The vector layout when every pointer is aligned to its pack (arena blocks are; a view
  // at an odd offset is not).
  bool vector = opt.vector && vector_layout_possible(kinds, opt.unroll);
  auto aligned = [&](const void* ptr, DType t) {
    const size_t a = std::min<size_t>(16, size_t(opt.unroll) * dtype_size(t));
    return reinterpret_cast<uintptr_t>(ptr) % a == 0;
  };
  for (size_t k = 0; k < in.size() && vector; ++k)
    if (kinds[k] != kScalar && !aligned(in[k].raw(), in[k].dtype())) vector = false;
  for (size_t k = 0; k < out.size() && vector; ++k)
    if (!aligned(out[k].raw(), out[k].dtype())) vector = false;
  // The generated source is a function of this signature; looking it up costs far less
  // than generating the source again on every run.
  std::string sig;
  auto put = [&](int64_t v) { sig.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(rank);
  put(wide);
  put(opt.unroll);
  put(opt.fmad);
  put(vector);
  for (size_t k = 0; k < in.size(); ++k) {
    put(inputs[k].node);
    put(inputs[k].index);
    put(int64_t(input_dtypes[k]));
    put(kinds[k]);
  }
  for (const ir::Node* nd : nodes) {
    put(int64_t(reinterpret_cast<intptr_t>(nd->op)));
    put(nd->id);
    put(int64_t(nd->out().dtype));
    for (ir::Value v : nd->inputs) {
      put(v.node);
      put(v.index);
    }
    put(-1);
  }
  for (ir::Value v : outputs) put(int64_t(v.node) * 64 + v.index);
  for (size_t k = 0; k < sums.size(); ++k) {
    put(int64_t(sum_values[k].node) * 64 + sum_values[k].index);
    put(int64_t(sum_dtypes[k]));
  }
  static std::mutex sig_mu;
  static std::unordered_map<std::string, const Module*> by_sig;
  const Module* mp = nullptr;
  {
    std::lock_guard<std::mutex> lk(sig_mu);
    if (auto it = by_sig.find(sig); it != by_sig.end()) mp = it->second;
  }
  if (!mp) {
    const std::string src =
        elementwise_source(nodes, inputs, input_dtypes, outputs, kinds, rank, wide, sum_values, sum_dtypes, vector);
    mp = &module_for(src, !sums.empty());
    std::lock_guard<std::mutex> lk(sig_mu);
    by_sig.emplace(sig, mp);
  }
  const Module& m = *mp;

  const int64_t max_blocks = int64_t(sm_count()) * (2048 / kThreads);
  const int64_t per_thread = vector ? opt.unroll : 1;
  const int64_t threads_needed = (n + per_thread - 1) / per_thread;
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((threads_needed + kThreads - 1) / kThreads, max_blocks));
  std::optional<Scratch> partial;
  if (!sums.empty()) partial.emplace(sizeof(double) * size_t(blocks) * sums.size());

  // Pack the parameter block exactly as the generated `struct Params` lays it out.
  const size_t ni = std::max<size_t>(in.size(), 1), no = std::max<size_t>(out.size(), 1),
               ns = std::max<size_t>(sums.size(), 1), r = size_t(std::max(rank, 1)),
               nst = std::max<size_t>(strided.size(), 1);
  std::vector<uint64_t> params(ni + no + ns + 1 + r + nst * r + r, 0);
  size_t at = 0;
  for (size_t k = 0; k < ni; ++k, ++at)
    if (k < in.size()) params[at] = reinterpret_cast<uint64_t>(in[k].raw());
  for (size_t k = 0; k < no; ++k, ++at)
    if (k < out.size()) params[at] = reinterpret_cast<uint64_t>(out[k].raw());
  for (size_t k = 0; k < ns; ++k, ++at)
    if (k < sums.size()) params[at] = reinterpret_cast<uint64_t>(partial->as<double>() + size_t(blocks) * k);
  params[at++] = uint64_t(n);
  for (size_t d = 0; d < r; ++d, ++at) params[at] = d < size_t(rank) ? uint64_t(cshape[d]) : 1;
  for (size_t k = 0; k < nst; ++k)
    for (size_t d = 0; d < r; ++d, ++at)
      if (k < strided.size() && d < size_t(rank)) params[at] = uint64_t(strided[k].strides[d]);
  // dm[d] = {magic, shift} (little-endian: magic in the low word) for the division by extent d.
  for (size_t d = 0; d < r; ++d, ++at) {
    const FastDivisor f = fast_divisor(d < size_t(rank) ? uint32_t(std::min<int64_t>(cshape[d], INT32_MAX)) : 1u);
    params[at] = uint64_t(f.magic) | (uint64_t(f.shift) << 32);
  }
  if (n > 0) {
    void* args[] = {params.data()};
    check(cudaLaunchKernel((const void*)m.main, dim3(unsigned(blocks)), dim3(kThreads), args, 0, stream()),
          "launching a generated elementwise kernel");
  }
  if (!sums.empty()) {
    std::vector<uint64_t> fin(2 * sums.size() + 1, 0);
    for (size_t k = 0; k < sums.size(); ++k) {
      fin[k] = reinterpret_cast<uint64_t>(partial->as<double>() + size_t(blocks) * k);
      fin[sums.size() + k] = reinterpret_cast<uint64_t>(sums[k].out.raw());
    }
    // nblocks: an int after the pointers; the rest of that 8-byte word is padding.
    int nb = n > 0 ? int(blocks) : 0;
    std::memcpy(&fin[2 * sums.size()], &nb, sizeof nb);
    void* args[] = {fin.data()};
    check(cudaLaunchKernel((const void*)m.finish, dim3(unsigned(sums.size())), dim3(kThreads), args, 0, stream()),
          "launching the fused sums' final kernel");
  }
}

}  // namespace rlx::cuda
