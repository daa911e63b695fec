# Installs the layer libraries, their public headers and a CMake package so that find_package(tandem) gives
# tandem::tandem (every layer) and tandem::<layer>. Only <layer>/include is installed, never src/ (nor
# tandem_core_internal, Note [Core internals]); the CUDA headers under include/tandem/core/cuda stay out as well.
include(CMakePackageConfigHelpers)

foreach(layer core nn comm parallel trainers)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          PATTERN "cuda" EXCLUDE)
endforeach()
install(TARGETS tandem_core tandem_nn tandem_comm tandem_parallel tandem_trainers tandem EXPORT tandemTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT tandemTargets NAMESPACE tandem:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tandem)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tandemConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/tandemConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tandem)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tandemConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tandemConfig.cmake ${PROJECT_BINARY_DIR}/tandemConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tandem)
