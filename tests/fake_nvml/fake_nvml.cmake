# trainfit watch's test support, included from tests/CMakeLists.txt:
# - a fake libnvidia-ml built twice, as a current driver and as an old one (FAKE_NVML_OLD), which the
#   NVML layer's tests load through the real dlopen path (Nvml::open takes its path);
# - the tests that need a real GPU and driver (tests/gpu/*.cpp, label gpu: CI skips them).
foreach(variant fake_nvml fake_nvml_old)
  add_library(${variant} SHARED ${CMAKE_CURRENT_LIST_DIR}/fake_nvml.cpp)
  set_target_properties(${variant} PROPERTIES CXX_VISIBILITY_PRESET hidden)
endforeach()
target_compile_definitions(fake_nvml_old PRIVATE FAKE_NVML_OLD)

foreach(tests trainfit_unit_tests trainfit_cli_tests)
  if(TARGET ${tests})
    add_dependencies(${tests} fake_nvml fake_nvml_old)
    target_compile_definitions(${tests} PRIVATE
      TRAINFIT_FAKE_NVML="$<TARGET_FILE:fake_nvml>" TRAINFIT_FAKE_NVML_OLD="$<TARGET_FILE:fake_nvml_old>")
  endif()
endforeach()

file(GLOB GPU_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/../gpu/*.cpp)
if(GPU_SOURCES)
  trainfit_test(trainfit_gpu_tests gpu ${GPU_SOURCES})
endif()
