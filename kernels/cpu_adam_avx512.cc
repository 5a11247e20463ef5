// AVX-512F path, 16 lanes. Compiled with generic flags: every function that
// touches 512-bit intrinsics carries the target attribute, and cpu_adam.cc
// calls in only after checking the CPU (Note [CPU Adam dispatch]).
#include <immintrin.h>

#include "kernels/cpu_adam_kernels.h"

#define DS_TARGET_AVX512 __attribute__((target("avx512f")))

// GCC 12 warns that the deliberately undefined pass-through operand of
// _mm512_sqrt_ps, _mm512_srli_epi32 and _mm512_cvtepi32_epi16 "may be used
// uninitialized" (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace dslaunch::kernels {
namespace {

struct Avx512Coefficients {
  __m512 beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, bc2_sqrt, eps,
      weight_decay, param_scale, grad_scale;
};

// Note [bf16 rounding] (bf16.h) on 16 lanes; the caller narrows to uint16.
DS_TARGET_AVX512 inline __m512i ToBf16Lanes(__m512 p) {
  const __m512i bits = _mm512_castps_si512(p);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
  return _mm512_mask_blend_epi32(nan, rounded, _mm512_set1_epi32(0x7FC0));
}

// One vector of Note [CPU Adam formula]; p, m, v updated in place.
DS_TARGET_AVX512 inline void Step16(const AdamStepCoefficients& c, const Avx512Coefficients& k,
                                    __m512& p, __m512 g, __m512& m, __m512& v) {
  g = _mm512_mul_ps(g, k.grad_scale);
  if (c.l2_decay) g = _mm512_fmadd_ps(k.weight_decay, p, g);
  if (c.decoupled_decay) p = _mm512_mul_ps(p, k.param_scale);
  m = _mm512_fmadd_ps(k.one_minus_beta1, g, _mm512_mul_ps(m, k.beta1));
  v = _mm512_fmadd_ps(_mm512_mul_ps(k.one_minus_beta2, g), g, _mm512_mul_ps(v, k.beta2));
  const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), k.bc2_sqrt), k.eps);
  p = _mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(k.neg_step_size, m), denom));
}

}  // namespace

DS_TARGET_AVX512 void AdamPieceAvx512(const AdamStepCoefficients& c, float* params,
                                      const float* grads, float* exp_avg, float* exp_avg_sq,
                                      int64_t n, uint16_t* bf16_out) {
  const Avx512Coefficients k{
      _mm512_set1_ps(c.beta1),         _mm512_set1_ps(c.one_minus_beta1),
      _mm512_set1_ps(c.beta2),         _mm512_set1_ps(c.one_minus_beta2),
      _mm512_set1_ps(c.neg_step_size), _mm512_set1_ps(c.bias_correction2_sqrt),
      _mm512_set1_ps(c.eps),           _mm512_set1_ps(c.weight_decay),
      _mm512_set1_ps(c.param_scale),
      _mm512_set1_ps(c.grad_scale)};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 p = _mm512_loadu_ps(params + i);
    __m512 m = _mm512_loadu_ps(exp_avg + i);
    __m512 v = _mm512_loadu_ps(exp_avg_sq + i);
    Step16(c, k, p, _mm512_loadu_ps(grads + i), m, v);
    _mm512_storeu_ps(params + i, p);
    _mm512_storeu_ps(exp_avg + i, m);
    _mm512_storeu_ps(exp_avg_sq + i, v);
    if (bf16_out != nullptr) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(bf16_out + i),
                          _mm512_cvtepi32_epi16(ToBf16Lanes(p)));
    }
  }
  if (i == n) return;
  // The tail runs the same vector code on masked lanes, so an element's result
  // does not depend on where a piece boundary falls.
  const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
  __m512 p = _mm512_maskz_loadu_ps(mask, params + i);
  __m512 m = _mm512_maskz_loadu_ps(mask, exp_avg + i);
  __m512 v = _mm512_maskz_loadu_ps(mask, exp_avg_sq + i);
  Step16(c, k, p, _mm512_maskz_loadu_ps(mask, grads + i), m, v);
  _mm512_mask_storeu_ps(params + i, mask, p);
  _mm512_mask_storeu_ps(exp_avg + i, mask, m);
  _mm512_mask_storeu_ps(exp_avg_sq + i, mask, v);
  if (bf16_out != nullptr) _mm512_mask_cvtepi32_storeu_epi16(bf16_out + i, mask, ToBf16Lanes(p));
}

}  // namespace dslaunch::kernels

#pragma GCC diagnostic pop
