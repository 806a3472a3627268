// The `tower` command line as a function, for a program that registers models of its own
// (ModelRegistrar) and then hands over: `int main(int argc, char** argv) { return
// tower::cli_main(argc, argv); }` gives it train, eval, bench, inspect, models and the other
// sub-commands, with their usual flags, for its models and the built-in ones.
#pragma once

namespace tower {

// Parses the command line, runs the sub-command and returns the process's exit code: 0, 1 for an
// error (one line on stderr), 2 for a malformed command line. May start the process again once
// (to set GOMP_SPINCOUNT before OpenMP loads).
int cli_main(int argc, char** argv);

}  // namespace tower
