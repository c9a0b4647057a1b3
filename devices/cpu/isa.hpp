// Does this CPU run code built for x86-64-v4 (AVX-512) or x86-64-v3 (AVX2+FMA)? GCC answers
// by level name; clang before 18 rejects those names in __builtin_cpu_supports, so for it
// the levels are spelled out as their defining features (the sanitizer build is clang's).
#pragma once

namespace rlx::cpu {

#if defined(__x86_64__) && defined(__GNUC__)
inline bool cpu_has_x86_64_v3() {
  __builtin_cpu_init();
#if defined(__clang__) && __clang_major__ < 18
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
         __builtin_cpu_supports("bmi2");
#else
  return __builtin_cpu_supports("x86-64-v3");
#endif
}
inline bool cpu_has_x86_64_v4() {
  __builtin_cpu_init();
#if defined(__clang__) && __clang_major__ < 18
  return cpu_has_x86_64_v3() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
  return __builtin_cpu_supports("x86-64-v4");
#endif
}
#endif

// AMD's x86 cores: where a kernel's best form differs by vendor (measured on Zen 4: its
// AVX-512 gathers are slow, OpenBLAS's SkylakeX GEMM kernels trail rlx's own).
inline bool cpu_is_amd() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_is("amd");
#else
  return false;
#endif
}

}  // namespace rlx::cpu
