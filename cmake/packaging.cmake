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

set(ZKLOCK_PACKAGE_CONTACT "zklock maintainers <zklock-maintainers@invalid>"
    CACHE STRING "Maintainer field of the Debian packages")

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

include(CPack)
