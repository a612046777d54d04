// zklock's single error type.
//
// Every fallible zklock call reports failure by throwing zklock::Error (or, in
// the async API, by handing one to the callback). An Error carries a code that
// callers branch on and a message written for the operator who reads the log.
// ZooKeeper return codes map one-to-one onto the first group of codes; the
// mapping lives in exactly one function, error_from_zk().
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace zklock {

enum class Errc {
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

// The Errc for a ZooKeeper return code (ZOK is not an error: do not pass it).
Errc errc_from_zk(int zk_rc) noexcept;

}  // namespace zklock
