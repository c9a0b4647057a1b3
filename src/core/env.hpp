// rlx's switches in the environment (RLX_NUM_THREADS, RLX_PROFILE, RLX_CPU_*, RLX_CUDA_*, ...),
// read one way: a value the switch does not take is an InputError naming the variable and
// what it takes, never a silent default (docs/runtime.md, "Environment").
#pragma once
#include <cstdint>
#include <initializer_list>

namespace rlx {

// The index in `names` of variable var's value; 0 (the first name, the default) where it is
// unset or empty.
int env_choice(const char* var, std::initializer_list<const char*> names);

// Variable var as a whole decimal integer in [lo, hi]; `fallback` where it is unset or empty.
int64_t env_int(const char* var, int64_t lo, int64_t hi, int64_t fallback);

}  // namespace rlx
