# `cmake --install`: the command with what bench needs at run time, and the library as a CMake
# package, so that another project can
#   find_package(trainfit CONFIG REQUIRED)
#   target_link_libraries(its_target PRIVATE trainfit::trainfit)
# (tests/install/ is such a project; scripts/check-install.sh builds it against an install).
include(CMakePackageConfigHelpers)

# bench's default runner (python3 -m trainfit_runner), found beside the binary; its built-in model
# configs beside the package (python/trainfit_runner/model_files.py); the shipped experiment plans.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/trainfit_runner DESTINATION ${TRAINFIT_INSTALL_DATADIR}/python
        PATTERN __pycache__ EXCLUDE PATTERN *.pyc EXCLUDE)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/data/models/ DESTINATION ${TRAINFIT_INSTALL_DATADIR}/models
        FILES_MATCHING PATTERN *.json)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/plans/ DESTINATION ${TRAINFIT_INSTALL_DATADIR}/plans
        FILES_MATCHING PATTERN *.toml)

install(TARGETS trainfit EXPORT trainfitTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/trainfit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN *.hpp)

set(TRAINFIT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/trainfit)
install(EXPORT trainfitTargets NAMESPACE trainfit:: DESTINATION ${TRAINFIT_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/trainfitConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/trainfitConfig.cmake
                              INSTALL_DESTINATION ${TRAINFIT_CMAKE_DIR})
# 0.x: a new minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/trainfitConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/trainfitConfig.cmake ${PROJECT_BINARY_DIR}/trainfitConfigVersion.cmake
        DESTINATION ${TRAINFIT_CMAKE_DIR})
