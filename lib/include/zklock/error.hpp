// zklock's one error shape: Errc, the thrown Error, the async Status, and the
// classifiers callers branch on.
//
// Every fallible synchronous zklock call reports failure by throwing
// zklock::Error; every asynchronous one hands its callback a zklock::Status.
// Both carry the same pair: code() → Errc (ZooKeeper's codes and zklock's
// own), zk_code() → the ZooKeeper return code (0 for zklock's own), and a
// message written for the operator who reads the log. ZooKeeper return codes
// map one-to-one onto the first group of codes in exactly one function,
// errc_from_zk(). Callers ask is_transient() / is_session_fatal() instead of
// keeping their own lists of codes.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace zklock {

enum class Errc {
  ok,  // no failure: the code() of an ok Status (ZOK); never thrown

  // --- ZooKeeper return codes (see zookeeper.h) ---
  system_error,             // ZSYSTEMERROR
  runtime_inconsistency,    // ZRUNTIMEINCONSISTENCY
  data_inconsistency,       // ZDATAINCONSISTENCY
  connection_loss,          // ZCONNECTIONLOSS: the request may or may not have run
  marshalling_error,        // ZMARSHALLINGERROR
  unimplemented,            // ZUNIMPLEMENTED
  operation_timeout,        // ZOPERATIONTIMEOUT
  bad_arguments,            // ZBADARGUMENTS
  invalid_state,            // ZINVALIDSTATE
  new_config_no_quorum,     // ZNEWCONFIGNOQUORUM
  reconfig_in_progress,     // ZRECONFIGINPROGRESS
  ssl_connection_error,     // ZSSLCONNECTIONERROR
  api_error,                // ZAPIERROR
  no_node,                  // ZNONODE
  no_auth,                  // ZNOAUTH
  bad_version,              // ZBADVERSION
  no_children_for_ephemerals,  // ZNOCHILDRENFOREPHEMERALS
  node_exists,              // ZNODEEXISTS
  not_empty,                // ZNOTEMPTY
  session_expired,          // ZSESSIONEXPIRED
  invalid_callback,         // ZINVALIDCALLBACK
  invalid_acl,              // ZINVALIDACL
  auth_failed,              // ZAUTHFAILED
  closing,                  // ZCLOSING: the client is shutting down
  nothing,                  // ZNOTHING
  session_moved,            // ZSESSIONMOVED
  not_read_only,            // ZNOTREADONLY
  ephemeral_on_local_session,  // ZEPHEMERALONLOCALSESSION
  no_watcher,               // ZNOWATCHER
  reconfig_disabled,        // ZRECONFIGDISABLED
  session_closed_require_sasl,  // ZSESSIONCLOSEDREQUIRESASLAUTH
  throttled,                // ZTHROTTLEDOP
  unknown_zk_error,         // a code this build does not know

  // --- zklock's own conditions ---
  invalid_argument,   // bad input from the caller (path, connect string, token text...)
  connect_timeout,    // no session within ClientOptions::connect_timeout
  timeout,            // a bounded wait ran out
  cancelled,          // a stop_token fired
  would_deadlock,     // this owner already holds or waits for this lock here
  deadlock_victim,    // our waiting node was revoked (deadlock detector or operator)
  protocol_error,     // data on ZooKeeper that violates docs/protocol.md
  io_error,           // local file or OS failure
};

// A stable lower-case name for the code ("no_node", "deadlock_victim"...),
// used in logs and in the CLI's JSON output.
std::string_view errc_name(Errc code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(Errc code, std::string message);
  Errc code() const noexcept { return code_; }
  // The ZooKeeper return code this error came from, or 0 for zklock's own.
  int zk_code() const noexcept { return zk_code_; }

  friend Error error_from_zk(int zk_rc, std::string_view context);

 private:
  Errc code_;
  int zk_code_ = 0;
};

// Maps a ZooKeeper return code to an Error whose message is
// "<context>: <zerror text>". Must not be called with ZOK.
Error error_from_zk(int zk_rc, std::string_view context);

// The Errc for a ZooKeeper return code (Errc::ok for ZOK).
Errc errc_from_zk(int zk_rc) noexcept;

// The result of one asynchronous operation: ok, or a failure carrying what an
// Error carries — ZooKeeper's return code, or one of zklock's own failures
// with a message (own_error; e.g. protocol_error for data on ZooKeeper that
// violates docs/protocol.md). Cheap to copy.
class Status {
 public:
  Status() noexcept = default;  // ok
  // From a ZooKeeper return code; ZOK (0) is ok.
  explicit Status(int zk_rc) noexcept : zk_code_(zk_rc), failed_(zk_rc != 0) {
    if (failed_) code_ = errc_from_zk(zk_rc);
  }
  // A failure that is zklock's, not ZooKeeper's: zk_code() is 0, code() is
  // `code`, and error() carries `message`. REQUIRES code != Errc::ok.
  static Status own_error(Errc code, std::string message);

  bool ok() const noexcept { return !failed_; }
  // What failed; Errc::ok for an ok Status.
  Errc code() const noexcept { return code_; }
  // The ZooKeeper return code, or 0 for ok and for zklock's own failures.
  int zk_code() const noexcept { return zk_code_; }
  // True when this is a failure with code `c`.
  bool is(Errc c) const noexcept { return failed_ && code_ == c; }
  // The failure as an Error whose message starts with "<context>: ".
  // REQUIRES !ok().
  Error error(std::string_view context) const;

 private:
  int zk_code_ = 0;
  bool failed_ = false;
  Errc code_ = Errc::ok;
  std::shared_ptr<const std::string> message_;  // own_error() only
};

// --- classifiers ---------------------------------------------------------
// Every Errc is deliberately in at most one of these two groups (error.cpp
// decides each code in one switch; tests/unit/error_test.cpp pins the table).
//
// Transient: the ensemble could not be reached or did not answer in time; a
// request's outcome is unknown (it may or may not have run), the session may
// still be alive, and the same step may succeed once connected again:
//   connection_loss, operation_timeout   (the C client's "outcome unknown")
//   runtime_inconsistency                (a reply out of order: the C client
//                                         drops the connection and completes
//                                         every pending request with it)
//   connect_timeout                      (no session yet; nothing ran)
// Not transient, on purpose: timeout (the caller's own deadline ran out, not
// the ensemble's failure), throttled (the server refused and did not run the
// request; retrying at once is what the throttle is there to stop),
// session_moved (the C client reconnects by itself; the request did not run),
// ssl_connection_error (a TLS handshake failure is usually configuration),
// new_config_no_quorum / reconfig_in_progress (answers to reconfig, which
// zklock never sends).
bool is_transient(Errc code) noexcept;
// Session-fatal: the session is gone for good; every ephemeral node and every
// lease of it is lost, and only a new session can go on:
//   session_expired   (the server expired it)
//   closing           (this Client is shutting down and closed it)
// Not session-fatal, on purpose: auth_failed and session_closed_require_sasl
// (the handle is unusable, but the cause is the credentials, and callers
// report it as such, not as an outage; Client reports ConnectionState::lost
// separately), invalid_state (the C client refused to send, or a synchronous
// call from a callback: no verdict on the session), session_moved.
bool is_session_fatal(Errc code) noexcept;

inline bool is_transient(const Error& e) noexcept { return is_transient(e.code()); }
inline bool is_session_fatal(const Error& e) noexcept { return is_session_fatal(e.code()); }
inline bool is_transient(const Status& s) noexcept { return !s.ok() && is_transient(s.code()); }
inline bool is_session_fatal(const Status& s) noexcept { return !s.ok() && is_session_fatal(s.code()); }

}  // namespace zklock
