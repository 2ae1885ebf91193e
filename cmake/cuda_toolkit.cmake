# Finds the CUDA toolkit with cuBLAS, NCCL and NVTX3 for the CUDA executor backend and sets
# SHARDPLAN_CUDA_FOUND. Without them the project still builds, with the backend off.
if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()

# Debian 12's stock FindCUDAToolkit.cmake (CMake 3.25.1, line 1087) sets a DEPRECATION
# property on CUDA::nvToolsExt whenever the project's minimum CMake is >= 3.25, without
# checking that the target exists; CUDA 12.9 and 13 ship no libnvToolsExt (NVTX3 is
# header-only), so configure stops with "set_property could not find TARGET
# CUDA::nvToolsExt". CMake fixed the module later (the guard `if(TARGET CUDA::nvToolsExt
# AND ...)` in Kitware/CMake's Modules/FindCUDAToolkit.cmake). The property is only a
# deprecation warning for projects that link nvToolsExt, which this one does not (it uses
# CUDA::nvtx3), so the module is run with the minimum read as 3.24; nothing else in the
# module depends on it. tests/build/stock_cmake_test.sh configures against the stock module.
set(_shardplan_minimum ${CMAKE_MINIMUM_REQUIRED_VERSION})
set(CMAKE_MINIMUM_REQUIRED_VERSION 3.24)
find_package(CUDAToolkit QUIET)
set(CMAKE_MINIMUM_REQUIRED_VERSION ${_shardplan_minimum})

set(SHARDPLAN_CUDA_FOUND OFF)
if(CUDAToolkit_FOUND)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_ROOT}/lib64)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_ROOT}/include)
  if(NCCL_LIBRARY AND NCCL_INCLUDE_DIR AND TARGET CUDA::cublas AND TARGET CUDA::nvtx3)
    set(SHARDPLAN_CUDA_FOUND ON)
  endif()
endif()
