// Matrix product of rank-2 f32 tensors.
#pragma once

#include "tower/graph/graph.h"

namespace tower::ops {

enum class Transpose : uint8_t { no, yes };

struct MatMulAttrs {
  Transpose transpose_a = Transpose::no;
  Transpose transpose_b = Transpose::no;
};

// y (M, N) = op(a) op(b), where op(a) is a (M, K) or, transposed, a given as (K, M); likewise
// op(b) is b (K, N) or b given as (N, K). Op "MatMul".
Value matmul(const Scope& s, Value a, Value b, Transpose ta = Transpose::no,
             Transpose tb = Transpose::no);

}  // namespace tower::ops
