// AVX2 + FMA path, 8 lanes. Compiled with generic flags: every function that
// touches 256-bit intrinsics carries the target attribute, and cpu_adam.cc
// calls in only after checking the CPU (Note [CPU Adam dispatch]).
#include <immintrin.h>

#include "kernels/cpu_adam_kernels.h"

#define DS_TARGET_AVX2 __attribute__((target("avx2,fma")))

namespace dslaunch::kernels {
namespace {

struct Avx2Coefficients {
  __m256 beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, bc2_sqrt, eps,
      weight_decay, param_scale, grad_scale;
};

// Note [bf16 rounding] (bf16.h) on 8 lanes, packed to 8 x uint16.
DS_TARGET_AVX2 inline __m128i ToBf16(__m256 p) {
  const __m256i bits = _mm256_castps_si256(p);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF));
  __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(p, p, _CMP_UNORD_Q));
  rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0), nan);
  // Values are < 2^16, so the unsigned-saturating pack is exact.
  return _mm_packus_epi32(_mm256_castsi256_si128(rounded), _mm256_extracti128_si256(rounded, 1));
}

// One vector of Note [CPU Adam formula]; p, m, v updated in place.
DS_TARGET_AVX2 inline void Step8(const AdamStepCoefficients& c, const Avx2Coefficients& k,
                                 __m256& p, __m256 g, __m256& m, __m256& v) {
  g = _mm256_mul_ps(g, k.grad_scale);
  if (c.l2_decay) g = _mm256_fmadd_ps(k.weight_decay, p, g);
  if (c.decoupled_decay) p = _mm256_mul_ps(p, k.param_scale);
  m = _mm256_fmadd_ps(k.one_minus_beta1, g, _mm256_mul_ps(m, k.beta1));
  v = _mm256_fmadd_ps(_mm256_mul_ps(k.one_minus_beta2, g), g, _mm256_mul_ps(v, k.beta2));
  const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), k.bc2_sqrt), k.eps);
  p = _mm256_add_ps(p, _mm256_div_ps(_mm256_mul_ps(k.neg_step_size, m), denom));
}

}  // namespace

DS_TARGET_AVX2 void AdamPieceAvx2(const AdamStepCoefficients& c, float* params,
                                  const float* grads, float* exp_avg, float* exp_avg_sq,
                                  int64_t n, uint16_t* bf16_out) {
  const Avx2Coefficients k{
      _mm256_set1_ps(c.beta1),         _mm256_set1_ps(c.one_minus_beta1),
      _mm256_set1_ps(c.beta2),         _mm256_set1_ps(c.one_minus_beta2),
      _mm256_set1_ps(c.neg_step_size), _mm256_set1_ps(c.bias_correction2_sqrt),
      _mm256_set1_ps(c.eps),           _mm256_set1_ps(c.weight_decay),
      _mm256_set1_ps(c.param_scale),
      _mm256_set1_ps(c.grad_scale)};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 p = _mm256_loadu_ps(params + i);
    __m256 m = _mm256_loadu_ps(exp_avg + i);
    __m256 v = _mm256_loadu_ps(exp_avg_sq + i);
    Step8(c, k, p, _mm256_loadu_ps(grads + i), m, v);
    _mm256_storeu_ps(params + i, p);
    _mm256_storeu_ps(exp_avg + i, m);
    _mm256_storeu_ps(exp_avg_sq + i, v);
    if (bf16_out != nullptr) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bf16_out + i), ToBf16(p));
    }
  }
  if (i == n) return;
  // The tail runs the same vector code on masked lanes, so an element's result
  // does not depend on where a piece boundary falls.
  const int64_t rest = n - i;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rest)), lane);
  __m256 p = _mm256_maskload_ps(params + i, mask);
  __m256 m = _mm256_maskload_ps(exp_avg + i, mask);
  __m256 v = _mm256_maskload_ps(exp_avg_sq + i, mask);
  Step8(c, k, p, _mm256_maskload_ps(grads + i, mask), m, v);
  _mm256_maskstore_ps(params + i, mask, p);
  _mm256_maskstore_ps(exp_avg + i, mask, m);
  _mm256_maskstore_ps(exp_avg_sq + i, mask, v);
  if (bf16_out != nullptr) {
    alignas(16) uint16_t tail[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(tail), ToBf16(p));
    for (int64_t j = 0; j < rest; ++j) bf16_out[i + j] = tail[j];
  }
}

}  // namespace dslaunch::kernels
