// CPU kernels of the loss family: one pass per row of the (N, K) logits, parallel over rows,
// sums in double. Rows are independent, so results do not depend on the thread count.
#include "tower/ops/nn_loss.h"

#include <cmath>

#include "tower/kernels/kernel.h"

namespace tower::cpu {
namespace {

constexpr int64_t kParallelMin = 16384;  // below this many elements one thread is faster

template <typename T>
T* output(const KernelIO& io, size_t index = 0) {
  return io.outputs[index].data<T>();
}

// Labels come from data files, so a bad one is a user error: report the first, by example.
void check_labels(const Node& node, const Tensor& labels, int64_t k) {
  const int32_t* p = labels.data<int32_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    if (p[i] < 0 || p[i] >= k)
      fail("{} ({}): label {} of example {} is outside [0, {}): the logits have {} classes",
           node.name, node.op, p[i], i, k, k);
}

// max of a row and sum(exp(x - max)), the pieces of a stable log-sum-exp.
struct RowStats {
  float max;
  double sum_exp;
};
RowStats row_stats(const float* x, int64_t k) {
  float m = x[0];
  for (int64_t j = 1; j < k; ++j) m = std::max(m, x[j]);
  double sum = 0;
  for (int64_t j = 0; j < k; ++j) sum += std::exp(x[j] - m);
  return {m, sum};
}

// The rows of a loss node: its (N, K) logits, its labels (checked), and its target's label
// smoothing and class weights (none: the plain one-hot target).
struct LossRows {
  int64_t n, k;
  const float* x;
  const int32_t* labels;
  double smoothing = 0;
  const float* weights = nullptr;
  LossRows(const Node& node, const KernelIO& io)
      : n(io.inputs[0].shape()[0]),
        k(io.inputs[0].shape()[1]),
        x(io.inputs[0].data<float>()),
        labels(io.inputs[1].data<int32_t>()) {
    check_labels(node, io.inputs[1], k);
    if (const auto* a = std::any_cast<ops::SoftmaxCrossEntropyAttrs>(&node.attrs)) {
      smoothing = a->label_smoothing;
      if (!a->class_weights.empty()) weights = a->class_weights.data();
    }
  }
  bool one_hot() const { return smoothing == 0 && !weights; }
  double weight(int64_t i) const { return weights ? weights[labels[i]] : 1.0; }
};

KernelRegistrar xent_kernel{
    "SparseSoftmaxCrossEntropyWithLogits", DeviceKind::cpu,
    simple_kernel([](const Node& node, const KernelIO& io) {
      const LossRows r(node, io);
      float* loss = output<float>(io);
#pragma omp parallel for schedule(static) if (r.n * r.k > kParallelMin)
      for (int64_t i = 0; i < r.n; ++i) {
        const float* row = r.x + i * r.k;
        RowStats st = row_stats(row, r.k);
        // logsumexp - x[label] = log(sum) - (x[label] - max): never forms max + log(sum).
        if (r.one_hot()) {
          loss[i] = static_cast<float>(std::log(st.sum_exp) - (row[r.labels[i]] - st.max));
          continue;
        }
        double mean = 0;  // of x - max over the row: the smoothed target's uniform part
        for (int64_t j = 0; j < r.k; ++j) mean += row[j] - st.max;
        mean /= static_cast<double>(r.k);
        const double e = r.smoothing;
        loss[i] =
            static_cast<float>(r.weight(i) * (std::log(st.sum_exp) -
                                              (1 - e) * (row[r.labels[i]] - st.max) - e * mean));
      }
    })};

KernelRegistrar xent_grad_kernel{
    "SparseSoftmaxXentGrad", DeviceKind::cpu,
    simple_kernel([](const Node& node, const KernelIO& io) {
      const LossRows r(node, io);
      const float* dy = io.inputs[2].data<float>();
      float* dx = output<float>(io);
#pragma omp parallel for schedule(static) if (r.n * r.k > kParallelMin)
      for (int64_t i = 0; i < r.n; ++i) {
        const float* row = r.x + i * r.k;
        float* drow = dx + i * r.k;
        RowStats st = row_stats(row, r.k);
        if (r.one_hot()) {
          float scale = static_cast<float>(dy[i] / st.sum_exp);
          for (int64_t j = 0; j < r.k; ++j) drow[j] = std::exp(row[j] - st.max) * scale;
          drow[r.labels[i]] -= dy[i];
          continue;
        }
        // w (softmax - target), target = (1 - e) one_hot + e / K.
        const double g = dy[i] * r.weight(i), e = r.smoothing;
        const double scale = g / st.sum_exp, uniform = g * e / static_cast<double>(r.k);
        for (int64_t j = 0; j < r.k; ++j)
          drow[j] = static_cast<float>(std::exp(row[j] - st.max) * scale - uniform);
        drow[r.labels[i]] -= static_cast<float>(g * (1 - e));
      }
    })};

KernelRegistrar softmax_kernel{"Softmax", DeviceKind::cpu,
                               simple_kernel([](const Node&, const KernelIO& io) {
                                 const Tensor& logits = io.inputs[0];
                                 int64_t k = logits.shape()[logits.shape().rank() - 1];
                                 int64_t rows = k == 0 ? 0 : logits.numel() / k;
                                 const float* x = logits.data<float>();
                                 float* y = output<float>(io);
#pragma omp parallel for schedule(static) if (logits.numel() > kParallelMin)
                                 for (int64_t i = 0; i < rows; ++i) {
                                   const float* row = x + i * k;
                                   float* out = y + i * k;
                                   float m = row[0];
                                   for (int64_t j = 1; j < k; ++j) m = std::max(m, row[j]);
                                   double sum = 0;
                                   for (int64_t j = 0; j < k; ++j) {
                                     out[j] = std::exp(row[j] - m);
                                     sum += out[j];
                                   }
                                   float inv = static_cast<float>(1.0 / sum);
                                   for (int64_t j = 0; j < k; ++j) out[j] *= inv;
                                 }
                               })};

KernelRegistrar softmax_grad_kernel{"SoftmaxGrad", DeviceKind::cpu,
                                    simple_kernel([](const Node&, const KernelIO& io) {
                                      const Tensor& y_t = io.inputs[0];
                                      int64_t k = y_t.shape()[y_t.shape().rank() - 1];
                                      int64_t rows = k == 0 ? 0 : y_t.numel() / k;
                                      const float* y = y_t.data<float>();
                                      const float* dy = io.inputs[1].data<float>();
                                      float* dx = output<float>(io);
#pragma omp parallel for schedule(static) if (y_t.numel() > kParallelMin)
                                      for (int64_t i = 0; i < rows; ++i) {
                                        const float* yr = y + i * k;
                                        const float* dyr = dy + i * k;
                                        double dot = 0;
                                        for (int64_t j = 0; j < k; ++j)
                                          dot += static_cast<double>(dyr[j]) * yr[j];
                                        float d = static_cast<float>(dot);
                                        for (int64_t j = 0; j < k; ++j)
                                          dx[i * k + j] = yr[j] * (dyr[j] - d);
                                      }
                                    })};

KernelRegistrar argmax_kernel{"ArgMax", DeviceKind::cpu,
                              simple_kernel([](const Node&, const KernelIO& io) {
                                const Tensor& x_t = io.inputs[0];
                                int64_t k = x_t.shape()[x_t.shape().rank() - 1];
                                int64_t rows = x_t.numel() / k;
                                const float* x = x_t.data<float>();
                                int32_t* out = output<int32_t>(io);
#pragma omp parallel for schedule(static) if (x_t.numel() > kParallelMin)
                                for (int64_t i = 0; i < rows; ++i) {
                                  const float* row = x + i * k;
                                  int64_t best = 0;
                                  for (int64_t j = 1; j < k; ++j)
                                    if (row[j] > row[best]) best = j;
                                  out[i] = static_cast<int32_t>(best);
                                }
                              })};

KernelRegistrar in_top_k_kernel{"InTopK", DeviceKind::cpu,
                                simple_kernel([](const Node& node, const KernelIO& io) {
                                  int64_t n = io.inputs[0].shape()[0], k = io.inputs[0].shape()[1];
                                  int64_t top = node.attr<ops::InTopKAttrs>().k;
                                  const float* x = io.inputs[0].data<float>();
                                  const int32_t* labels = io.inputs[1].data<int32_t>();
                                  float* out = output<float>(io);
#pragma omp parallel for schedule(static) if (n * k > kParallelMin)
                                  for (int64_t i = 0; i < n; ++i) {
                                    const float* row = x + i * k;
                                    int32_t label = labels[i];
                                    bool in = label >= 0 && label < k;
                                    int64_t larger = 0;
                                    for (int64_t j = 0; in && j < k; ++j) {
                                      in = std::isfinite(row[j]);
                                      larger += row[j] > row[label];
                                    }
                                    out[i] = in && larger < top ? 1.0f : 0.0f;
                                  }
                                })};

}  // namespace
}  // namespace tower::cpu
