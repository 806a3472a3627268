#pragma once

#include <vector>

#include "tower/graph/graph.h"

namespace tower {

// Reverse-mode automatic differentiation as a graph transformation: adds to the graph (under
// `scope`) the nodes computing d(loss)/d(x) for each x, using each op's registered gradient rule.
// Where a value fans out, its gradients are summed (AddN). `loss` must be a scalar. An x that
// the loss does not depend on gets an undefined Value.
std::vector<Value> gradients(const Scope& scope, Value loss, const std::vector<Value>& xs);

// General form: the sum over i of <ys[i], grad_ys[i]> is differentiated (TF's grad_ys), so any
// ys (not only scalars) can be differentiated given the gradients flowing into them.
std::vector<Value> gradients(const Scope& scope, const std::vector<Value>& ys,
                             const std::vector<Value>& xs, const std::vector<Value>& grad_ys);

// Sums values of one shape: the value itself for one, an AddN node for several.
Value add_n(const Scope& scope, const std::vector<Value>& values);

}  // namespace tower
