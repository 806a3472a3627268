#include "tower/train/optimizer.h"

namespace tower {
namespace {

// var -= lr * grad.
class Sgd final : public Optimizer {
 public:
  void init(const std::vector<Param>& params) override { slots_.init(params); }
  void start_step(const std::vector<Param>& params, float lr, int64_t step) override {
    init(params);
    params_ = &params;
    lr_ = lr;
  }
  void update(size_t k, int64_t begin, int64_t end) override {
    const Param& p = (*params_)[k];
    float* var = p.value->data<float>();
    const float* grad = p.grad->data<float>();
    const float lr = lr_;
    for (int64_t i = begin; i < end; ++i) var[i] -= lr * grad[i];
  }
  std::vector<std::pair<std::string, Tensor*>> slots() override { return {}; }
  std::string name() const override { return "sgd"; }

 private:
  detail::SlotSet slots_{{}};  // none; only remembers the params to check later calls
  const std::vector<Param>* params_ = nullptr;
  float lr_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> detail::make_sgd() { return std::make_unique<Sgd>(); }

}  // namespace tower
