#include "tower/train/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tower/models/model.h"
#include "tower/parallel/data_parallel.h"
#include "tower/train/ema.h"

namespace tower {
namespace {

// A variable and its gradient, with the Param the optimizers take.
struct Var {
  std::string name;
  Tensor value, grad;
  Var(std::string n, std::vector<float> v)
      : name(std::move(n)),
        value(Tensor::from_vector(Shape{static_cast<int64_t>(v.size())}, v)),
        grad(Shape{static_cast<int64_t>(v.size())}, DType::f32) {}
  Param param() { return {name, &value, &grad}; }
  void set_grad(std::vector<float> g) { std::memcpy(grad.data<float>(), g.data(), g.size() * 4); }
  float at(int64_t i) const { return value.data<float>()[i]; }
};

OptimizerConfig config(const std::string& name) {
  OptimizerConfig c;
  c.name = name;
  return c;
}

TEST(OptimizerTest, SgdSubtractsLrTimesGradient) {
  Var w("w", {1.0f, 2.0f});
  auto opt = make_optimizer(config("sgd"));
  EXPECT_EQ(opt->name(), "sgd");
  w.set_grad({0.5f, -1.0f});
  opt->apply({w.param()}, 0.1f, 0);
  EXPECT_NEAR(w.at(0), 0.95, 1e-6);
  EXPECT_NEAR(w.at(1), 2.1, 1e-6);
  opt->apply({w.param()}, 0.1f, 1);
  EXPECT_NEAR(w.at(0), 0.9, 1e-6);
  EXPECT_NEAR(w.at(1), 2.2, 1e-6);
  EXPECT_TRUE(opt->slots().empty());
}

TEST(OptimizerTest, MomentumAccumulatesLikeTensorFlow) {
  // momentum 0.9, lr 0.1, grads 1, 2, -1:
  //   accum 1 -> 2.9 -> 1.61;  var 1 - 0.1 = 0.9 -> 0.9 - 0.29 = 0.61 -> 0.61 - 0.161 = 0.449
  Var w("w", {1.0f});
  auto opt = make_optimizer(config("momentum"));
  EXPECT_EQ(opt->name(), "momentum");
  opt->init({w.param()});
  const float grads[] = {1, 2, -1};
  const double expected[] = {0.9, 0.61, 0.449};
  for (int s = 0; s < 3; ++s) {
    w.set_grad({grads[s]});
    opt->apply({w.param()}, 0.1f, s);
    EXPECT_NEAR(w.at(0), expected[s], 1e-6) << "step " << s;
  }
  auto slots = opt->slots();
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_EQ(slots[0].first, "w/Momentum");
  EXPECT_NEAR(slots[0].second->data<float>()[0], 1.61, 1e-6);
}

TEST(OptimizerTest, NesterovMomentum) {
  // var -= lr * (grad + momentum * accum), accum already updated:
  //   1 - 0.1 * (1 + 0.9) = 0.81;  0.81 - 0.1 * (2 + 0.9 * 2.9) = 0.349;
  //   0.349 - 0.1 * (-1 + 0.9 * 1.61) = 0.3041
  Var w("w", {1.0f});
  OptimizerConfig c = config("momentum");
  c.nesterov = true;
  auto opt = make_optimizer(c);
  const float grads[] = {1, 2, -1};
  const double expected[] = {0.81, 0.349, 0.3041};
  for (int s = 0; s < 3; ++s) {
    w.set_grad({grads[s]});
    opt->apply({w.param()}, 0.1f, s);
    EXPECT_NEAR(w.at(0), expected[s], 1e-6) << "step " << s;
  }
}

// Adam of Kingma & Ba with TensorFlow's epsilon, in double, one scalar.
struct AdamReference {
  double var, m = 0, v = 0;
  double b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0;
  void step(double g, double lr, int t) {
    var *= 1 - lr * wd;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double lr_t = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
    var -= lr_t * m / (std::sqrt(v) + eps);
  }
};

TEST(OptimizerTest, AdamMatchesTheReference) {
  Var w("w", {1.0f, -3.0f});
  auto opt = make_optimizer(config("adam"));
  EXPECT_EQ(opt->name(), "adam");
  AdamReference r0{1.0}, r1{-3.0};
  const float grads[3][2] = {{0.5f, -2.0f}, {0.25f, 1.0f}, {-1.0f, 0.125f}};
  for (int s = 0; s < 3; ++s) {
    w.set_grad({grads[s][0], grads[s][1]});
    opt->apply({w.param()}, 0.01f, s);
    r0.step(grads[s][0], 0.01, s + 1);
    r1.step(grads[s][1], 0.01, s + 1);
    EXPECT_NEAR(w.at(0), r0.var, 1e-6) << "step " << s;
    EXPECT_NEAR(w.at(1), r1.var, 1e-6) << "step " << s;
    // The first step of Adam moves each weight by lr in the direction of -grad.
    if (s == 0) {
      EXPECT_NEAR(w.at(0), 0.99, 1e-6);
      EXPECT_NEAR(w.at(1), -2.99, 1e-6);
    }
  }
  auto slots = opt->slots();
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[0].first, "w/m");
  EXPECT_EQ(slots[1].first, "w/v");
  EXPECT_NEAR(slots[0].second->data<float>()[0], r0.m, 1e-6);
  EXPECT_NEAR(slots[1].second->data<float>()[1], r1.v, 1e-6);
}

TEST(OptimizerTest, AdamWDecaysWeightsDecoupledFromTheGradient) {
  OptimizerConfig c = config("adamw");
  c.weight_decay = 0.1f;
  auto opt = make_optimizer(c);
  EXPECT_EQ(opt->name(), "adamw");
  Var w("w", {2.0f});
  AdamReference r{2.0};
  r.wd = 0.1;
  const float grads[] = {0.5f, 0.5f, -0.25f};
  for (int s = 0; s < 3; ++s) {
    w.set_grad({grads[s]});
    opt->apply({w.param()}, 0.01f, s);
    r.step(grads[s], 0.01, s + 1);
    EXPECT_NEAR(w.at(0), r.var, 1e-6) << "step " << s;
  }
  // Step 1 by hand: 2 * (1 - 0.01 * 0.1) = 1.998, then Adam's first step of 0.01.
  Var u("u", {2.0f});
  auto fresh = make_optimizer(c);
  u.set_grad({0.5f});
  fresh->apply({u.param()}, 0.01f, 0);
  EXPECT_NEAR(u.at(0), 1.988, 1e-6);
  // A zero gradient still decays the weight (the decay is not part of the gradient).
  Var z("z", {1.0f});
  auto third = make_optimizer(c);
  third->apply({z.param()}, 0.5f, 0);
  EXPECT_NEAR(z.at(0), 0.95, 1e-6);
}

TEST(OptimizerTest, SlotsRoundTripExactly) {
  for (const char* name : {"momentum", "adam", "adamw"}) {
    SCOPED_TRACE(name);
    OptimizerConfig c = config(name);
    if (c.name == "adamw") c.weight_decay = 0.01f;
    Var a("conv1/weights", {0.1f, -0.2f, 0.3f}), b("conv1/biases", {0.5f});
    auto opt = make_optimizer(c);
    opt->init({a.param(), b.param()});
    for (int s = 0; s < 2; ++s) {
      a.set_grad({0.3f * static_cast<float>(s + 1), -0.7f, 0.2f});
      b.set_grad({1.5f});
      opt->apply({a.param(), b.param()}, 0.05f, s);
    }
    // "Checkpoint" the variables and slots, restore them into a new optimizer, continue both.
    Var a2("conv1/weights", a.value.to_vector<float>()),
        b2("conv1/biases", b.value.to_vector<float>());
    auto restored = make_optimizer(c);
    restored->init({a2.param(), b2.param()});
    auto saved = opt->slots();
    auto into = restored->slots();
    ASSERT_EQ(saved.size(), into.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      EXPECT_EQ(saved[i].first, into[i].first);
      into[i].second->copy_from(*saved[i].second);
    }
    if (c.name == "momentum") {
      EXPECT_EQ(saved[0].first, "conv1/weights/Momentum");
      EXPECT_EQ(saved[1].first, "conv1/biases/Momentum");
    } else {
      EXPECT_EQ(saved[0].first, "conv1/weights/m");
      EXPECT_EQ(saved[1].first, "conv1/weights/v");
      EXPECT_EQ(saved[2].first, "conv1/biases/m");
      EXPECT_EQ(saved[3].first, "conv1/biases/v");
    }
    for (Var* v : {&a, &a2}) v->set_grad({-0.4f, 0.1f, 0.9f});
    for (Var* v : {&b, &b2}) v->set_grad({-0.5f});
    opt->apply({a.param(), b.param()}, 0.05f, 2);
    restored->apply({a2.param(), b2.param()}, 0.05f, 2);
    EXPECT_EQ(a.value.to_vector<float>(), a2.value.to_vector<float>());
    EXPECT_EQ(b.value.to_vector<float>(), b2.value.to_vector<float>());
  }
}

TEST(OptimizerTest, ApplyWithoutInitCreatesZeroSlots) {
  Var w("w", {1.0f, 1.0f});
  auto opt = make_optimizer(config("momentum"));
  EXPECT_TRUE(opt->slots().empty());
  w.set_grad({1.0f, -1.0f});
  opt->apply({w.param()}, 0.1f, 0);
  auto slots = opt->slots();
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_EQ(slots[0].second->to_vector<float>(), (std::vector<float>{1.0f, -1.0f}));
}

TEST(OptimizerTest, ApplyAfterInitAllocatesNothing) {
  for (const char* name : {"sgd", "momentum", "adam", "adamw"}) {
    SCOPED_TRACE(name);
    OptimizerConfig c = config(name);
    c.nesterov = true;
    if (c.name == "adamw") c.weight_decay = 0.01f;
    Var a("a", std::vector<float>(1000, 0.5f)), b("b", {1.0f, 2.0f});
    a.set_grad(std::vector<float>(1000, 0.1f));
    std::vector<Param> params = {a.param(), b.param()};
    auto opt = make_optimizer(c);
    opt->init(params);
    const int64_t before = allocator_for(Device{}).counters().num_allocations;
    for (int s = 0; s < 3; ++s) opt->apply(params, 0.01f, s);
    EXPECT_EQ(allocator_for(Device{}).counters().num_allocations, before);
  }
}

TEST(OptimizerTest, BadConfigsAreUserErrors) {
  auto message = [](const OptimizerConfig& c) -> std::string {
    try {
      make_optimizer(c);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  std::string m = message(config("rmsprop"));
  EXPECT_NE(m.find("'rmsprop'"), std::string::npos) << m;
  EXPECT_NE(m.find("sgd, momentum, adam, adamw"), std::string::npos) << m;

  OptimizerConfig c = config("momentum");
  c.momentum = 1.5f;
  m = message(c);
  EXPECT_NE(m.find("--momentum must be in [0, 1)"), std::string::npos) << m;

  c = config("adam");
  c.beta2 = 1.0f;
  m = message(c);
  EXPECT_NE(m.find("--beta2"), std::string::npos) << m;

  c = config("adam");
  c.epsilon = 0;
  m = message(c);
  EXPECT_NE(m.find("--epsilon must be > 0"), std::string::npos) << m;

  c = config("sgd");
  c.weight_decay = 0.1f;
  m = message(c);
  EXPECT_NE(m.find("only implemented by --optimizer adamw"), std::string::npos) << m;

  c = config("adamw");
  c.weight_decay = -1;
  m = message(c);
  EXPECT_NE(m.find("--weight_decay must be >= 0"), std::string::npos) << m;

  EXPECT_NO_THROW(validate(OptimizerConfig{}));
}

// Two allreduce towers of the mlp on a fixed batch of 16 (labels i % 10).
std::unique_ptr<DataParallel> two_towers(Tensor& images, Tensor& labels) {
  DataParallelOptions options;
  options.devices = {Device{DeviceKind::cpu, 0}, Device{DeviceKind::cpu, 1}};
  options.threads = {1, 1};
  options.seed = 2;
  images = Tensor(Shape{16, 1, 8, 8}, DType::f32);
  labels = Tensor(Shape{16}, DType::i32);
  for (int64_t i = 0; i < images.numel(); ++i)
    images.data<float>()[i] = static_cast<float>((i * 7) % 13) / 13.0f;
  for (int i = 0; i < 16; ++i) labels.data<int32_t>()[i] = i % 10;
  return std::make_unique<DataParallel>(
      Shape{1, 8, 8}, 16,
      [](const Scope& scope, Value x, Value y) {
        ModelOutputs out = get_model("mlp").build(scope, x, 10, Mode::train);
        return TowerOutputs{classification_loss(scope, out.logits, y).total_loss, {}, {}};
      },
      options);
}

// The route of the classic example: one optimizer on replica 0's params. Under allreduce the
// other replica would train on its initial weights without a word; the next step names the fix.
TEST(DataParallelOptimizerTest, AnUpdateOfOneReplicaIsAnErrorNamingTheFix) {
  Tensor images, labels;
  auto dp = two_towers(images, labels);
  ASSERT_EQ(dp->num_replicas(), 2);
  auto optimizer = make_optimizer({.name = "sgd"});
  std::vector<Param> params = replica_params(*dp, 0);
  dp->step(images, labels, 0);
  optimizer->apply(params, 0.1f, 0);
  try {
    dp->step(images, labels, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DataParallelOptimizer"), std::string::npos) << e.what();
  }
}

// DataParallelOptimizer updates every replica: they stay bitwise equal and the loss goes down.
TEST(DataParallelOptimizerTest, UpdatesEveryReplica) {
  Tensor images, labels;
  auto dp = two_towers(images, labels);
  DataParallelOptimizer optimizer(*dp, {.name = "momentum"});
  float first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    last = dp->step(images, labels, static_cast<uint64_t>(step)).loss;
    if (step == 0) first = last;
    optimizer.apply(0.05f, step);
    ASSERT_TRUE(dp->replicas_identical()) << "step " << step;
  }
  EXPECT_LT(last, 0.5f * first);
  EXPECT_EQ(optimizer.optimizer().slots().size(), optimizer.params().size());
}

// The update runs once, on replica 0, its blocks shared out over the towers' two threads with the
// moving average in the same pass, and is copied to replica 1: the bits of an optimizer of its own
// on each replica followed by the moving average (fc2's 32,768 weights are four blocks).
TEST(DataParallelOptimizerTest, GivesTheBitsOfAnOptimizerOnEachReplica) {
  for (const std::string name : {"sgd", "momentum", "adam"}) {
    SCOPED_TRACE(name);
    Tensor images, labels;
    auto dp = two_towers(images, labels);
    DataParallelOptimizer optimizer(*dp, config(name));
    auto own = make_optimizer(config(name));
    std::vector<Tensor> values;  // what one replica updating by itself holds
    std::vector<Param> own_params;
    for (const Param& p : optimizer.params()) values.push_back(p.value->clone());
    for (size_t k = 0; k < values.size(); ++k)
      own_params.push_back({optimizer.params()[k].name, &values[k], optimizer.params()[k].grad});
    ExponentialMovingAverage average(0.9f), own_average(0.9f);
    std::vector<std::pair<std::string, const Tensor*>> averaged, own_averaged;
    for (size_t k = 0; k < values.size(); ++k) {
      averaged.push_back({own_params[k].name, optimizer.params()[k].value});
      own_averaged.push_back({own_params[k].name, &values[k]});
    }
    average.init(averaged);
    own_average.init(own_averaged);
    for (int step = 0; step < 3; ++step) {
      dp->step(images, labels, static_cast<uint64_t>(step));
      own->apply(own_params, 0.05f, step);
      own_average.update(step + 1);
      const float one_minus_decay = 1.0f - average.decay_at(step + 1);
      optimizer.apply(0.05f, step, 0, [&](size_t k, int64_t begin, int64_t end) {
        average.update_range(k, begin, end, one_minus_decay);
      });
      for (size_t k = 0; k < values.size(); ++k) {
        const std::string& v = own_params[k].name;
        for (int r = 0; r < 2; ++r)
          ASSERT_EQ(std::memcmp(dp->replica(r).get(v).raw_data(), values[k].raw_data(),
                                values[k].nbytes()),
                    0)
              << v << " on replica " << r << " at step " << step;
        ASSERT_EQ(std::memcmp(average.shadow(v).raw_data(), own_average.shadow(v).raw_data(),
                              values[k].nbytes()),
                  0)
            << v << " at step " << step;
      }
    }
  }
}

// An update in pieces (start_step, then update over blocks in any order, each averaged right
// after) gives the bits of apply() followed by the moving average's update(), for every optimizer.
TEST(OptimizerTest, UpdatingInBlocksWithTheAverageGivesTheBitsOfAWholeUpdate) {
  for (const std::string name : {"sgd", "momentum", "adam", "adamw"}) {
    SCOPED_TRACE(name);
    OptimizerConfig c = config(name);
    if (name == "adamw") c.weight_decay = 0.01f;
    std::vector<float> init(20000), g(20000);
    for (size_t i = 0; i < init.size(); ++i) {
      init[i] = std::sin(0.37f * static_cast<float>(i));
      g[i] = std::cos(0.11f * static_cast<float>(i)) * 0.5f;
    }
    Var whole("w", init), pieces("w", init);
    auto a = make_optimizer(c), b = make_optimizer(c);
    ExponentialMovingAverage ema_a(0.99f), ema_b(0.99f);
    ema_a.init({{"w", &whole.value}});
    ema_b.init({{"w", &pieces.value}});
    for (int64_t step = 0; step < 3; ++step) {
      whole.set_grad(g);
      pieces.set_grad(g);
      a->apply({whole.param()}, 0.05f, step);
      ema_a.update(step + 1);
      const std::vector<Param> params{pieces.param()};
      b->start_step(params, 0.05f, step);
      const float one_minus_decay = 1.0f - ema_b.decay_at(step + 1);
      for (int64_t begin : {8192, 0, 16384}) {  // out of order, the last block short
        const int64_t end = std::min<int64_t>(begin + 8192, 20000);
        b->update(0, begin, end);
        ema_b.update_range(ema_b.index_of("w"), begin, end, one_minus_decay);
      }
    }
    EXPECT_EQ(std::memcmp(whole.value.raw_data(), pieces.value.raw_data(), 20000 * 4), 0);
    EXPECT_EQ(std::memcmp(ema_a.shadow("w").raw_data(), ema_b.shadow("w").raw_data(), 20000 * 4),
              0);
  }
}

}  // namespace
}  // namespace tower
