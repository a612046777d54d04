// Generic ZooKeeper path helpers: syntax, splitting, joining, and what may
// be a lock path. No protocol knowledge beyond the reserved /zookeeper and
// /zklock subtrees (docs/protocol.md).
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace zklock {

// Splits "/a/b/c" into parent "/a/b" and name "c". Root's children have parent "/".
std::pair<std::string, std::string> split_path(std::string_view path);

// "<parent>/<name>", without doubling the root's slash: join_path("/", "a")
// is "/a". The inverse of split_path for an absolute path.
std::string join_path(std::string_view parent, std::string_view name);

// Validates the syntax of an absolute ZooKeeper path: starts with '/', no
// empty, "." or ".." components, no trailing '/' (except "/" itself), no
// control characters. Throws Error(Errc::invalid_argument) naming the
// problem, with `what` ("path", "lock path") as the noun.
void validate_path_syntax(std::string_view path, std::string_view what = "path");

// Validates an absolute ZooKeeper path as a lock path: starts with '/', no
// empty, "." or ".." components, no trailing '/', not "/" itself, no NUL or
// control characters, and outside /zookeeper and /zklock. Throws Error
// (Errc::invalid_argument) with a message naming the problem.
void validate_lock_path(std::string_view path);

}  // namespace zklock
