// Process-wide settings of the CPU runtime that the OpenMP and OpenBLAS libraries read only once,
// when they are loaded (before main() runs), and that a program therefore chooses by setting them
// and re-executing itself.
//
// 1. OMP_WAIT_POLICY=PASSIVE. libgomp's idle workers spin by default, and OpenBLAS (pthreads build)
//    runs its own worker threads: on a 2-core machine the spinning OpenMP workers steal the cores
//    the next sgemm needs after every non-BLAS op. Measured here on the gpt2-124m training step
//    (B=4, T=64, 2 threads, shared machine): 8.2 GFLOP/s with the default policy, 16.7 with PASSIVE.
// 2. OPENBLAS_CORETYPE. Debian 12's OpenBLAS 0.3.21 does not recognise newer CPUs (here an Intel
//    Xeon with AVX-512, Sapphire Rapids class) and falls back to its SSE3 "Prescott" kernels:
//    1024^3 sgemm on one core measured 28.8 GFLOP/s as detected, 91.1 with SkylakeX, 53.0 with
//    Haswell. When the detected core is such a fallback and the CPU supports AVX-512 (F, BW, VL,
//    DQ) or AVX2 + FMA, SkylakeX or Haswell is chosen instead.
// 3. OPENBLAS_THREAD_TIMEOUT=18. After each call OpenBLAS's worker threads poll for new work with
//    sched_yield for 2^timeout cycles (default 2^28, about 0.1 s) before they sleep, so during the
//    non-BLAS ops of a training step (AdamW, grad norm, memsets: tens of ms) they compete with the
//    OpenMP threads for the two cores. 2^18 cycles (about 0.1 ms) still covers the short gaps
//    between the matmuls of a block. Measured on the gpt2-124m step (B=4, T=64, 2 threads, chrt -f
//    10, shared machine, steps 3-7): 1.22-1.37 s per step with the default, 1.08-1.23 s with 18;
//    the grad-norm pass went from 75-88 ms to 42-50 ms.
// A value the user set for any of these variables is always respected.
#pragma once

#include <string>

namespace motley::backend {

// What ConfigureCpuRuntime would set: pairs of (variable, value) not yet in the environment.
struct CpuRuntimeEnv {
  std::string omp_wait_policy;     // "" when nothing to set
  std::string openblas_coretype;   // "" when nothing to set
  std::string openblas_thread_timeout;  // "" when nothing to set
  bool empty() const {
    return omp_wait_policy.empty() && openblas_coretype.empty() && openblas_thread_timeout.empty();
  }
};
CpuRuntimeEnv WantedCpuRuntimeEnv();

// Call first thing in main(). Sets the wanted variables and re-executes the program
// (/proc/self/exe, same argv) once; returns when nothing had to change, when this process is
// already the re-executed one, or when the re-exec failed (the run then goes on as it was).
void ConfigureCpuRuntime(char** argv);

// The OpenBLAS kernel family in use ("SkylakeX", "Prescott", ...), for benchmark reports.
std::string BlasCoreName();

}  // namespace motley::backend
