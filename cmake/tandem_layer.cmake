# tandem_layer(<layer> [PUBLIC_DEPS <layer>...]): the library target tandem_<layer> (alias tandem::<layer>, exported
# as tandem::<layer>) with <layer>/include as its public headers, the given lower layers as PUBLIC dependencies, and
# the project's warnings. Sources, private dependencies and backends are added by <layer>/CMakeLists.txt.
#
# Note [Layer targets]: each layer sees only its own headers and those of the layers it links, so an upward include
# does not compile (tests/layering proves it for every pair), and each library links with --no-undefined, so an
# upward call does not link either (sanitized builds excepted: clang leaves the sanitizer runtime to the executable).
function(tandem_layer layer)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "PUBLIC_DEPS")
  set(target tandem_${layer})
  add_library(${target} SHARED)
  add_library(tandem::${layer} ALIAS ${target})
  # Installed, each library finds the others beside it and the CUDA, NCCL and MPI libraries where it was linked
  # against them.
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${layer} INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
                                              $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  foreach(dep ${arg_PUBLIC_DEPS})
    target_link_libraries(${target} PUBLIC tandem_${dep})
  endforeach()
  if(NOT TANDEM_SANITIZE)
    target_link_options(${target} PRIVATE LINKER:--no-undefined)
  endif()
endfunction()
