# Helpers shared by every folder: warnings, the LibTorch precompiled header, tests with labels.

# Warnings and include root for one of our own targets.
function(pipeplan_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
endfunction()

# A library of one folder: pipeplan_library(NAME SOURCES ... [TORCH]).
# TORCH targets reuse one precompiled <torch/torch.h>, since parsing it dominates the compile time
# of a LibTorch translation unit; their files that include no LibTorch header are named to
# pipeplan_without_torch_pch.
function(pipeplan_library name)
  cmake_parse_arguments(ARG "TORCH" "" "SOURCES" ${ARGN})
  add_library(pipeplan_${name} STATIC ${ARG_SOURCES})
  add_library(pipeplan::${name} ALIAS pipeplan_${name})
  pipeplan_defaults(pipeplan_${name})
  if(ARG_TORCH)
    target_link_libraries(pipeplan_${name} PUBLIC ${TORCH_LIBRARIES})
    pipeplan_use_torch_pch(pipeplan_${name})
  endif()
endfunction()

# Owner of the shared precompiled header; created on first use.
function(pipeplan_use_torch_pch target)
  if(NOT TARGET pipeplan_torch_pch)
    add_library(pipeplan_torch_pch STATIC ${PROJECT_SOURCE_DIR}/cmake/torch_pch.cpp)
    target_compile_options(pipeplan_torch_pch PRIVATE -Wall -Wextra)
    target_link_libraries(pipeplan_torch_pch PUBLIC ${TORCH_LIBRARIES})
    target_precompile_headers(pipeplan_torch_pch PRIVATE <torch/torch.h>)
  endif()
  target_precompile_headers(${target} REUSE_FROM pipeplan_torch_pch)
endfunction()

# Files of a TORCH target (in the calling folder) that include no LibTorch header, directly or
# through ours: they compile without the precompiled <torch/torch.h>, since loading it costs such
# a file more than compiling it (figures: bench/history/2026-11-24-session-7.md).
function(pipeplan_without_torch_pch)
  set_source_files_properties(${ARGN} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
endfunction()

# Sets PIPEPLAN_HAS_CUDA (cache) and a compile definition when the LibTorch found has CUDA.
macro(pipeplan_detect_torch_cuda)
  if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
    set(PIPEPLAN_HAS_CUDA ON)
    add_compile_definitions(PIPEPLAN_HAS_CUDA=1)
    find_package(CUDAToolkit REQUIRED)
  else()
    set(PIPEPLAN_HAS_CUDA OFF)
  endif()
  message(STATUS "pipeplan: LibTorch ${Torch_VERSION}, CUDA ${PIPEPLAN_HAS_CUDA}")
endmacro()

# One GoogleTest binary per library: pipeplan_test(NAME SOURCES ... LIBS ... [TORCH]).
# A test's CTest label and scheduling come from a prefix of its suite or test name, anchored at
# the start of either ("GpuX.Y", "Instance/GpuX.Y" or "X.GpuY", never "X.YGpus"): Gpu gives the label `gpu` (CI
# leaves it out, so such a test must skip without CUDA), Slow the label `slow`, Fuzz `fuzz`, all
# others the library's name; Serial (tests that time things or start several processes), Fuzz and
# Gpu tests run alone. A name carries at most one of Gpu, Slow, Fuzz; Serial combines only with
# Slow. scripts/check-test-labels.sh checks that every test lands in a label CI runs.
function(pipeplan_test name)
  cmake_parse_arguments(ARG "TORCH" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name}_test ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/test_main.cpp)
  pipeplan_defaults(${name}_test)
  target_link_libraries(${name}_test PRIVATE ${ARG_LIBS} pipeplan::common GTest::gtest GTest::gmock)
  if(ARG_TORCH)
    pipeplan_use_torch_pch(${name}_test)
    pipeplan_without_torch_pch(${PROJECT_SOURCE_DIR}/tests/test_main.cpp)
  endif()
  target_compile_definitions(${name}_test PRIVATE
    PIPEPLAN_SOURCE_DIR="${PROJECT_SOURCE_DIR}" PIPEPLAN_BINARY_DIR="${PROJECT_BINARY_DIR}")
  set(target ${name}_test)
  set(gpu "Gpu*:*/Gpu*:*.Gpu*")
  set(slow "Slow*:*/Slow*:*.Slow*")
  set(fuzz "Fuzz*:*/Fuzz*:*.Fuzz*")
  set(serial "Serial*:*/Serial*:*.Serial*")
  set(slow_serial "SlowSerial*:SerialSlow*:*.SlowSerial*:*.SerialSlow*:Slow*.Serial*:Serial*.Slow*")
  _pipeplan_discover("*-${gpu}:${slow}:${fuzz}:${serial}" FALSE ${name})
  _pipeplan_discover("${slow}-${gpu}:${fuzz}:${slow_serial}" FALSE slow)
  _pipeplan_discover("${serial}-${gpu}:${slow}:${fuzz}" TRUE ${name})
  _pipeplan_discover("${slow_serial}-${gpu}:${fuzz}" TRUE slow)
  _pipeplan_discover("${fuzz}-${gpu}" TRUE fuzz)
  _pipeplan_discover("${gpu}" TRUE gpu)
endfunction()

# gtest_discover_tests for the tests of `target` matching `filter`, with labels ARGN.
# One label per test: gtest_discover_tests does not pass list-valued properties through.
macro(_pipeplan_discover filter serial label)
  gtest_discover_tests(${target} TEST_FILTER "${filter}" DISCOVERY_MODE PRE_TEST
                       DISCOVERY_TIMEOUT 60 PROPERTIES LABELS ${label} RUN_SERIAL ${serial})
endmacro()

# Sets PIPEPLAN_TORCH_PYTHON to a Python that imports torch (Debian's python3-torch, which
# scripts/setup.sh installs, or the Python on PATH), or to "" when none does. Tests run it to
# write the TorchScript models they load. -DPIPEPLAN_TORCH_PYTHON=... picks one by hand.
function(pipeplan_find_torch_python)
  if(DEFINED CACHE{PIPEPLAN_TORCH_PYTHON} AND NOT PIPEPLAN_TORCH_PYTHON STREQUAL "")
    return()
  endif()
  find_program(_pipeplan_path_python NAMES python3 NO_CACHE)
  set(found "")
  foreach(candidate /usr/bin/python3 ${_pipeplan_path_python})
    if(EXISTS "${candidate}")
      execute_process(COMMAND "${candidate}" -c "import torch" RESULT_VARIABLE status
                      OUTPUT_QUIET ERROR_QUIET TIMEOUT 120)
      if(status EQUAL 0)
        set(found "${candidate}")
        break()
      endif()
    endif()
  endforeach()
  set(PIPEPLAN_TORCH_PYTHON "${found}" CACHE STRING
      "Python with torch that writes the tests' TorchScript models (empty: those tests skip)" FORCE)
  message(STATUS "pipeplan: Python with torch for the tests: '${found}'")
endfunction()
