# `cmake --install`: the public API of the runtime and what links it.
#
#   <prefix>/include/dslaunch/...         runtime/include/ (the public headers)
#   <prefix>/lib/libdsruntime_*.a ...     the runtime's libraries and those below them
#   <prefix>/lib/cmake/dslaunch/          find_package(dslaunch) -> dslaunch::runtime
#   <prefix>/bin/dsrank
#
# Internal headers are installed only while a public header includes them
# (the header closure below): a public header that forward-declares the
# internals it names installs runtime/include/ and nothing else.
include(CMakePackageConfigHelpers)

# Every target dslaunch::runtime links, bottom up (an exported target's
# dependencies must be exported with it).
set(DSLAUNCH_EXPORTED_TARGETS
  dsbounded_file dsflags dsjson dsproto dscommon dskernels_cpu
  dsruntime_schedule dsruntime_config dsruntime_fs
  dsruntime_topology dsruntime_torch dsruntime_comm dsruntime_parallel dsruntime_tensor_parallel dsruntime_moe dsruntime_model
  dsruntime_nvme_path dsruntime_offload dsruntime_zero
  dsruntime_hf dsruntime_engine dsruntime_checkpoint
  dsruntime_api)
if(TARGET dskernels_cuda)
  list(APPEND DSLAUNCH_EXPORTED_TARGETS dskernels_cuda)
endif()
set_target_properties(dsruntime_api PROPERTIES EXPORT_NAME runtime)
install(TARGETS ${DSLAUNCH_EXPORTED_TARGETS} EXPORT dslaunchTargets
        ARCHIVE DESTINATION lib INCLUDES DESTINATION include)
install(EXPORT dslaunchTargets NAMESPACE dslaunch:: DESTINATION lib/cmake/dslaunch)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime/include/ DESTINATION include)

# The headers of this tree that the public headers include, transitively
# ("..." includes that name a file of the source tree, or a generated
# proto/*.pb.h): today's <dslaunch/runtime.h> still includes the API's
# internals; each one it stops including stops being installed.
function(dslaunch_header_closure out)
  file(GLOB_RECURSE pending RELATIVE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/runtime/include/*.h)
  set(seen ${pending})
  set(internal)
  set(generated_proto OFF)
  while(pending)
    list(POP_FRONT pending header)
    file(STRINGS ${PROJECT_SOURCE_DIR}/${header} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*$" "\\1" included "${line}")
      if(included IN_LIST seen)
        continue()
      endif()
      list(APPEND seen ${included})
      if(included MATCHES "^proto/.*\\.pb\\.h$")
        set(generated_proto ON)
      elseif(EXISTS ${PROJECT_SOURCE_DIR}/${included} AND NOT included MATCHES "^runtime/include/")
        list(APPEND internal ${included})
        list(APPEND pending ${included})
      endif()
    endforeach()
  endwhile()
  set(${out} ${internal} PARENT_SCOPE)
  set(${out}_PROTO ${generated_proto} PARENT_SCOPE)
endfunction()

dslaunch_header_closure(DSLAUNCH_PUBLIC_HEADER_INTERNALS)
foreach(header IN LISTS DSLAUNCH_PUBLIC_HEADER_INTERNALS)
  get_filename_component(folder ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION include/${folder})
endforeach()
if(DSLAUNCH_PUBLIC_HEADER_INTERNALS_PROTO)
  # protoc's headers include each other by file name: all of them or none.
  install(DIRECTORY ${PROJECT_BINARY_DIR}/proto/ DESTINATION include/proto FILES_MATCHING PATTERN "*.pb.h")
endif()
list(LENGTH DSLAUNCH_PUBLIC_HEADER_INTERNALS internal_count)
message(STATUS "dslaunch: the public headers include ${internal_count} internal headers (installed with them)")

set(DSLAUNCH_PACKAGE_NEEDS_CUDA OFF)  # dskernels_cuda links CUDA::cudart
if(TARGET dskernels_cuda)
  set(DSLAUNCH_PACKAGE_NEEDS_CUDA ON)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dslaunchConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/dslaunchConfig.cmake
  INSTALL_DESTINATION lib/cmake/dslaunch)
install(FILES ${PROJECT_BINARY_DIR}/cmake/dslaunchConfig.cmake DESTINATION lib/cmake/dslaunch)
