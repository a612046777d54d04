# Install-time step (install(SCRIPT), after install(CODE) set
# zklock_unit_source): installs detector/zklock-detector.service into
# lib/systemd/system under the prefix, with its /usr/local paths (ExecStart,
# Documentation) rewritten to the prefix actually installed to, which is only
# known now: `cmake --install --prefix DIR` gives DIR/bin/zklock-detector,
# the Debian package /usr/bin/zklock-detector. /etc/zklock stays as it is.
file(READ "${zklock_unit_source}" unit)
string(REPLACE "/usr/local/" "${CMAKE_INSTALL_PREFIX}/" unit "${unit}")
file(WRITE "${zklock_unit_staging}/zklock-detector.service" "${unit}")
file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system" TYPE FILE
     PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
     FILES "${zklock_unit_staging}/zklock-detector.service")
