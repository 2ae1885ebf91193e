# What `cmake --install build [--prefix P]` puts where, and the Debian packages `cpack`
# makes of it (docs/user-guide.md, "Installing"):
#
#   P/bin/shardplan                       the command
#   P/bin/shardplan-capture               link to the capture tool below
#   P/lib/shardplan/libshardplan_cuda.so  the CUDA backend, loaded on demand by the command
#   P/lib/shardplan/capture/              the capture tool (launcher + its Python package)
#   P/<python dir>/shardplan.*.so         import shardplan (python/CMakeLists.txt)
#
# The plugin's folder (SHARDPLAN_PLUGIN_INSTALL_DIR, set in the top CMakeLists.txt) is
# private to shardplan (Debian policy: /usr/lib/<package>), and the command finds it
# relative to itself (executor/cuda_probe.cc), so any prefix works.

# Installed programs keep the run paths of libraries outside the system's folders (Open
# MPI's, the CUDA toolkit's under /usr/local/cuda), which the build tree's run path gave
# them.
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)

install(TARGETS shardplan RUNTIME DESTINATION bin COMPONENT shardplan)
if(SHARDPLAN_CUDA)
  install(TARGETS shardplan_cuda LIBRARY DESTINATION ${SHARDPLAN_PLUGIN_INSTALL_DIR}
          COMPONENT cuda)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/traces/capture/shardplan_capture
        DESTINATION ${SHARDPLAN_PLUGIN_INSTALL_DIR}/capture COMPONENT shardplan
        PATTERN __pycache__ EXCLUDE)
install(PROGRAMS ${PROJECT_SOURCE_DIR}/traces/capture/shardplan-capture
        DESTINATION ${SHARDPLAN_PLUGIN_INSTALL_DIR}/capture COMPONENT shardplan)
# The launcher finds its package beside the file the link resolves to.
install(CODE "file(CREATE_LINK ../${SHARDPLAN_PLUGIN_INSTALL_DIR}/capture/shardplan-capture
                  \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/bin/shardplan-capture\" SYMBOLIC)"
        COMPONENT shardplan)

# cpack -G DEB (in the build folder): shardplan_<version>_<arch>.deb with the command, the
# capture tool and the Python module (its library dependencies found by dpkg-shlibdeps),
# and shardplan-cuda_<version>_<arch>.deb with the CUDA backend alone: it needs the CUDA
# toolkit with cuBLAS and NCCL at the path it was built against, which no Debian package
# provides, so its dependencies are stated, not derived.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME shardplan)
set(CPACK_PACKAGE_VENDOR "shardplan")
set(CPACK_PACKAGE_CONTACT "shardplan developers <shardplan@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "FSDP training memory and communication planner, simulator and executor")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)  # RelWithDebInfo's debug sections are most of the bytes
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL shardplan)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_SHARDPLAN_PACKAGE_NAME shardplan)
set(CPACK_DEBIAN_SHARDPLAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_SHARDPLAN_PACKAGE_SHLIBDEPS ON)
# MPI launches ranks; the module is built for this python3 (its ABI tag is in its name).
set(CPACK_DEBIAN_SHARDPLAN_PACKAGE_DEPENDS "openmpi-bin")
if(TARGET shardplan_python)
  string(APPEND CPACK_DEBIAN_SHARDPLAN_PACKAGE_DEPENDS ", python3 (>= ${SHARDPLAN_PYTHON_VERSION})"
         ", python3 (<< ${SHARDPLAN_PYTHON_VERSION}.99)")
endif()
set(CPACK_DEBIAN_SHARDPLAN_PACKAGE_RECOMMENDS "python3-torch")
set(CPACK_COMPONENT_SHARDPLAN_DESCRIPTION
    "shardplan plans, simulates and replays FSDP training steps: will the model fit, how\n long will a step take, which sharding, bucket and prefetch settings are best.")
if(SHARDPLAN_CUDA)
  list(APPEND CPACK_COMPONENTS_ALL cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_NAME shardplan-cuda)
  set(CPACK_DEBIAN_CUDA_PACKAGE_SECTION science)
  set(CPACK_DEBIAN_CUDA_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_CUDA_PACKAGE_DEPENDS "shardplan (= ${PROJECT_VERSION})")
  set(CPACK_COMPONENT_CUDA_DESCRIPTION
      "The CUDA + cuBLAS + NCCL executor backend of shardplan (execute --backend cuda, probe).\n It loads libcudart, libcublas and libnccl from ${CUDAToolkit_LIBRARY_DIR}, the CUDA toolkit\n it was built against.")
endif()
include(CPack)
