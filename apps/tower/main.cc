// The `tower` binary: the built-in models and the command line (tower/cli.h).
#include "tower/cli.h"

int main(int argc, char** argv) { return tower::cli_main(argc, argv); }
