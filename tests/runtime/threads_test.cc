// Kernels are built for the team that will run them: oneDNN fixes a primitive's thread count when
// it is created, so a Program built on a thread with another team size must build its kernels
// with its own (a 1-thread tower once ran its convolutions on every core).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tower/core/denormals.h"
#include "tower/graph/op_registry.h"
#include "tower/kernels/kernel.h"
#include "tower/runtime/program.h"

namespace tower {
namespace {

int threads_at_creation = 0, threads_at_run = 0;

// A test-only op whose kernel notes the team size when it is made and when it runs.
OpRegistrar probe_op{{"ThreadsProbe", [](const Node& node) {
                        return std::vector<TensorSpec>{node.inputs[0].spec()};
                      }}};
KernelRegistrar probe_kernel{"ThreadsProbe", DeviceKind::cpu,
                             [](const Node& node, const KernelContext& context) {
                               threads_at_creation = kernel_threads();
                               return simple_kernel([](const Node&, const KernelIO& io) {
                                 threads_at_run = kernel_threads();
                                 const_cast<Tensor&>(io.outputs[0]).copy_from(io.inputs[0]);
                               })(node, context);
                             }};

// A program of one probe node (op `op`, on an x of 4 floats) for a team of `threads`.
struct ProbeProgram {
  Graph graph;
  VariableStore variables;
  std::unique_ptr<Program> program;
  ProbeProgram(const std::string& op, int threads) {
    Scope scope(graph);
    Value y = scope.op(op, {scope.placeholder("x", Shape{4})});
    program = std::make_unique<Program>(graph, std::vector<Value>{y}, variables,
                                        ProgramOptions{Device{}, threads});
  }
};

TEST(KernelThreadsTest, ProgramsBuildAndRunKernelsWithTheirOwnTeam) {
  KernelThreadsScope caller(3);  // the building thread's own team
  for (int threads : {1, 2}) {
    ProbeProgram probe("ThreadsProbe", threads);
    Program& program = *probe.program;
    EXPECT_EQ(threads_at_creation, threads);
    EXPECT_EQ(kernel_threads(), 3) << "the building thread keeps its team";
    program.run();
    EXPECT_EQ(threads_at_run, threads);
    EXPECT_EQ(kernel_threads(), 3) << "and after a run";
  }
}

// Subnormals as zero (core/denormals.h) on every thread that runs a kernel, team members included,
// so that a result never depends on which member computed it; the caller's own mode comes back.
std::vector<char> members_zero_denormals;
KernelRegistrar denormals_probe_kernel{
    "DenormalsProbe", DeviceKind::cpu, [](const Node& node, const KernelContext& context) {
      const int team = context.num_threads;
      return simple_kernel([team](const Node&, const KernelIO& io) {
        members_zero_denormals.assign(static_cast<size_t>(team), 0);
        run_on_team(team, [](int member) {
          members_zero_denormals[static_cast<size_t>(member)] = denormals_are_zero();
        });
        const_cast<Tensor&>(io.outputs[0]).copy_from(io.inputs[0]);
      })(node, context);
    }};
OpRegistrar denormals_probe_op{{"DenormalsProbe", [](const Node& node) {
                                  return std::vector<TensorSpec>{node.inputs[0].spec()};
                                }}};

TEST(KernelThreadsTest, KernelsRunWithSubnormalsAsZeroOnEveryMember) {
  ASSERT_FALSE(denormals_are_zero()) << "the test thread starts in the default mode";
  for (int threads : {1, 2, 3}) {
    ProbeProgram probe("DenormalsProbe", threads);
    probe.program->run();
    ASSERT_EQ(members_zero_denormals.size(), static_cast<size_t>(threads));
    for (int m = 0; m < threads; ++m)
      EXPECT_TRUE(members_zero_denormals[static_cast<size_t>(m)])
          << "member " << m << " of " << threads;
    EXPECT_FALSE(denormals_are_zero()) << "the caller's mode is back";
  }
}

}  // namespace
}  // namespace tower
