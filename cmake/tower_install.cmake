# The installed package: `cmake --install build --prefix P` puts libtower.so (every layer and the
# CLI's sub-commands, linked whole), the public headers (tower/tower.h and what it includes, plus
# the internal headers those include) and a CMake package under P, so that a project outside the
# tree does
#   find_package(tower CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE tower::tower)
# oneDNN, OpenMP, ONNX, MPI and CUDA are linked into libtower privately; the package asks only for the
# libraries the public headers use (fmt, nlohmann_json).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(layers tower_cli tower_train tower_parallel tower_runtime tower_models tower_nn tower_kernels
           tower_ops tower_data tower_io tower_graph tower_core)
set(whole)
foreach(layer ${layers})
  if(TARGET ${layer})
    list(APPEND whole ${layer})
  endif()
endforeach()
file(WRITE ${CMAKE_BINARY_DIR}/tower_shared.cc "// libtower: the layers' objects, linked whole.\n")
add_library(tower_shared SHARED ${CMAKE_BINARY_DIR}/tower_shared.cc)
# Each layer's archive once, whole (through target_link_libraries CMake would repeat the archives
# that layers link to each other); then what the layers link privately.
set(archives)
foreach(layer ${whole})
  list(APPEND archives $<TARGET_FILE:${layer}>)
endforeach()
add_dependencies(tower_shared ${whole})
target_link_options(tower_shared PRIVATE "LINKER:--whole-archive" ${archives}
                    "LINKER:--no-whole-archive" "LINKER:--exclude-libs,libcudart_static.a")
set_property(TARGET tower_shared APPEND PROPERTY LINK_DEPENDS ${archives})
set(private_libs DNNL::dnnl OpenMP::OpenMP_CXX ZLIB::ZLIB PkgConfig::TURBOJPEG PkgConfig::SPNG onnx
                 fmt::fmt Threads::Threads ${CMAKE_DL_LIBS})
if(TOWER_HAVE_MPI)
  list(APPEND private_libs MPI::MPI_C)
endif()
if(TOWER_HAVE_CUDA)
  list(APPEND private_libs CUDA::cudart_static ${TOWER_CUDNN_LIBRARY})
endif()
if(TOWER_HAVE_NCCL)
  list(APPEND private_libs ${TOWER_NCCL_LIBRARY})
endif()
target_link_libraries(tower_shared PRIVATE ${private_libs})
set_target_properties(tower_shared PROPERTIES OUTPUT_NAME tower EXPORT_NAME tower
                                              VERSION ${PROJECT_VERSION} SOVERSION
                                              ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
target_include_directories(tower_shared INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(tower_shared INTERFACE $<INSTALL_INTERFACE:fmt::fmt>
                                             $<INSTALL_INTERFACE:nlohmann_json::nlohmann_json>)

install(TARGETS tower_shared EXPORT tower_targets)
install(TARGETS tower)  # the CLI
install(
  DIRECTORY ${PROJECT_SOURCE_DIR}/src/tower
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING
  PATTERN "*.h"
  PATTERN "kernels/cpu" EXCLUDE
  PATTERN "kernels/cuda" EXCLUDE
  PATTERN "parallel/nccl" EXCLUDE
  PATTERN "parallel/mpi" EXCLUDE)
install(EXPORT tower_targets NAMESPACE tower:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tower
        FILE towerTargets.cmake)
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/towerConfig.cmake.in ${CMAKE_BINARY_DIR}/towerConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tower)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/towerConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/towerConfig.cmake ${CMAKE_BINARY_DIR}/towerConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tower)
