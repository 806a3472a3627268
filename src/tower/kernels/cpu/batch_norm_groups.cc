// Training batch normalization, forward (FusedBatchNorm[+Relu]) and backward (FusedBatchNormGrad),
// as plain loops over groups of channels (a block of 8 or 16, or 16 or 8 of channels last), when x
// comes in a convolution's layout with no padding lanes. A group's statistics need only its own
// channels, so the groups are independent tasks (Kernel::tasks): unlike oneDNN's primitive, which
// splits its statistics over the team it was built for, these let a program run in contended
// mode. On a team (run()), the images of every group are shared out too.
//
// Either way the bits are the same, since the sums have one shape: per image, in f32 vectors (a
// lane per channel) over its plane, which stays in cache for a second look; then the images in
// order, in double. The forward pass takes each image's mean and sum of squared deviations and
// merges them (Chan et al.'s pairwise update), as accurate as two passes over the batch but with
// one; the backward pass sums dy and dy * (x - mean), both in one pass over the image.
#include <omp.h>

#include <cmath>
#include <optional>
#include <vector>

#include "tower/kernels/cpu/batch_norm.h"
#include "tower/kernels/cpu/clones.h"
#include "tower/kernels/cpu/dnnl_util.h"
#include "tower/ops/batch_norm.h"

// Helpers here return vectors by value; all are inlined, so no call passes one (GCC warns that
// such a return's ABI depends on the clone's instruction set).
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tower::cpu {
namespace {

// Where a group of `lanes` channels lies: at(n, g) is its first element in image n, and position
// (h, w) adds h * row + w * step.
struct ChannelGroups {
  int64_t images, channels, height, width, lanes;
  int64_t image, block, block_stride, row, step;  // ChannelBlocks' strides
  int64_t groups() const { return channels / lanes; }
  int64_t plane() const { return height * width; }
  int64_t at(int64_t n, int64_t group) const {
    const int64_t c = group * lanes;
    return n * image + c / block * block_stride + c % block;
  }
};

std::optional<ChannelGroups> channel_groups(const Shape& x, const Layout& layout) {
  if (x.rank() != 4 || layout.is_plain()) return std::nullopt;
  const auto blocks = channel_blocks(md_of(x, layout));
  const int64_t* s = blocks ? blocks->strides : nullptr;
  if (!blocks || blocks->block % 8 != 0 || x[1] % blocks->block != 0 || s[2] != x[3] * s[3])
    return std::nullopt;
  const int64_t lanes = blocks->block % 16 == 0 ? 16 : 8;
  return ChannelGroups{x[0], x[1], x[2], x[3], lanes, s[0], blocks->block, s[1], s[2], s[3]};
}

// What one image of one group computes; per-channel arrays start at the group's first channel.
struct ImageJob {
  enum class Kind { moments, normalize, grad_sums, grad } kind;
  ChannelGroups g;
  const float* x;
  const float* dy;  // grad_sums, grad
  const float* y;   // grad_sums, grad after a ReLU: its output (dy counts where it is > 0)
  float* out;       // y (normalize) or dx (grad)
  const float* a;   // normalize: scale; grad: mean, k_dy, k_x, k_1 (each `lanes` apart)
  const float* b;   // normalize: shift; grad_sums: mean
  bool relu;        // normalize
  double* sums;     // moments: mean, m2; grad_sums: sum dy, sum dy * (x - mean) (per image)
  const float* r;   // normalize: a residual added before the ReLU, or null
};

template <int L>
TOWER_ALWAYS_INLINE typename Vectors<L>::F vload(const float* p) {
  typename Vectors<L>::F v;
  load(v, p);
  return v;
}

// Calls f(offset) for every position of the plane from `at` (rows follow each other: the
// layouts here have no gaps).
template <typename Fn>
TOWER_ALWAYS_INLINE void each_position(const ChannelGroups& g, int64_t at, const Fn& f) {
  const int64_t end = at + g.plane() * g.step, step = g.step;
  for (int64_t i = at; i < end; i += step) f(i);
}

// sum = the sum over the plane of what add(offset, acc) adds to acc, in four interleaved f32
// accumulators (a sum's latency would otherwise bound the loop) added at the end.
template <typename F, typename Fn>
TOWER_ALWAYS_INLINE void plane_sum(const ChannelGroups& g, int64_t at, F& sum, const Fn& add) {
  const int64_t positions = g.plane(), step = g.step;
  F acc[4] = {};
  int64_t p = 0;
  for (; p + 4 <= positions; p += 4)
    for (int k = 0; k < 4; ++k) add(at + (p + k) * step, acc[k]);
  for (; p < positions; ++p) add(at + p * step, acc[0]);
  sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// Two such sums in one pass over the plane, each with the same accumulators and order as
// plane_sum's: add(offset, acc0, acc1) adds to both.
template <typename F, typename Fn>
TOWER_ALWAYS_INLINE void plane_sums(const ChannelGroups& g, int64_t at, F& sum0, F& sum1,
                                    const Fn& add) {
  const int64_t positions = g.plane(), step = g.step;
  F acc0[4] = {}, acc1[4] = {};
  int64_t p = 0;
  for (; p + 4 <= positions; p += 4)
    for (int k = 0; k < 4; ++k) add(at + (p + k) * step, acc0[k], acc1[k]);
  for (; p < positions; ++p) add(at + p * step, acc0[0], acc1[0]);
  sum0 = (acc0[0] + acc0[1]) + (acc0[2] + acc0[3]);
  sum1 = (acc1[0] + acc1[1]) + (acc1[2] + acc1[3]);
}

// (Everything the loops read is copied into locals first: the stores, memcpy underneath, may
// alias any memory, and would have the job's fields reloaded at every position.)
template <int L>
TOWER_ALWAYS_INLINE void run_image(const ImageJob& j, int64_t n, int64_t group) {
  using F = typename Vectors<L>::F;
  const ChannelGroups g = j.g;
  const float* const x = j.x;
  const float* const dy = j.dy;
  float* const out = j.out;
  const int64_t at = g.at(n, group);
  double* const sums = j.sums + (n * g.channels + group * L) * 2;  // [image][channel][2]
  const float* const y = j.y;
  F s0{}, s1{};
  // dy, or ReLU's gradient of it (0 where the ReLU's output is not positive)
  auto masked_dy = [&](int64_t i, F& d) {
    load(d, dy + i);
    if (y != nullptr) d = vload<L>(y + i) > F{} ? d : F{};
  };
  switch (j.kind) {
    case ImageJob::Kind::moments: {
      plane_sum(g, at, s0, [&](int64_t i, F& acc) { acc += vload<L>(x + i); });
      const F mean = s0 / static_cast<float>(g.plane());
      plane_sum(g, at, s1, [&](int64_t i, F& acc) {
        const F d = vload<L>(x + i) - mean;
        acc += d * d;
      });
      for (int l = 0; l < L; ++l) sums[2 * l] = mean[l], sums[2 * l + 1] = s1[l];
      return;
    }
    case ImageJob::Kind::normalize: {
      const F scale = vload<L>(j.a), shift = vload<L>(j.b);
      const float* const r = j.r;
      if (r != nullptr)  // (rounded as the kernels apart: the batch norm's y, then y + r)
        each_position(g, at, [&](int64_t i) {
          const F v = vload<L>(x + i) * scale + shift + vload<L>(r + i);
          store(out + i, v > F{} ? v : F{});
        });
      else if (j.relu)
        each_position(g, at, [&](int64_t i) {
          const F v = vload<L>(x + i) * scale + shift;
          store(out + i, v > F{} ? v : F{});
        });
      else
        each_position(g, at, [&](int64_t i) { store(out + i, vload<L>(x + i) * scale + shift); });
      return;
    }
    case ImageJob::Kind::grad_sums: {
      const F mean = vload<L>(j.b);
      plane_sums(g, at, s0, s1, [&](int64_t i, F& acc0, F& acc1) {
        F d;
        masked_dy(i, d);
        acc0 += d;
        acc1 += d * (vload<L>(x + i) - mean);
      });
      for (int l = 0; l < L; ++l) sums[2 * l] = s0[l], sums[2 * l + 1] = s1[l];
      return;
    }
    case ImageJob::Kind::grad: {
      const F mean = vload<L>(j.a), k_dy = vload<L>(j.a + L), k_x = vload<L>(j.a + 2 * L),
              k_1 = vload<L>(j.a + 3 * L);
      each_position(g, at, [&](int64_t i) {
        F d;
        masked_dy(i, d);
        store(out + i, k_dy * d + k_x * (vload<L>(x + i) - mean) + k_1);
      });
      return;
    }
  }
}
TOWER_ALWAYS_INLINE void bn_image_body(const ImageJob& job, int64_t n, int64_t group) {
  if (job.g.lanes == 16)
    run_image<16>(job, n, group);
  else
    run_image<8>(job, n, group);
}
TOWER_CPU_VARIANTS(bn_image, (const ImageJob& job, int64_t n, int64_t group), (job, n, group))

// A kernel over (image, group) jobs in two phases: sums per image, then (after each group's
// images are merged in order, on one thread) the writing pass. Tasks are the groups, each both
// phases over all its images; run() shares the (image, group) pairs of each phase over the team.
class GroupKernel : public Kernel {
 public:
  GroupKernel(const Node& node, const KernelContext& context, ChannelGroups groups, Layout layout)
      : node_(node),
        g_(groups),
        layout_(std::move(layout)),
        team_(context.num_threads),
        epsilon_(node.attr<ops::BatchNormAttrs>().epsilon) {}

  // Per image and channel two sums; per channel 4 factors for the writing pass.
  size_t scratch_bytes() const override {
    return align64(static_cast<size_t>(g_.images * g_.channels * 2) * sizeof(double)) +
           static_cast<size_t>(g_.channels * 4) * sizeof(float);
  }
  // The jobs of both phases, once: the buffers are fixed from here on.
  void bind(const KernelIO& io) override {
    jobs_.clear();
    for (int first = 1; first >= 0; --first)
      for (int64_t group = 0; group < g_.groups(); ++group)
        jobs_.push_back(job(io, first == 1, group));
  }
  Tasks tasks() const override { return Tasks::split(static_cast<int>(g_.groups())); }
  void run_task(const KernelIO& io, int group, int) override {
    for (int64_t n = 0; n < g_.images; ++n) bn_image(sums_job(group), n, group);
    merge(io, group);
    // (the writing pass backwards: the last images' data is still in cache)
    for (int64_t n = g_.images - 1; n >= 0; --n) bn_image(writing_job(group), n, group);
  }
  void run(const KernelIO& io) override {
    const int64_t groups = g_.groups(), pairs = g_.images * groups;
#pragma omp parallel num_threads(team_) if (team_ > 1)
    {
      // (each thread writes the pairs it summed, last first: they are still in its cache)
      const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
      const int64_t begin = pairs * t / threads, end = pairs * (t + 1) / threads;
      for (int64_t p = begin; p < end; ++p) bn_image(sums_job(p % groups), p / groups, p % groups);
#pragma omp barrier
#pragma omp for schedule(static)
      for (int64_t group = 0; group < groups; ++group) merge(io, group);
      for (int64_t p = end - 1; p >= begin; --p)
        bn_image(writing_job(p % groups), p / groups, p % groups);
    }
  }

 protected:
  // The job of the sums' phase (`first`) or of the writing one, for `group`.
  virtual ImageJob job(const KernelIO& io, bool first, int64_t group) const = 0;
  // The group's statistics from its images' sums, and the writing pass's factors.
  virtual void merge(const KernelIO& io, int64_t group) const = 0;

  double* sums(const KernelIO& io) const { return static_cast<double*>(io.scratch); }
  float* factors(const KernelIO& io) const {
    return reinterpret_cast<float*>(
        static_cast<char*>(io.scratch) +
        align64(static_cast<size_t>(g_.images * g_.channels * 2) * sizeof(double)));
  }

  const Node& node_;
  ChannelGroups g_;
  Layout layout_;  // x's (and y's, dy's, dx's)
  int team_;
  float epsilon_;

 private:
  const ImageJob& sums_job(int64_t group) const { return jobs_[static_cast<size_t>(group)]; }
  const ImageJob& writing_job(int64_t group) const {
    return jobs_[static_cast<size_t>(g_.groups() + group)];
  }
  std::vector<ImageJob> jobs_;  // [sums, writing][group], from bind()
};

// Inputs (x, gamma, beta, moving_mean, moving_var) -> (y, mean, variance).
// FusedBatchNorm+Add+Relu: input 5, in x's layout, is added to y before the ReLU.
class BatchNormGroups : public GroupKernel {
 public:
  BatchNormGroups(const Node& node, const KernelContext& context, ChannelGroups groups, bool relu)
      : GroupKernel(node, context, groups, context.input_layout(0)),
        relu_(relu),
        residual_(node.inputs.size() > 5) {}
  Layout input_layout(int i) const override {
    return i == 0 || (residual_ && i == 5) ? layout_ : Layout{};
  }
  Layout output_layout(int o) const override { return o == 0 ? layout_ : Layout{}; }

 private:
  ImageJob job(const KernelIO& io, bool first, int64_t group) const override {
    float* f = factors(io) + group * g_.lanes * 2;  // scale, shift
    return {first ? ImageJob::Kind::moments : ImageJob::Kind::normalize,
            g_,
            io.inputs[0].data<float>(),
            nullptr,
            nullptr,
            io.outputs[0].data<float>(),
            f,
            f + g_.lanes,
            relu_,
            sums(io),
            residual_ ? io.inputs[5].data<float>() : nullptr};
  }
  void merge(const KernelIO& io, int64_t group) const override {
    float* f = factors(io) + group * g_.lanes * 2;
    for (int64_t l = 0; l < g_.lanes; ++l) {
      const int64_t c = group * g_.lanes + l;
      double count = 0, mean = 0, m2 = 0;
      for (int64_t n = 0; n < g_.images; ++n) {
        const double* s = sums(io) + (n * g_.channels + c) * 2;
        const double plane = static_cast<double>(g_.plane()), delta = s[0] - mean;
        const double total = count + plane;
        mean += delta * plane / total;
        m2 += s[1] + delta * delta * count * plane / total;
        count = total;
      }
      const double var = m2 / count;
      const double scale = io.inputs[1].data<float>()[c] / std::sqrt(var + epsilon_);
      io.outputs[1].data<float>()[c] = static_cast<float>(mean);
      io.outputs[2].data<float>()[c] = static_cast<float>(var);
      f[l] = static_cast<float>(scale);
      f[g_.lanes + l] = static_cast<float>(io.inputs[2].data<float>()[c] - mean * scale);
    }
  }
  bool relu_, residual_;
};

// Inputs (dy, x, gamma, beta, mean, variance) -> (dx, dgamma, dbeta): dbeta = sum dy, dgamma =
// sum dy * xhat, dx = gamma / sigma * (dy - dbeta / M - xhat * dgamma / M), with xhat = (x -
// mean) / sigma and sigma = sqrt(var + epsilon). ReluGrad+FusedBatchNormGrad (inputs dy, the
// ReLU's output y, then the same): dy where y > 0, else 0, as ReluGrad gives it.
class BatchNormGradGroups : public GroupKernel {
 public:
  BatchNormGradGroups(const Node& node, const KernelContext& context, ChannelGroups groups,
                      bool relu)
      : GroupKernel(node, context, groups, context.input_layout(relu ? 2 : 1)), r_(relu ? 1 : 0) {}
  Layout input_layout(int i) const override { return i <= 1 + r_ ? layout_ : Layout{}; }
  Layout output_layout(int o) const override { return o == 0 ? layout_ : Layout{}; }

 private:
  const float* in(const KernelIO& io, int i) const {  // input i of the unfused gradient (i > 0)
    return io.inputs[static_cast<size_t>(i + r_)].data<float>();
  }
  ImageJob job(const KernelIO& io, bool first, int64_t group) const override {
    const int64_t c = group * g_.lanes;
    return {first ? ImageJob::Kind::grad_sums : ImageJob::Kind::grad,
            g_,
            in(io, 1),
            io.inputs[0].data<float>(),
            r_ ? io.inputs[1].data<float>() : nullptr,
            io.outputs[0].data<float>(),
            factors(io) + c * 4,  // mean, k_dy, k_x, k_1
            in(io, 4) + c,
            false,
            sums(io),
            nullptr};
  }
  // dx = k_dy * dy + k_x * (x - mean) + k_1.
  void merge(const KernelIO& io, int64_t group) const override {
    float* f = factors(io) + group * g_.lanes * 4;
    const auto count = static_cast<double>(g_.images * g_.plane());
    for (int64_t l = 0; l < g_.lanes; ++l) {
      const int64_t c = group * g_.lanes + l;
      double sum_dy = 0, sum_dy_xc = 0;
      for (int64_t n = 0; n < g_.images; ++n) {
        const double* s = sums(io) + (n * g_.channels + c) * 2;
        sum_dy += s[0];
        sum_dy_xc += s[1];
      }
      const double gamma = in(io, 2)[c];
      const double rstd = 1.0 / std::sqrt(static_cast<double>(in(io, 5)[c]) + epsilon_);
      io.outputs[1].data<float>()[c] = static_cast<float>(sum_dy_xc * rstd);
      io.outputs[2].data<float>()[c] = static_cast<float>(sum_dy);
      f[l] = in(io, 4)[c];
      f[g_.lanes + l] = static_cast<float>(gamma * rstd);
      f[2 * g_.lanes + l] = static_cast<float>(-gamma * rstd * rstd * rstd * sum_dy_xc / count);
      f[3 * g_.lanes + l] = static_cast<float>(-gamma * rstd * sum_dy / count);
    }
  }
  int r_;  // 1 with the ReLU's output as input 1, else 0
};

bool training(const Node& node) {
  return node.attr<ops::BatchNormAttrs>().mode == ops::BatchNormMode::training;
}

}  // namespace

std::unique_ptr<Kernel> make_batch_norm_groups(const Node& node, const KernelContext& context,
                                               bool relu) {
  auto groups = channel_groups(node.inputs[0].shape(), context.input_layout(0));
  if (!training(node) || !groups) return nullptr;
  return std::make_unique<BatchNormGroups>(node, context, *groups, relu);
}

std::unique_ptr<Kernel> make_batch_norm_grad_groups(const Node& node, const KernelContext& context,
                                                    bool relu) {
  // dy (and y) come in x's layout or are converted to it.
  const int x = relu ? 2 : 1;
  auto groups =
      channel_groups(node.inputs[static_cast<size_t>(x)].shape(), context.input_layout(x));
  if (!training(node) || !groups) return nullptr;
  return std::make_unique<BatchNormGradGroups>(node, context, *groups, relu);
}

}  // namespace tower::cpu
