# Debian packages with CPack (docs/packaging.md):
#   cmake --build build && (cd build && cpack -G DEB)
# gives two packages:
#   libzklock-dev  the static library, headers, CMake package, zklock.pc
#                  (install component "dev")
#   zklock         zklock, zklock-detector, the systemd unit, a commented
#                  /etc/zklock/detector.toml, docs (component "tools": every
#                  install() without a COMPONENT lands here)
# Both install under /usr. Runtime dependencies of the tools come from
# dpkg-shlibdeps; the -dev package names the -dev packages a consumer's
# build needs (the library is static: its dependencies link into the consumer).

# The Maintainer field of both packages, and the signature of their
# changelog: "NAME <EMAIL>" (Debian Policy 5.6.2; lintian rejects a mail
# domain that cannot exist, such as .invalid). Set it when you build packages
# for your own repository: -DZKLOCK_PACKAGE_CONTACT="Ops <ops@example.org>".
# The default is the project's placeholder, not a person.
set(ZKLOCK_PACKAGE_CONTACT "zklock maintainers <zklock-maintainers@users.noreply.github.com>"
    CACHE STRING "Maintainer field of the Debian packages: NAME <EMAIL>")
# Build directories configured before carry the old placeholder, whose
# .invalid domain lintian rejects: move them to the new one.
if(ZKLOCK_PACKAGE_CONTACT STREQUAL "zklock maintainers <zklock-maintainers@invalid>")
  set(ZKLOCK_PACKAGE_CONTACT "zklock maintainers <zklock-maintainers@users.noreply.github.com>"
      CACHE STRING "Maintainer field of the Debian packages: NAME <EMAIL>" FORCE)
endif()
if(NOT ZKLOCK_PACKAGE_CONTACT MATCHES "^[^<>]+ <[^<> @]+@[^<> @]+\\.[^<> @]+>$")
  message(FATAL_ERROR "ZKLOCK_PACKAGE_CONTACT must be \"NAME <EMAIL>\", not \"${ZKLOCK_PACKAGE_CONTACT}\"")
endif()

set(CPACK_PACKAGE_NAME zklock)
set(CPACK_PACKAGE_VENDOR zklock)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${ZKLOCK_PACKAGE_CONTACT}")
# No CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPackDeb would put it above each
# component description, whose own first line is the package synopsis.
# Install with DESTDIR and CMAKE_INSTALL_PREFIX=/usr (CPACK_INSTALL_PREFIX;
# without it the configure-time prefix, /usr/local, would be used), so
# install(CODE) rules (the systemd unit's ExecStart) see the real prefix, and
# the absolute /etc/zklock destination works.
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_SET_DESTDIR ON)
set(CPACK_GENERATOR DEB)
# Binaries without debug info, as Debian ships them (static libraries are
# never stripped by CMake).
set(CPACK_STRIP_FILES ON)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL dev tools)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libzklock-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "fair distributed locks on Apache ZooKeeper - development files
zklock is a C++20 library of fair (FIFO) locks on ZooKeeper: exclusive,
read-write, multi-lock and striped, each lease carrying a fencing token.
This package holds the static library, the headers, the CMake package
(find_package(zklock)) and the pkg-config file (zklock.pc).")
# What a consumer's build needs: the headers include spdlog (and so fmt); the
# static library links ZooKeeper's C client, libcrypto and zlib; the CMake
# package finds nlohmann_json.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "libzookeeper-mt-dev, libspdlog-dev, libfmt-dev, libssl-dev, zlib1g-dev, nlohmann-json3-dev")
set(CPACK_DEBIAN_DEV_PACKAGE_SUGGESTS "cmake, pkg-config, zklock")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME zklock)
set(CPACK_COMPONENT_TOOLS_DESCRIPTION
  "fair distributed locks on Apache ZooKeeper - CLI and deadlock detector
zklock inspects lock queues, runs commands under a lock and revokes
waiters; zklock-detector finds deadlock cycles among lock owners and
breaks them. Includes a systemd unit (not enabled) and a commented
/etc/zklock/detector.toml.")
set(CPACK_DEBIAN_TOOLS_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SUGGESTS "zookeeper, stunnel4")
# conffiles: dpkg keeps local edits of /etc/zklock/detector.toml on upgrade.
set(CPACK_DEBIAN_TOOLS_PACKAGE_CONTROL_EXTRA
  ${CMAKE_CURRENT_LIST_DIR}/debian/conffiles
  ${CMAKE_CURRENT_LIST_DIR}/debian/postinst
  ${CMAKE_CURRENT_LIST_DIR}/debian/postrm)
# dpkg-shlibdeps may read only the tools package's files.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS OFF)
# Control files (conffiles, postinst, postrm) with Debian's modes (0644,
# 0755) whatever the checkout's umask gave them (lintian:
# control-file-has-bad-permissions).
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# What Debian Policy wants in every package's /usr/share/doc/PACKAGE
# (12.5, 12.7): the copyright file and, the packages being native (no Debian
# revision), changelog.gz compressed with gzip -9n. Only in the packages
# (component installs, EXCLUDE_FROM_ALL), as /etc/zklock is.
string(TIMESTAMP ZKLOCK_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)  # honours SOURCE_DATE_EPOCH
find_program(ZKLOCK_GZIP gzip)
foreach(component_package dev:libzklock-dev tools:zklock)
  string(REPLACE ":" ";" cp ${component_package})
  list(GET cp 0 component)
  list(GET cp 1 ZKLOCK_DEB_PACKAGE)
  set(dir ${PROJECT_BINARY_DIR}/debian/${ZKLOCK_DEB_PACKAGE})
  configure_file(${CMAKE_CURRENT_LIST_DIR}/debian/changelog.in ${dir}/changelog @ONLY)
  if(ZKLOCK_GZIP)
    execute_process(COMMAND ${ZKLOCK_GZIP} -9nf ${dir}/changelog RESULT_VARIABLE gzip_rc)
    if(NOT gzip_rc EQUAL 0)
      message(FATAL_ERROR "gzip -9n ${dir}/changelog: ${gzip_rc}")
    endif()
    install(FILES ${dir}/changelog.gz DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${ZKLOCK_DEB_PACKAGE}
            COMPONENT ${component} EXCLUDE_FROM_ALL)
  endif()
  install(FILES ${CMAKE_CURRENT_LIST_DIR}/debian/copyright DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${ZKLOCK_DEB_PACKAGE}
          COMPONENT ${component} EXCLUDE_FROM_ALL)
endforeach()

include(CPack)
