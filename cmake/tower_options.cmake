# Build options. Optional dependencies take AUTO (use when found), ON (required) or OFF.
set(TOWER_MPI AUTO CACHE STRING "Build the MPI communicator: AUTO|ON|OFF")
set(TOWER_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO|ON|OFF")
set(TOWER_NCCL AUTO CACHE STRING "Build the NCCL communicator: AUTO|ON|OFF")
set(TOWER_SANITIZE "" CACHE STRING "Sanitizer: empty, asan (ASan+UBSan) or tsan")
option(TOWER_WERROR "Treat warnings as errors" ON)
option(TOWER_BUILD_TESTS "Build the tests" ON)
option(TOWER_BUILD_BENCH "Build the benchmarks" ON)
