// The C client's log bridge: ZooKeeper's own log lines go to spdlog.
#pragma once

#include <zookeeper/zookeeper.h>

#include <memory>

#include <spdlog/spdlog.h>

#include "zklock/client.hpp"

namespace zklock {

// The C client's log callback carries no context, so every C-client thread
// logs through one process-wide logger: the one the latest Client to start
// set (spdlog's default logger before any did). Thread-safe.
void set_zk_c_logger(std::shared_ptr<spdlog::logger> logger);
// For zookeeper_init2: maps ZOO_ERROR/WARN/INFO/DEBUG to spdlog levels and
// logs a line repeated within a second only once, with a count.
void zk_log_callback(const char* message) noexcept;
ZooLogLevel to_zoo_level(LogLevel l);

}  // namespace zklock
