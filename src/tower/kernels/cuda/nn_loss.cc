// CUDA kernels of the loss family (nn_loss.cu): Softmax, SoftmaxGrad, the sparse softmax
// cross-entropy and its gradient, ArgMax and InTopK, as the CPU kernels compute them. One
// difference: a label outside [0, K) cannot stop the step without synchronizing the stream, so
// the GPU gives a NaN loss (and gradient row) for it, as TensorFlow's GPU kernel does; the NaN
// guard of the training loop then stops the run.
#include "tower/kernels/cuda/nn_loss.h"

#include "tower/kernels/cuda/cuda_util.h"
#include "tower/ops/nn_loss.h"

namespace tower::cuda {
namespace {

// The last axis and the number of rows of x.
void rows_of(const Tensor& x, int64_t& rows, int64_t& k) {
  k = x.shape()[x.shape().rank() - 1];
  rows = k == 0 ? 0 : x.numel() / k;
}

KernelRegistrar softmax{"Softmax", DeviceKind::cuda,
                        stream_kernel([](const Node&, const KernelIO& io, cudaStream_t s) {
                          int64_t rows, k;
                          rows_of(io.inputs[0], rows, k);
                          launch_softmax(io.inputs[0].data<float>(), output_of(io), rows, k, s);
                        })};

// (y, dy) -> dx
KernelRegistrar softmax_grad{"SoftmaxGrad", DeviceKind::cuda,
                             stream_kernel([](const Node&, const KernelIO& io, cudaStream_t s) {
                               int64_t rows, k;
                               rows_of(io.inputs[0], rows, k);
                               launch_softmax_grad(io.inputs[0].data<float>(),
                                                   io.inputs[1].data<float>(), output_of(io), rows,
                                                   k, s);
                             })};

// Label smoothing and class weights have CPU kernels only so far: a GPU tower refuses them.
void refuse_target_attrs(const Node& node) {
  if (std::any_cast<ops::SoftmaxCrossEntropyAttrs>(&node.attrs) != nullptr)
    fail("{} ({}): --label_smoothing and --class_weights run on CPU towers only so far", node.name,
         node.op);
}

// (logits, labels) -> loss
KernelRegistrar xent{"SparseSoftmaxCrossEntropyWithLogits", DeviceKind::cuda,
                     stream_kernel([](const Node& node, const KernelIO& io, cudaStream_t s) {
                       refuse_target_attrs(node);
                       const Shape& logits = io.inputs[0].shape();
                       launch_sparse_xent(io.inputs[0].data<float>(), io.inputs[1].data<int32_t>(),
                                          output_of(io), logits[0], logits[1], s);
                     })};

// (logits, labels, dy) -> dlogits
KernelRegistrar xent_grad{"SparseSoftmaxXentGrad", DeviceKind::cuda,
                          stream_kernel([](const Node& node, const KernelIO& io, cudaStream_t s) {
                            refuse_target_attrs(node);
                            const Shape& logits = io.inputs[0].shape();
                            launch_sparse_xent_grad(
                                io.inputs[0].data<float>(), io.inputs[1].data<int32_t>(),
                                io.inputs[2].data<float>(), output_of(io), logits[0], logits[1], s);
                          })};

KernelRegistrar argmax{
    "ArgMax", DeviceKind::cuda, stream_kernel([](const Node&, const KernelIO& io, cudaStream_t s) {
      int64_t rows, k;
      rows_of(io.inputs[0], rows, k);
      launch_argmax(io.inputs[0].data<float>(), output_of<int32_t>(io), rows, k, s);
    })};

// (logits, labels) -> (N,) f32
KernelRegistrar in_top_k{"InTopK", DeviceKind::cuda,
                         stream_kernel([](const Node& node, const KernelIO& io, cudaStream_t s) {
                           const Shape& logits = io.inputs[0].shape();
                           launch_in_top_k(io.inputs[0].data<float>(), io.inputs[1].data<int32_t>(),
                                           output_of(io), logits[0], logits[1],
                                           node.attr<ops::InTopKAttrs>().k, s);
                         })};

}  // namespace
}  // namespace tower::cuda
