#include "tower/train/optimizer.h"

namespace tower {
namespace {

// TensorFlow's MomentumOptimizer: accum = momentum * accum + grad; var -= lr * accum, or with
// Nesterov var -= lr * grad + lr * momentum * accum (using the new accum).
class Momentum final : public Optimizer {
 public:
  Momentum(float momentum, bool nesterov) : momentum_(momentum), nesterov_(nesterov) {}
  void init(const std::vector<Param>& params) override { slots_.init(params); }
  void apply(const std::vector<Param>& params, float lr, int64_t step) override {
    init(params);
    const float m = momentum_;
    for (size_t k = 0; k < params.size(); ++k) {
      float* var = params[k].value->data<float>();
      const float* grad = params[k].grad->data<float>();
      float* accum = slots_.slot(k, 0).data<float>();
      const int64_t n = params[k].value->numel();
      if (nesterov_) {
        for (int64_t i = 0; i < n; ++i) {
          accum[i] = accum[i] * m + grad[i];
          var[i] -= grad[i] * lr + accum[i] * m * lr;
        }
      } else {
        for (int64_t i = 0; i < n; ++i) {
          accum[i] = accum[i] * m + grad[i];
          var[i] -= accum[i] * lr;
        }
      }
    }
  }
  std::vector<std::pair<std::string, Tensor*>> slots() override { return slots_.named(); }
  std::string name() const override { return "momentum"; }

 private:
  float momentum_;
  bool nesterov_;
  detail::SlotSet slots_{{"Momentum"}};
};

}  // namespace

std::unique_ptr<Optimizer> detail::make_momentum(float momentum, bool nesterov) {
  return std::make_unique<Momentum>(momentum, nesterov);
}

}  // namespace tower
