# Installs the layer libraries, their public headers and a CMake package so that find_package(tandem) gives
# tandem::tandem (every layer) and tandem::<layer>. Only <layer>/include is installed, never src/ (nor
# tandem_core_internal, Note [Core internals]); the CUDA headers under include/tandem/core/cuda stay out as well.
include(CMakePackageConfigHelpers)

foreach(layer core nn comm parallel trainers)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          PATTERN "cuda" EXCLUDE)
endforeach()
# The include directory reaches the targets' interface once, from tandem_layer's INSTALL_INTERFACE.
install(TARGETS tandem_core tandem_nn tandem_comm tandem_parallel tandem_trainers tandem EXPORT tandemTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# tandem-train, finding the layer libraries relative to itself.
if(TARGET tandem-train)
  file(RELATIVE_PATH tandem_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
  set_target_properties(tandem-train PROPERTIES INSTALL_RPATH "$ORIGIN/${tandem_bin_to_lib}" INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS tandem-train RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT tandemTargets NAMESPACE tandem:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tandem)
# tandemConfig.cmake finds what the libraries link (Threads; the CUDA toolkit and NCCL, through the FindNCCL.cmake
# installed beside it, when built with CUDA; MPI when built with MPI), so find_package(tandem) is all a consumer
# needs.
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tandemConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/tandemConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tandem)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tandemConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tandemConfig.cmake ${PROJECT_BINARY_DIR}/tandemConfigVersion.cmake
        ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tandem)
