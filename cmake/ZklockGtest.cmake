# One gtest executable registered with ctest: every test binary under tests/
# is declared with this, so labels, timeouts and child-program paths are
# spelled one way.
#
#   zklock_add_gtest(<name>
#     SOURCES <file>...            the test sources
#     LABEL <label>                the one ctest label (unit, integration): a two-item
#                                  LABELS list does not survive gtest_discover_tests'
#                                  PROPERTIES and swallows TIMEOUT
#     [TIMEOUT <seconds>]          each test's ctest timeout (default: ctest's own)
#     [LIBS <target>...]           linked PRIVATE, before GTest::gtest_main and zklock_warnings
#     [INCLUDES <dir>...]          private include directories
#     [DEFINES <NAME=value>...]    private compile definitions
#     [BINARIES <NAME=target>...]  programs the tests run as children: NAME="<target's file>"
#                                  as a compile definition, and the target built first
#
# Tests are discovered from the built binary (DISCOVERY_TIMEOUT 30 s), so
# `ctest -N` lists them only after a build.
include(GoogleTest)

function(zklock_add_gtest name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "LABEL;TIMEOUT" "SOURCES;LIBS;INCLUDES;DEFINES;BINARIES")
  if(arg_UNPARSED_ARGUMENTS OR arg_KEYWORDS_MISSING_VALUES OR NOT arg_SOURCES OR NOT arg_LABEL)
    message(FATAL_ERROR "zklock_add_gtest(${name}): SOURCES and LABEL are required "
                        "(unexpected: '${arg_UNPARSED_ARGUMENTS}', empty: '${arg_KEYWORDS_MISSING_VALUES}')")
  endif()
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE ${arg_LIBS} GTest::gtest_main zklock_warnings)
  if(arg_INCLUDES)
    target_include_directories(${name} PRIVATE ${arg_INCLUDES})
  endif()
  if(arg_DEFINES)
    target_compile_definitions(${name} PRIVATE ${arg_DEFINES})
  endif()
  foreach(binary IN LISTS arg_BINARIES)
    if(NOT binary MATCHES "^([A-Za-z_][A-Za-z0-9_]*)=(.+)$")
      message(FATAL_ERROR "zklock_add_gtest(${name}): BINARIES takes NAME=target, not '${binary}'")
    endif()
    target_compile_definitions(${name} PRIVATE ${CMAKE_MATCH_1}="$<TARGET_FILE:${CMAKE_MATCH_2}>")
    add_dependencies(${name} ${CMAKE_MATCH_2})
  endforeach()
  set(properties LABELS ${arg_LABEL})
  if(arg_TIMEOUT)
    list(APPEND properties TIMEOUT ${arg_TIMEOUT})
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 30 PROPERTIES ${properties})
endfunction()
