// The reference path: LibTorch's operations in LibTorch's order, one rounding
// per operation. Built with -ffp-contract=off (CMakeLists.txt) so that no
// compiler flag can fuse a multiply-add here and move it off that reference.
#include <cmath>

#include "kernels/bf16.h"
#include "kernels/cpu_adam_kernels.h"

namespace dslaunch::kernels {

void AdamPieceScalar(const AdamStepCoefficients& c, float* params, const float* grads,
                     float* exp_avg, float* exp_avg_sq, int64_t n, uint16_t* bf16_out) {
  for (int64_t i = 0; i < n; ++i) {
    float p = params[i];
    float g = grads[i] * c.grad_scale;             // grad.mul_(grad_scale)
    if (c.l2_decay) g = g + c.weight_decay * p;    // grad.add(p, wd)
    if (c.decoupled_decay) p = p * c.param_scale;  // p.mul_(1 - lr * wd)
    float m = exp_avg[i] * c.beta1;                // exp_avg.mul_(b1)
    m = m + c.one_minus_beta1 * g;                 //   .add_(g, 1 - b1)
    float v = exp_avg_sq[i] * c.beta2;             // exp_avg_sq.mul_(b2)
    v = v + c.one_minus_beta2 * g * g;             //   .addcmul_(g, g, 1 - b2)
    const float denom = std::sqrt(v) / c.bias_correction2_sqrt + c.eps;
    p = p + c.neg_step_size * m / denom;           // p.addcdiv_(m, denom, -step_size)
    params[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if (bf16_out != nullptr) bf16_out[i] = FloatToBf16(p);
  }
}

}  // namespace dslaunch::kernels
