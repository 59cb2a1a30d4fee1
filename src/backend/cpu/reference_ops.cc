// See reference_ops.h. Deliberately naive: one statement per formula, no threading, no tricks.
#include "backend/cpu/reference_ops.h"

#include <cmath>

#include "core/check.h"

namespace motley::backend::reference {

namespace {
void CheckSize(const Vec& v, int64_t n, const char* what) {
  MOTLEY_CHECK(static_cast<int64_t>(v.size()) == n, what);
}
size_t At(int64_t i) {
  return static_cast<size_t>(i);
}
}  // namespace

void MatmulForward(Vec& out, const Vec& inp, const Vec& weight, int64_t N, int64_t C, int64_t OC) {
  CheckSize(inp, N * C, "reference MatmulForward: inp");
  CheckSize(weight, OC * C, "reference MatmulForward: weight");
  out.assign(At(N * OC), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      double s = 0.0;
      for (int64_t c = 0; c < C; ++c) s += inp[At(n * C + c)] * weight[At(o * C + c)];
      out[At(n * OC + o)] = s;
    }
}

void MatmulBackward(Vec* dinp, Vec* dweight, const Vec& dout, const Vec& inp, const Vec& weight,
                    int64_t N, int64_t C, int64_t OC) {
  CheckSize(dout, N * OC, "reference MatmulBackward: dout");
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o) {
      const double g = dout[At(n * OC + o)];
      for (int64_t c = 0; c < C; ++c) {
        if (dinp) (*dinp)[At(n * C + c)] += g * weight[At(o * C + c)];
        if (dweight) (*dweight)[At(o * C + c)] += g * inp[At(n * C + c)];
      }
    }
}

void EmbeddingForward(Vec& out, const Ids& tokens, const Vec& wte, int64_t V, int64_t C) {
  CheckSize(wte, V * C, "reference EmbeddingForward: wte");
  const auto N = static_cast<int64_t>(tokens.size());
  out.assign(At(N * C), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    MOTLEY_CHECK(tokens[At(n)] >= 0 && tokens[At(n)] < V, "reference: token out of range");
    for (int64_t c = 0; c < C; ++c) out[At(n * C + c)] = wte[At(tokens[At(n)] * C + c)];
  }
}

void EmbeddingBackward(Vec& dwte, const Vec& dout, const Ids& tokens, int64_t V, int64_t C) {
  const auto N = static_cast<int64_t>(tokens.size());
  CheckSize(dwte, V * C, "reference EmbeddingBackward: dwte");
  CheckSize(dout, N * C, "reference EmbeddingBackward: dout");
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) dwte[At(tokens[At(n)] * C + c)] += dout[At(n * C + c)];
}

void RmsNormForward(Vec& out, Vec& rstd, const Vec& inp, const Vec& weight, int64_t N, int64_t C,
                    double eps) {
  CheckSize(inp, N * C, "reference RmsNormForward: inp");
  CheckSize(weight, C, "reference RmsNormForward: weight");
  out.assign(At(N * C), 0.0);
  rstd.assign(At(N), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) ss += inp[At(n * C + c)] * inp[At(n * C + c)];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    rstd[At(n)] = r;
    for (int64_t c = 0; c < C; ++c) out[At(n * C + c)] = inp[At(n * C + c)] * r * weight[At(c)];
  }
}

// y_i = x_i r w_i with r = (sum x^2 / C + eps)^(-1/2), dr/dx_j = -r^3 x_j / C, so
// dx_j = g_j w_j r - x_j r^3 / C * sum_i g_i w_i x_i and dw_i = sum_n g_i x_i r.
void RmsNormBackward(Vec& dinp, Vec& dweight, const Vec& dout, const Vec& inp, const Vec& weight,
                     const Vec& rstd, int64_t N, int64_t C) {
  CheckSize(dinp, N * C, "reference RmsNormBackward: dinp");
  CheckSize(dweight, C, "reference RmsNormBackward: dweight");
  for (int64_t n = 0; n < N; ++n) {
    const double r = rstd[At(n)];
    double dot = 0.0;
    for (int64_t c = 0; c < C; ++c) dot += dout[At(n * C + c)] * weight[At(c)] * inp[At(n * C + c)];
    for (int64_t c = 0; c < C; ++c) {
      const double x = inp[At(n * C + c)], g = dout[At(n * C + c)];
      dinp[At(n * C + c)] += g * weight[At(c)] * r - x * r * r * r / static_cast<double>(C) * dot;
      dweight[At(c)] += g * x * r;
    }
  }
}

namespace {
double RopeAngle(int64_t pos, int64_t i, int64_t HS, double theta) {
  return static_cast<double>(pos) *
         std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(HS));
}
}  // namespace

void RopeForward(Vec& out, const Vec& inp, const RopeDims& d, int64_t pos_offset, double theta) {
  CheckSize(inp, d.B * d.T * d.H * d.HS, "reference RopeForward: inp");
  MOTLEY_CHECK(d.HS % 2 == 0, "reference RopeForward: odd head size");
  Vec result(inp.size(), 0.0);
  const int64_t half = d.HS / 2;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t h = 0; h < d.H; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const int64_t base = ((b * d.T + t) * d.H + h) * d.HS;
          const double a = RopeAngle(pos_offset + t, i, d.HS, theta);
          const double x1 = inp[At(base + i)], x2 = inp[At(base + i + half)];
          result[At(base + i)] = x1 * std::cos(a) - x2 * std::sin(a);
          result[At(base + i + half)] = x2 * std::cos(a) + x1 * std::sin(a);
        }
  out = result;
}

void RopeBackward(Vec& dinp, const Vec& dout, const RopeDims& d, int64_t pos_offset, double theta) {
  CheckSize(dout, d.B * d.T * d.H * d.HS, "reference RopeBackward: dout");
  CheckSize(dinp, d.B * d.T * d.H * d.HS, "reference RopeBackward: dinp");
  const int64_t half = d.HS / 2;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t h = 0; h < d.H; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const int64_t base = ((b * d.T + t) * d.H + h) * d.HS;
          const double a = RopeAngle(pos_offset + t, i, d.HS, theta);
          const double g1 = dout[At(base + i)], g2 = dout[At(base + i + half)];
          dinp[At(base + i)] += g1 * std::cos(a) + g2 * std::sin(a);
          dinp[At(base + i + half)] += -g1 * std::sin(a) + g2 * std::cos(a);
        }
}

namespace {
size_t QIndex(const AttentionDims& d, int64_t b, int64_t t, int64_t h, int64_t i) {
  return At(((b * d.T + t) * d.NH + h) * d.HS + i);
}
size_t KIndex(const AttentionDims& d, int64_t b, int64_t t, int64_t h, int64_t i) {
  return At(((b * d.T + t) * d.NKV + h) * d.HS + i);
}
size_t AttIndex(const AttentionDims& d, int64_t b, int64_t h, int64_t t, int64_t t2) {
  return At(((b * d.NH + h) * d.T + t) * d.T + t2);
}
void CheckAttention(const Vec& q, const Vec& k, const Vec& v, const AttentionDims& d) {
  MOTLEY_CHECK(d.NKV > 0 && d.NH % d.NKV == 0, "reference attention: NH % NKV != 0");
  CheckSize(q, d.B * d.T * d.NH * d.HS, "reference attention: q");
  CheckSize(k, d.B * d.T * d.NKV * d.HS, "reference attention: k");
  CheckSize(v, d.B * d.T * d.NKV * d.HS, "reference attention: v");
}
}  // namespace

void AttentionForward(Vec& out, Vec& att, const Vec& q, const Vec& k, const Vec& v,
                      const AttentionDims& d) {
  CheckAttention(q, k, v, d);
  out.assign(q.size(), 0.0);
  att.assign(At(d.B * d.NH * d.T * d.T), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.HS));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.NH; ++h) {
      const int64_t kvh = h / (d.NH / d.NKV);
      for (int64_t t = 0; t < d.T; ++t) {
        Vec score(At(t + 1), 0.0);
        double mx = -INFINITY;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          double s = 0.0;
          for (int64_t i = 0; i < d.HS; ++i)
            s += q[QIndex(d, b, t, h, i)] * k[KIndex(d, b, t2, kvh, i)];
          score[At(t2)] = s * scale;
          mx = std::max(mx, score[At(t2)]);
        }
        double sum = 0.0;
        for (int64_t t2 = 0; t2 <= t; ++t2) sum += std::exp(score[At(t2)] - mx);
        for (int64_t t2 = 0; t2 <= t; ++t2)
          att[AttIndex(d, b, h, t, t2)] = std::exp(score[At(t2)] - mx) / sum;
        for (int64_t t2 = 0; t2 <= t; ++t2)
          for (int64_t i = 0; i < d.HS; ++i)
            out[QIndex(d, b, t, h, i)] +=
                att[AttIndex(d, b, h, t, t2)] * v[KIndex(d, b, t2, kvh, i)];
      }
    }
}

void AttentionBackward(Vec& dq, Vec& dk, Vec& dv, const Vec& dout, const Vec& q, const Vec& k,
                       const Vec& v, const Vec& att, const AttentionDims& d) {
  CheckAttention(q, k, v, d);
  CheckSize(dq, static_cast<int64_t>(q.size()), "reference attention: dq");
  CheckSize(dout, static_cast<int64_t>(q.size()), "reference attention: dout");
  CheckSize(dk, static_cast<int64_t>(k.size()), "reference attention: dk");
  CheckSize(dv, static_cast<int64_t>(v.size()), "reference attention: dv");
  CheckSize(att, d.B * d.NH * d.T * d.T, "reference attention: att");
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.HS));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.NH; ++h) {
      const int64_t kvh = h / (d.NH / d.NKV);
      for (int64_t t = 0; t < d.T; ++t) {
        // dP[t2] = dout[t] . v[t2]; dS = P * (dP - sum_j P[j] dP[j])
        Vec dp(At(t + 1), 0.0);
        for (int64_t t2 = 0; t2 <= t; ++t2)
          for (int64_t i = 0; i < d.HS; ++i)
            dp[At(t2)] += dout[QIndex(d, b, t, h, i)] * v[KIndex(d, b, t2, kvh, i)];
        double dot = 0.0;
        for (int64_t t2 = 0; t2 <= t; ++t2) dot += att[AttIndex(d, b, h, t, t2)] * dp[At(t2)];
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const double p = att[AttIndex(d, b, h, t, t2)];
          const double ds = p * (dp[At(t2)] - dot);
          for (int64_t i = 0; i < d.HS; ++i) {
            dv[KIndex(d, b, t2, kvh, i)] += p * dout[QIndex(d, b, t, h, i)];
            dq[QIndex(d, b, t, h, i)] += ds * scale * k[KIndex(d, b, t2, kvh, i)];
            dk[KIndex(d, b, t2, kvh, i)] += ds * scale * q[QIndex(d, b, t, h, i)];
          }
        }
      }
    }
}

namespace {
double Sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
}  // namespace

void SwiGluForward(Vec& out, const Vec& gate, const Vec& up) {
  MOTLEY_CHECK(gate.size() == up.size(), "reference SwiGluForward: sizes differ");
  out.assign(gate.size(), 0.0);
  for (size_t i = 0; i < gate.size(); ++i) out[i] = gate[i] * Sigmoid(gate[i]) * up[i];
}

void SwiGluBackward(Vec& dgate, Vec& dup, const Vec& dout, const Vec& gate, const Vec& up) {
  MOTLEY_CHECK(gate.size() == up.size() && dout.size() == gate.size() &&
                   dgate.size() == gate.size() && dup.size() == gate.size(),
               "reference SwiGluBackward: sizes differ");
  for (size_t i = 0; i < gate.size(); ++i) {
    const double s = Sigmoid(gate[i]);
    // d/dg [g s(g)] = s + g s (1 - s)
    dgate[i] += dout[i] * up[i] * (s + gate[i] * s * (1.0 - s));
    dup[i] += dout[i] * gate[i] * s;
  }
}

void CrossEntropyForward(Vec& losses, const Vec& logits, const Ids& targets, int64_t N, int64_t V) {
  CheckSize(logits, N * V, "reference CrossEntropyForward: logits");
  MOTLEY_CHECK(static_cast<int64_t>(targets.size()) == N, "reference CrossEntropyForward: targets");
  losses.assign(At(N), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const int32_t tg = targets[At(n)];
    if (tg < 0) continue;
    MOTLEY_CHECK(tg < V, "reference CrossEntropyForward: target >= V");
    double mx = -INFINITY;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, logits[At(n * V + j)]);
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(logits[At(n * V + j)] - mx);
    losses[At(n)] = -(logits[At(n * V + tg)] - mx - std::log(sum));
  }
}

void CrossEntropyBackward(Vec& dlogits, const Vec& logits, const Ids& targets, int64_t N, int64_t V,
                          double loss_scale) {
  CheckSize(logits, N * V, "reference CrossEntropyBackward: logits");
  CheckSize(dlogits, N * V, "reference CrossEntropyBackward: dlogits");
  for (int64_t n = 0; n < N; ++n) {
    const int32_t tg = targets[At(n)];
    if (tg < 0) continue;
    double mx = -INFINITY;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, logits[At(n * V + j)]);
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(logits[At(n * V + j)] - mx);
    for (int64_t j = 0; j < V; ++j) {
      const double p = std::exp(logits[At(n * V + j)] - mx) / sum;
      dlogits[At(n * V + j)] += (p - (j == tg ? 1.0 : 0.0)) * loss_scale;
    }
  }
}

void Add(Vec& out, const Vec& a, const Vec& b) {
  MOTLEY_CHECK(a.size() == b.size(), "reference Add: sizes differ");
  out.assign(a.size(), 0.0);
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
}

void AddInPlace(Vec& a, const Vec& b) {
  MOTLEY_CHECK(a.size() == b.size(), "reference AddInPlace: sizes differ");
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
}

void Scale(Vec& a, double s) {
  for (double& x : a) x *= s;
}

double SumSquares(const Vec& a) {
  double s = 0.0;
  for (double x : a) s += x * x;
  return s;
}

double Sum(const Vec& a) {
  double s = 0.0;
  for (double x : a) s += x;
  return s;
}

void AdamW(Vec& param, const Vec& grad, Vec& m, Vec& v, const tensor::AdamWParams& p) {
  MOTLEY_CHECK(grad.size() == param.size() && m.size() == param.size() && v.size() == param.size(),
               "reference AdamW: sizes differ");
  const auto b1 = static_cast<double>(p.beta1), b2 = static_cast<double>(p.beta2);
  const auto lr = static_cast<double>(p.lr), eps = static_cast<double>(p.eps);
  const auto wd = static_cast<double>(p.weight_decay);
  const auto t = static_cast<double>(p.step);
  const auto gs = static_cast<double>(p.grad_scale);
  for (size_t i = 0; i < param.size(); ++i) {
    const double g = grad[i] * gs;
    m[i] = b1 * m[i] + (1.0 - b1) * g;
    v[i] = b2 * v[i] + (1.0 - b2) * g * g;
    const double mh = m[i] / (1.0 - std::pow(b1, t));
    const double vh = v[i] / (1.0 - std::pow(b2, t));
    param[i] -= lr * (mh / (std::sqrt(vh) + eps) + wd * param[i]);
  }
}

}  // namespace motley::backend::reference
