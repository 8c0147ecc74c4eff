# SPDX-License-Identifier: Apache-2.0
# Install rules (included by the top-level CMakeLists when PMTREE_INSTALL is on):
#   include/pmtree/*.h                 the public API, nothing of src/
#   lib/libpmtree_{pm,trees,kv}.a        the library (or .so with BUILD_SHARED_LIBS)
#   bin/pmtree                         the CLI, when PMTREE_BUILD_TOOLS is on
#   lib/cmake/pmtree/                  find_package(pmtree CONFIG): pmtree::pmtree
#   lib/pkgconfig/pmtree.pc            pkg-config --cflags --libs pmtree
include(CMakePackageConfigHelpers)
set(PMTREE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/pmtree)

install(TARGETS pmtree_pm pmtree_trees pmtree_kv pmtree_lib EXPORT pmtreeTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/pmtree DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
if(TARGET pmtree)
  install(TARGETS pmtree RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(EXPORT pmtreeTargets NAMESPACE pmtree:: DESTINATION ${PMTREE_CMAKE_DIR})
configure_package_config_file(cmake/pmtreeConfig.cmake.in ${PROJECT_BINARY_DIR}/pmtreeConfig.cmake
  INSTALL_DESTINATION ${PMTREE_CMAKE_DIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/pmtreeConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/pmtreeConfig.cmake ${PROJECT_BINARY_DIR}/pmtreeConfigVersion.cmake
  DESTINATION ${PMTREE_CMAKE_DIR})

# pkg-config: static libraries carry their dependencies in Libs/Requires.
if(BUILD_SHARED_LIBS)
  set(PMTREE_PC_REQUIRES_PRIVATE "libpmem2")
  set(PMTREE_PC_REQUIRES "")
else()
  set(PMTREE_PC_REQUIRES_PRIVATE "")
  set(PMTREE_PC_REQUIRES "libpmem2")
endif()
# Relocatable (cmake --install --prefix may differ from CMAKE_INSTALL_PREFIX):
# the prefix is derived from the .pc file's own directory.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(PMTREE_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(PMTREE_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(PMTREE_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH up "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
  set(PMTREE_PC_PREFIX "\${pcfiledir}/${up}")
  set(PMTREE_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(PMTREE_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(cmake/pmtree.pc.in ${PROJECT_BINARY_DIR}/pmtree.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/pmtree.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
