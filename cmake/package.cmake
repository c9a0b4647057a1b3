# The installed package: `cmake --install <build> [--prefix P]` puts in P
#   include/rlx/...                  the public headers (src/, solvers/ and nn/), so that
#                                    "ir/frontend.hpp" and "solvers/sparse/krylov.hpp" resolve
#   lib/librlx.a, lib/librlx_solvers.a, lib/librlx_nn.a
#   lib/cmake/rlx/                   rlxConfig.cmake, its version file, the exported targets
#                                    rlx::rlx (core and devices), rlx::solvers and rlx::nn
#   lib/pkgconfig/rlx.pc             the same for pkg-config (static libraries: --static)
#   bin/rlx                          the command-line program
# tests/package builds and runs a consumer project against such a prefix.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(RLX_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/rlx)

# Target names inside the build tree match the installed ones (add_subdirectory users).
add_library(rlx::rlx ALIAS rlx)
add_library(rlx::solvers ALIAS rlx_solvers)
set_target_properties(rlx_solvers PROPERTIES EXPORT_NAME solvers)
add_library(rlx::nn ALIAS rlx_nn)
set_target_properties(rlx_nn PROPERTIES EXPORT_NAME nn)
# The headers need C++20: say so to consumers (the build itself sets CMAKE_CXX_STANDARD).
target_compile_features(rlx PUBLIC cxx_std_20)

install(TARGETS rlx rlx_solvers rlx_nn EXPORT rlxTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/rlx)
install(TARGETS rlx_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY src/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/rlx FILES_MATCHING PATTERN "*.hpp")
install(DIRECTORY solvers/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/rlx/solvers FILES_MATCHING PATTERN "*.hpp")
install(DIRECTORY data/mnist DESTINATION ${CMAKE_INSTALL_DATADIR}/rlx/data FILES_MATCHING PATTERN "*.gz" PATTERN "README.md")
install(DIRECTORY nn/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/rlx/nn FILES_MATCHING PATTERN "*.hpp")
install(EXPORT rlxTargets NAMESPACE rlx:: DESTINATION ${RLX_INSTALL_CMAKEDIR})

# What the config file tells consumers: the feature list and one RLX_HAVE_<X> per feature.
foreach(_f IN LISTS RLX_FEATURES)
  string(REGEX MATCH "^([a-z0-9_]+)=(ON|OFF)$" _m "${_f}")
  string(TOUPPER "${CMAKE_MATCH_1}" _up)
  set(RLX_PKG_HAVE_${_up} ${CMAKE_MATCH_2})
endforeach()
set(RLX_PKG_CUDA_ROOT "")
if(CUDAToolkit_BIN_DIR)
  get_filename_component(RLX_PKG_CUDA_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
set(RLX_PKG_HDF5_PARALLEL OFF)
if(HDF5_IS_PARALLEL)
  set(RLX_PKG_HDF5_PARALLEL ON)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/rlxConfig.cmake.in ${CMAKE_BINARY_DIR}/package/rlxConfig.cmake
                              INSTALL_DESTINATION ${RLX_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/rlxConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/rlxConfig.cmake ${CMAKE_BINARY_DIR}/package/rlxConfigVersion.cmake
        DESTINATION ${RLX_INSTALL_CMAKEDIR})

# pkg-config. The prefix is found from the file's own place (${pcfiledir}), so the file
# stays right under `cmake --install --prefix`. Link dependencies are private (Requires.private,
# Libs.private): the libraries are static, so link with `pkg-config --static --libs rlx`.
file(RELATIVE_PATH RLX_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" RLX_PC_TO_PREFIX "${RLX_PC_TO_PREFIX}")
set(RLX_PC_CFLAGS "")
set(RLX_PC_REQUIRES_PRIVATE "")
set(RLX_PC_LIBS_PRIVATE "-pthread -lz")
if(CMAKE_DL_LIBS)
  string(APPEND RLX_PC_LIBS_PRIVATE " -l${CMAKE_DL_LIBS}")
endif()
if(RLX_PKG_HAVE_HDF5)
  string(APPEND RLX_PC_CFLAGS " -DRLX_HAVE_HDF5")
  # Debian ships hdf5-serial.pc and hdf5-openmpi.pc (hdf5.pc is an alternative that points at
  # either): name the variant rlx was built against.
  if(RLX_PKG_HDF5_PARALLEL)
    set(RLX_PC_REQUIRES_PRIVATE "hdf5-openmpi")
  else()
    set(RLX_PC_REQUIRES_PRIVATE "hdf5-serial")
  endif()
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(_rlx_pc_hdf5 QUIET ${RLX_PC_REQUIRES_PRIVATE})
    if(NOT _rlx_pc_hdf5_FOUND)
      set(RLX_PC_REQUIRES_PRIVATE "hdf5")
    endif()
  endif()
endif()
if(RLX_PKG_HAVE_HDF5 AND RLX_HDF5_PARALLEL)
  string(APPEND RLX_PC_CFLAGS " -DRLX_HAVE_HDF5_PARALLEL")
endif()
if(RLX_PKG_HAVE_MPI)
  string(APPEND RLX_PC_CFLAGS " -DRLX_HAVE_MPI")
  string(APPEND RLX_PC_REQUIRES_PRIVATE " ompi-c")
endif()
if(RLX_PKG_HAVE_METIS)
  # (Debian's METIS has no pkg-config file; rlx_solvers' partitions call it)
  string(APPEND RLX_PC_LIBS_PRIVATE " -lmetis")
endif()
if(RLX_PKG_HAVE_SCOTCH)
  # (Debian's Scotch has no pkg-config file either)
  string(APPEND RLX_PC_LIBS_PRIVATE " -lscotch -lscotcherr")
endif()
if(RLX_PKG_HAVE_PTSCOTCH)
  # (PT-Scotch before the sequential Scotch it calls)
  string(PREPEND RLX_PC_LIBS_PRIVATE "-lptscotch -lptscotcherr ")
endif()
if(RLX_PKG_HAVE_ONNX)
  # (Debian's libonnx-dev has no pkg-config file: onnx_proto by name, protobuf by its .pc)
  string(APPEND RLX_PC_CFLAGS " -DRLX_HAVE_ONNX")
  string(APPEND RLX_PC_REQUIRES_PRIVATE " protobuf")
  string(PREPEND RLX_PC_LIBS_PRIVATE "-lonnx_proto ")
endif()
if(RLX_PKG_HAVE_SUITESPARSE)
  # (SuiteSparse is loaded at run time, by path: nothing to link)
  string(APPEND RLX_PC_CFLAGS " -DRLX_HAVE_SUITESPARSE")
endif()
if(RLX_PKG_HAVE_CUDA)
  # The CUDA toolkit ships no pkg-config files in its default place: its libraries by path.
  string(APPEND RLX_PC_CFLAGS " -DRLX_HAVE_CUDA")
  string(PREPEND RLX_PC_LIBS_PRIVATE
         "-L${CUDAToolkit_LIBRARY_DIR} -lcublasLt -lcublas -lcusparse -lcusolver -lnvrtc -lcudart_static -lrt ")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/rlx.pc.in ${CMAKE_BINARY_DIR}/package/rlx.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/package/rlx.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
