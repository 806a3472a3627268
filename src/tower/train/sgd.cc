#include "tower/train/optimizer.h"

namespace tower {
namespace {

// var -= lr * grad.
class Sgd final : public Optimizer {
 public:
  void init(const std::vector<Param>& params) override { slots_.init(params); }
  void apply(const std::vector<Param>& params, float lr, int64_t step) override {
    init(params);
    for (const Param& p : params) {
      float* var = p.value->data<float>();
      const float* grad = p.grad->data<float>();
      const int64_t n = p.value->numel();
      for (int64_t i = 0; i < n; ++i) var[i] -= lr * grad[i];
    }
  }
  std::vector<std::pair<std::string, Tensor*>> slots() override { return {}; }
  std::string name() const override { return "sgd"; }

 private:
  detail::SlotSet slots_{{}};  // none; only remembers the params to check later calls
};

}  // namespace

std::unique_ptr<Optimizer> detail::make_sgd() { return std::make_unique<Sgd>(); }

}  // namespace tower
