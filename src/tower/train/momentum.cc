#include "tower/train/optimizer.h"

namespace tower {
namespace {

// TensorFlow's MomentumOptimizer: accum = momentum * accum + grad; var -= lr * accum, or with
// Nesterov var -= lr * grad + lr * momentum * accum (using the new accum).
class Momentum final : public Optimizer {
 public:
  Momentum(float momentum, bool nesterov) : momentum_(momentum), nesterov_(nesterov) {}
  void init(const std::vector<Param>& params) override { slots_.init(params); }
  void start_step(const std::vector<Param>& params, float lr, int64_t step) override {
    init(params);
    params_ = &params;
    lr_ = lr;
  }
  void update(size_t k, int64_t begin, int64_t end) override {
    const float m = momentum_, lr = lr_;
    float* var = (*params_)[k].value->data<float>();
    const float* grad = (*params_)[k].grad->data<float>();
    float* accum = slots_.slot(k, 0).data<float>();
    if (nesterov_) {
      for (int64_t i = begin; i < end; ++i) {
        accum[i] = accum[i] * m + grad[i];
        var[i] -= grad[i] * lr + accum[i] * m * lr;
      }
    } else {
      for (int64_t i = begin; i < end; ++i) {
        accum[i] = accum[i] * m + grad[i];
        var[i] -= accum[i] * lr;
      }
    }
  }
  std::vector<std::pair<std::string, Tensor*>> slots() override { return slots_.named(); }
  std::string name() const override { return "momentum"; }

 private:
  float momentum_;
  bool nesterov_;
  detail::SlotSet slots_{{"Momentum"}};
  const std::vector<Param>* params_ = nullptr;
  float lr_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> detail::make_momentum(float momentum, bool nesterov) {
  return std::make_unique<Momentum>(momentum, nesterov);
}

}  // namespace tower
