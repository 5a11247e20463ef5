# What `cmake --install` lays out beside the runtime's API
# (cmake/install_runtime.cmake), and the Debian package CPack builds from it.
#
#   <prefix>/bin/                      dslaunch, dsagent, dsagent_keeper, dsrank, dsprep, dstokenize,
#                                      dsgen, dsserve, dsconsolidate, dscomm_bench (dslaunch finds the others beside itself)
#   <prefix>/share/dslaunch/configs/   the shipped job configs and ds_configs
#   <prefix>/share/dslaunch/deploy/    Kubernetes manifests (deploy/kubernetes/)
#   <prefix>/lib/systemd/system/       dsagent.service, its paths filled in
#   <prefix>/lib/python3/dist-packages/dslaunch/   the Python client (python/dslaunch)
#   <prefix>/share/bash-completion/completions/    completion for every tool
#   <prefix>/share/doc/dslaunch/       README and docs/
#
# `cpack -G DEB` (in the build folder) makes dslaunch_<version>_<arch>.deb for
# prefix /usr; its dependencies come from dpkg-shlibdeps, so they are the
# bookworm packages of the libraries the binaries link. tests/package/
# builds it, checks it and runs its binaries.
include(GNUInstallDirs)

# Every program, bin/ as in the build tree (dslaunch starts dsagent and
# dscomm_bench from its own folder, dsagent its keeper).
set(DSLAUNCH_INSTALLED_PROGRAMS dslaunch dsagent dsagent_keeper dsrank dsprep dstokenize dsgen dsserve dsconsolidate
                                dscomm_bench)
foreach(program IN LISTS DSLAUNCH_INSTALLED_PROGRAMS)
  if(NOT TARGET ${program})
    message(FATAL_ERROR "cmake/package.cmake: no target ${program} to install")
  endif()
endforeach()
# dsrank is installed with the runtime's API (runtime/dsrank/CMakeLists.txt).
list(REMOVE_ITEM DSLAUNCH_INSTALLED_PROGRAMS dsrank)
install(TARGETS ${DSLAUNCH_INSTALLED_PROGRAMS} RUNTIME DESTINATION bin)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/ DESTINATION share/dslaunch/configs
        FILES_MATCHING PATTERN "*.cfg" PATTERN "*.json")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/kubernetes/ DESTINATION share/dslaunch/deploy/kubernetes)

# The unit names dsagent by its installed path, which is known only when
# installing (--prefix, or /usr for the package): filled in then.
install(CODE "
  set(DSLAUNCH_INSTALL_BINDIR \"\${CMAKE_INSTALL_PREFIX}/bin\")
  configure_file(\"${PROJECT_SOURCE_DIR}/deploy/dsagent.service.in\"
                 \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/systemd/system/dsagent.service\" @ONLY)
  message(STATUS \"Installing: \$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/systemd/system/dsagent.service\")
")

install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/dslaunch DESTINATION lib/python3/dist-packages
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)

# One completion script; bash-completion loads it by command name.
foreach(program dslaunch dsagent dsrank dsprep dstokenize dsgen dsserve dsconsolidate dscomm_bench)
  install(FILES ${PROJECT_SOURCE_DIR}/deploy/completion/dslaunch.bash
          DESTINATION share/bash-completion/completions RENAME ${program})
endforeach()

install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION share/doc/dslaunch)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION share/doc/dslaunch/docs)

# The version every tool prints (common/version.h), so that the package and
# `--version` cannot disagree.
file(STRINGS ${PROJECT_SOURCE_DIR}/common/version.h version_line REGEX "kDslaunchVersion\\[\\] = \"")
string(REGEX REPLACE ".*kDslaunchVersion\\[\\] = \"([^\"]+)\".*" "\\1" DSLAUNCH_VERSION "${version_line}")

set(CPACK_PACKAGE_NAME dslaunch)
set(CPACK_PACKAGE_VERSION ${DSLAUNCH_VERSION})
set(CPACK_PACKAGE_VENDOR "dslaunch")
set(CPACK_PACKAGE_CONTACT "dslaunch developers <dslaunch@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "launcher, job controller and training runtime for distributed deep learning")
set(CPACK_PACKAGE_DESCRIPTION
    "dslaunch starts a job's ranks on one or many hosts through its agents, fails and restarts\nthe whole job fast, diagnoses hangs, and trains models with ZeRO data parallelism\n(dsrank). DeepSpeed's launcher flags and ds_config keys are accepted.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_SET_DESTDIR ON)  # installs with prefix /usr (CPACK_INSTALL_PREFIX) under a staging DESTDIR
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# What the binaries run besides their libraries: eu-stack for hang reports,
# gnuplot for `dslaunch plot`; ssh for the ssh launcher, recommended only.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "elfutils")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "gnuplot-nox, openssh-client, python3-grpcio")
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)
# The package's files come from `cmake --install` alone: no build tree paths.
set(CPACK_INSTALL_CMAKE_PROJECTS "${PROJECT_BINARY_DIR};dslaunch;ALL;/")
include(CPack)
