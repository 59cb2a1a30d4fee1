// See op_costs.h: the one table of FLOPs and bytes per Backend op.
#include "spec/op_costs.h"

namespace motley::spec::costs {

namespace {
constexpr double kElem = 4.0;  // bytes of an f32 or i32 element

double D(int64_t x) {
  return static_cast<double>(x);
}
}  // namespace

OpCost MatmulForward(int64_t n, int64_t c, int64_t oc) {
  return {2.0 * D(n) * D(c) * D(oc), kElem * (D(n) * D(c) + D(oc) * D(c) + D(n) * D(oc))};
}

OpCost MatmulBackwardInput(int64_t n, int64_t c, int64_t oc) {
  // reads dout (N, OC) and weight (OC, C); dinp (N, C) read + written
  return {2.0 * D(n) * D(c) * D(oc), kElem * (D(n) * D(oc) + D(oc) * D(c) + 2.0 * D(n) * D(c))};
}

OpCost MatmulBackwardWeight(int64_t n, int64_t c, int64_t oc) {
  // reads dout (N, OC) and inp (N, C); dweight (OC, C) read + written
  return {2.0 * D(n) * D(c) * D(oc), kElem * (D(n) * D(oc) + D(n) * D(c) + 2.0 * D(oc) * D(c))};
}

OpCost EmbeddingForward(int64_t n, int64_t c) {
  return {0.0, kElem * (D(n) + 2.0 * D(n) * D(c))};  // tokens, rows read, out written
}

OpCost EmbeddingBackward(int64_t n, int64_t c) {
  return {D(n) * D(c), kElem * (D(n) + 3.0 * D(n) * D(c))};  // tokens, dout, rows read + written
}

OpCost RmsNormForward(int64_t n, int64_t c) {
  // reads inp (N, C) and weight (C); writes out (N, C) and rstd (N)
  return {4.0 * D(n) * D(c), kElem * (2.0 * D(n) * D(c) + D(c) + D(n))};
}

OpCost RmsNormBackward(int64_t n, int64_t c) {
  // reads dout, inp (N, C), weight (C), rstd (N); dinp (N, C) and dweight (C) read + written
  return {8.0 * D(n) * D(c), kElem * (4.0 * D(n) * D(c) + 3.0 * D(c) + D(n))};
}

OpCost RopeForward(int64_t elements) {
  return {3.0 * D(elements), kElem * 2.0 * D(elements)};
}

OpCost RopeBackward(int64_t elements) {
  return {4.0 * D(elements), kElem * 3.0 * D(elements)};
}

OpCost AttentionForward(int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs) {
  const double q = D(b) * D(t) * D(nh) * D(hs);
  const double kv = D(b) * D(t) * D(nkv) * D(hs);
  const double att = D(b) * D(nh) * D(t) * D(t);
  // reads q, k, v; writes out (like q) and att
  return {4.0 * D(b) * D(nh) * D(t) * D(t) * D(hs), kElem * (2.0 * q + 2.0 * kv + att)};
}

OpCost AttentionBackward(int64_t b, int64_t t, int64_t nh, int64_t nkv, int64_t hs) {
  const double q = D(b) * D(t) * D(nh) * D(hs);
  const double kv = D(b) * D(t) * D(nkv) * D(hs);
  const double att = D(b) * D(nh) * D(t) * D(t);
  // reads dout, q, k, v, att; dq, dk, dv read + written
  return {8.0 * D(b) * D(nh) * D(t) * D(t) * D(hs),
          kElem * (2.0 * q + 2.0 * kv + att + 2.0 * q + 4.0 * kv)};
}

OpCost SwiGluForward(int64_t elements) {
  return {5.0 * D(elements), kElem * 3.0 * D(elements)};
}

OpCost SwiGluBackward(int64_t elements) {
  // reads dout, gate, up; dgate and dup read + written
  return {10.0 * D(elements), kElem * 7.0 * D(elements)};
}

OpCost CrossEntropyForward(int64_t n, int64_t v) {
  return {3.0 * D(n) * D(v), kElem * (D(n) * D(v) + 2.0 * D(n))};  // logits, targets, losses
}

OpCost CrossEntropyBackward(int64_t n, int64_t v) {
  // reads logits and targets; dlogits read + written
  return {4.0 * D(n) * D(v), kElem * (3.0 * D(n) * D(v) + D(n))};
}

OpCost Add(int64_t elements) {
  return {D(elements), kElem * 3.0 * D(elements)};
}

OpCost AddInPlace(int64_t elements) {
  return {D(elements), kElem * 3.0 * D(elements)};
}

OpCost Scale(int64_t elements) {
  return {D(elements), kElem * 2.0 * D(elements)};
}

OpCost SumSquares(int64_t elements) {
  return {2.0 * D(elements), kElem * D(elements)};
}

OpCost Sum(int64_t elements) {
  return {D(elements), kElem * D(elements)};
}

OpCost AdamW(int64_t elements) {
  return {12.0 * D(elements), kElem * 7.0 * D(elements)};
}

OpCost WriteBytes(double bytes) {
  return {0.0, bytes};
}

OpCost ReadBytes(double bytes) {
  return {0.0, bytes};
}

OpCost CopyBytes(double bytes) {
  return {0.0, 2.0 * bytes};
}

}  // namespace motley::spec::costs
