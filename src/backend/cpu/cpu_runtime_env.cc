// See cpu_runtime_env.h.
#include "backend/cpu/cpu_runtime_env.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdlib>
#include <string_view>

namespace motley::backend {
namespace {

constexpr const char* kReexecMarker = "MOTLEY_CPU_ENV_SET";

// OpenBLAS's names for cores older than AVX2, which it reports when it does not know the CPU.
bool IsFallbackCore(std::string_view core) {
  return core == "Prescott" || core == "Core2" || core == "Penryn" || core == "Dunnington" ||
         core == "Nehalem" || core == "Sandybridge" || core == "Katmai" || core == "Coppermine" ||
         core == "Northwood" || core == "Banias" || core == "Atom" || core == "Unknown";
}

}  // namespace

std::string BlasCoreName() {
  const char* name = openblas_get_corename();
  return name != nullptr ? std::string(name) : std::string("unknown");
}

CpuRuntimeEnv WantedCpuRuntimeEnv() {
  CpuRuntimeEnv env;
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) env.omp_wait_policy = "PASSIVE";
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr) env.openblas_thread_timeout = "18";
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && IsFallbackCore(BlasCoreName())) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
      env.openblas_coretype = "SkylakeX";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      env.openblas_coretype = "Haswell";
    }
  }
  return env;
}

void ConfigureCpuRuntime(char** argv) {
  if (std::getenv(kReexecMarker) != nullptr) return;  // already re-executed once
  const CpuRuntimeEnv env = WantedCpuRuntimeEnv();
  if (env.empty()) return;
  if (!env.omp_wait_policy.empty()) setenv("OMP_WAIT_POLICY", env.omp_wait_policy.c_str(), 0);
  if (!env.openblas_coretype.empty()) {
    setenv("OPENBLAS_CORETYPE", env.openblas_coretype.c_str(), 0);
  }
  if (!env.openblas_thread_timeout.empty()) {
    setenv("OPENBLAS_THREAD_TIMEOUT", env.openblas_thread_timeout.c_str(), 0);
  }
  setenv(kReexecMarker, "1", 1);
  execv("/proc/self/exe", argv);
  // execv returns only on failure: carry on in this process with the libraries' defaults.
}

}  // namespace motley::backend
