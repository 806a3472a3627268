#include <cmath>

#include "tower/train/optimizer.h"

namespace tower {
namespace {

// Adam as in TensorFlow (Kingma & Ba, section 2, with "epsilon hat"), t = step + 1:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   var -= lr_t m / (sqrt(v) + eps),  lr_t = lr sqrt(1 - b2^t) / (1 - b1^t)
// AdamW (Loshchilov & Hutter, as PyTorch's AdamW) first decays the weights, decoupled from the
// gradient: var *= 1 - lr * weight_decay.
class Adam final : public Optimizer {
 public:
  // name: "adam", or "adamw" with its decoupled weight decay.
  Adam(std::string name, float beta1, float beta2, float epsilon, float weight_decay)
      : name_(std::move(name)),
        beta1_(beta1),
        beta2_(beta2),
        epsilon_(epsilon),
        weight_decay_(weight_decay) {}
  void init(const std::vector<Param>& params) override { slots_.init(params); }
  void start_step(const std::vector<Param>& params, float lr, int64_t step) override {
    init(params);
    TOWER_CHECK_MSG(step >= 0, "negative optimizer step {}", step);
    params_ = &params;
    // The powers come from the step (not from state kept across steps), so a resumed run
    // computes the same bits.
    const double t = static_cast<double>(step) + 1.0;
    const double b1_power = std::pow(static_cast<double>(beta1_), t);
    const double b2_power = std::pow(static_cast<double>(beta2_), t);
    lr_t_ =
        static_cast<float>(static_cast<double>(lr) * std::sqrt(1.0 - b2_power) / (1.0 - b1_power));
    decay_ = 1.0f - lr * weight_decay_;
  }
  void update(size_t k, int64_t begin, int64_t end) override {
    const float lr_t = lr_t_, decay = decay_, eps = epsilon_;
    const float one_minus_b1 = 1.0f - beta1_;
    const float one_minus_b2 = 1.0f - beta2_;
    float* var = (*params_)[k].value->data<float>();
    const float* grad = (*params_)[k].grad->data<float>();
    float* m = slots_.slot(k, 0).data<float>();
    float* v = slots_.slot(k, 1).data<float>();
    if (weight_decay_ != 0.0f)
      for (int64_t i = begin; i < end; ++i) var[i] *= decay;
    for (int64_t i = begin; i < end; ++i) {
      const float g = grad[i];
      m[i] += (g - m[i]) * one_minus_b1;
      v[i] += (g * g - v[i]) * one_minus_b2;
      var[i] -= m[i] * lr_t / (std::sqrt(v[i]) + eps);
    }
  }
  std::vector<std::pair<std::string, Tensor*>> slots() override { return slots_.named(); }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  float beta1_, beta2_, epsilon_, weight_decay_;
  detail::SlotSet slots_{{"m", "v"}};
  const std::vector<Param>* params_ = nullptr;
  float lr_t_ = 0, decay_ = 1;  // of the step under way
};

}  // namespace

std::unique_ptr<Optimizer> detail::make_adam(float beta1, float beta2, float epsilon) {
  return std::make_unique<Adam>("adam", beta1, beta2, epsilon, 0.0f);
}

std::unique_ptr<Optimizer> detail::make_adamw(float beta1, float beta2, float epsilon,
                                              float weight_decay) {
  return std::make_unique<Adam>("adamw", beta1, beta2, epsilon, weight_decay);
}

}  // namespace tower
