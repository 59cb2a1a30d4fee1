// Linear layer on the CPU: OpenBLAS cblas_sgemm, row-major, weights stored (OC, C) as in HF/torch.
// Shapes: inp (N, C) (any leading dims flattened to N), weight (OC, C), out (N, OC).
#include <cblas.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_util.h"

namespace motley::backend {

using tensor::Tensor;

namespace {
int BlasInt(int64_t v) {
  MOTLEY_CHECK(v >= 0 && v <= 0x7fffffff, "matmul dimension does not fit a BLAS int");
  return static_cast<int>(v);
}
}  // namespace

// out (N, OC) = inp (N, C) @ weight (OC, C)^T
void CpuBackend::MatmulForward(Tensor& out, const Tensor& inp, const Tensor& weight) {
  MOTLEY_CHECK(weight.shape().rank() == 2, "MatmulForward: weight must be (OC, C)");
  const int64_t OC = weight.dim(0), C = weight.dim(1);
  MOTLEY_CHECK(internal::LastDim(inp) == C, "MatmulForward: inp's last dim must be C");
  const int64_t N = internal::Rows(inp);
  MOTLEY_CHECK(out.numel() == N * OC, "MatmulForward: out must have N*OC elements");
  float* o = internal::F32(out, "MatmulForward: out");
  const float* x = internal::F32(inp, "MatmulForward: inp");
  const float* w = internal::F32(weight, "MatmulForward: weight");
  if (N == 0 || OC == 0) return;
  if (C == 0) {  // an empty sum; BLAS rejects lda = 0
    SetZero(out);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BlasInt(N), BlasInt(OC), BlasInt(C), 1.0F, x,
              BlasInt(C), w, BlasInt(C), 0.0F, o, BlasInt(OC));
}

// dinp (N, C) += dout (N, OC) @ weight (OC, C); dweight (OC, C) += dout^T @ inp (N, C)
void CpuBackend::MatmulBackward(Tensor& dinp, Tensor& dweight, const Tensor& dout,
                                const Tensor& inp, const Tensor& weight) {
  MOTLEY_CHECK(weight.shape().rank() == 2, "MatmulBackward: weight must be (OC, C)");
  const int64_t OC = weight.dim(0), C = weight.dim(1);
  MOTLEY_CHECK(internal::LastDim(inp) == C, "MatmulBackward: inp's last dim must be C");
  const int64_t N = internal::Rows(inp);
  MOTLEY_CHECK(dout.numel() == N * OC, "MatmulBackward: dout must have N*OC elements");
  const float* g = internal::F32(dout, "MatmulBackward: dout");
  if (N == 0 || C == 0 || OC == 0) return;  // nothing to add
  if (dinp.defined()) {
    MOTLEY_CHECK(dinp.numel() == N * C, "MatmulBackward: dinp must have N*C elements");
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BlasInt(N), BlasInt(C), BlasInt(OC),
                1.0F, g, BlasInt(OC), internal::F32(weight, "MatmulBackward: weight"), BlasInt(C),
                1.0F, internal::F32(dinp, "MatmulBackward: dinp"), BlasInt(C));
  }
  if (dweight.defined()) {
    MOTLEY_CHECK(dweight.numel() == OC * C, "MatmulBackward: dweight must have OC*C elements");
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, BlasInt(OC), BlasInt(C), BlasInt(N), 1.0F,
                g, BlasInt(OC), internal::F32(inp, "MatmulBackward: inp"), BlasInt(C), 1.0F,
                internal::F32(dweight, "MatmulBackward: dweight"), BlasInt(C));
  }
}

}  // namespace motley::backend
