# Man pages generated at build time from a program's --help with help2man
# (Debian's help2man), plus a hand-written include file (exit codes, files,
# environment). Without help2man the pages are skipped with a message.
#
#   zklock_man_page(TARGET tgt SECTION 1 INCLUDE file.h2m [SUBCOMMANDS])
#
# SUBCOMMANDS adds each subcommand's --help (cmake/help2man-subcommands.sh).
# The page is <output name>.<section>, built by the target <output name>-man
# (part of ALL) and installed as <page>.gz under share/man/man<section>.
find_program(ZKLOCK_HELP2MAN help2man)
find_program(ZKLOCK_GZIP_MAN gzip REQUIRED)
if(NOT ZKLOCK_HELP2MAN)
  message(STATUS "help2man not found: man pages are not built (Debian package help2man)")
endif()

function(zklock_man_page)
  cmake_parse_arguments(MAN "SUBCOMMANDS" "TARGET;SECTION;INCLUDE" "" ${ARGN})
  if(NOT ZKLOCK_HELP2MAN)
    return()
  endif()
  get_target_property(name ${MAN_TARGET} OUTPUT_NAME)
  if(NOT name)
    set(name ${MAN_TARGET})
  endif()
  set(page ${CMAKE_CURRENT_BINARY_DIR}/${name}.${MAN_SECTION})
  set(includes --include=${MAN_INCLUDE})
  set(depends ${MAN_TARGET} ${MAN_INCLUDE})
  if(MAN_SUBCOMMANDS)
    set(subs ${CMAKE_CURRENT_BINARY_DIR}/${name}-subcommands.h2m)
    add_custom_command(OUTPUT ${subs}
      COMMAND sh ${PROJECT_SOURCE_DIR}/cmake/help2man-subcommands.sh $<TARGET_FILE:${MAN_TARGET}> ${subs}
      DEPENDS ${MAN_TARGET} ${PROJECT_SOURCE_DIR}/cmake/help2man-subcommands.sh
      COMMENT "Collecting ${name}'s subcommand help"
      VERBATIM)
    list(APPEND includes --include=${subs})
    list(APPEND depends ${subs})
  endif()
  add_custom_command(OUTPUT ${page}
    COMMAND ${ZKLOCK_HELP2MAN} --no-info --section=${MAN_SECTION} --version-string=${PROJECT_VERSION}
            --source=zklock ${includes} --output=${page} $<TARGET_FILE:${MAN_TARGET}>
    DEPENDS ${depends}
    COMMENT "help2man ${name}.${MAN_SECTION}"
    VERBATIM)
  # Installed compressed (gzip -9n, as Debian Policy 12.1 and lintian want);
  # the uncompressed page stays in the build tree for the tests.
  add_custom_command(OUTPUT ${page}.gz
    COMMAND ${ZKLOCK_GZIP_MAN} -9nkf ${page}
    DEPENDS ${page}
    COMMENT "gzip ${name}.${MAN_SECTION}"
    VERBATIM)
  add_custom_target(${name}-man ALL DEPENDS ${page} ${page}.gz)
  install(FILES ${page}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${MAN_SECTION})
endfunction()
