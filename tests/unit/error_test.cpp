// The one error shape (zklock/error.hpp): Status and Error carry the same
// pair, and every Errc is classified on purpose.
#include <zookeeper/zookeeper.h>

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "zklock/error.hpp"

namespace zklock {
namespace {

// Every Errc, found through errc_name() (whose switch has no default, so a new
// code without a name does not compile).
std::vector<Errc> all_codes() {
  std::vector<Errc> out;
  for (int i = 0; errc_name(static_cast<Errc>(i)) != "unknown"; ++i) out.push_back(static_cast<Errc>(i));
  return out;
}

// The decision table, written out here a second time on purpose: a new Errc
// fails EveryCodeIsClassifiedDeliberately until it is added to this count and,
// if it is transient or session-fatal, to its list.
constexpr std::size_t kCodes = 42;
const std::set<Errc> kTransient = {Errc::connection_loss, Errc::operation_timeout, Errc::connect_timeout,
                                   Errc::runtime_inconsistency};
const std::set<Errc> kSessionFatal = {Errc::session_expired, Errc::closing};

TEST(ErrorClassifiers, EveryCodeIsClassifiedDeliberately) {
  const auto codes = all_codes();
  ASSERT_EQ(codes.size(), kCodes) << "a new Errc: decide whether it is transient or session-fatal (error.cpp), "
                                     "then update this table";
  for (const Errc c : codes) {
    SCOPED_TRACE(std::string(errc_name(c)));
    EXPECT_EQ(is_transient(c), kTransient.count(c) == 1);
    EXPECT_EQ(is_session_fatal(c), kSessionFatal.count(c) == 1);
    EXPECT_FALSE(is_transient(c) && is_session_fatal(c));
  }
}

TEST(ErrorClassifiers, BorderlineCodesAreNeither) {
  // The choices documented in error.hpp.
  for (const Errc c : {Errc::timeout, Errc::throttled, Errc::session_moved, Errc::ssl_connection_error,
                       Errc::auth_failed, Errc::session_closed_require_sasl, Errc::invalid_state, Errc::no_node}) {
    SCOPED_TRACE(std::string(errc_name(c)));
    EXPECT_FALSE(is_transient(c));
    EXPECT_FALSE(is_session_fatal(c));
  }
}

TEST(ErrorClassifiers, StatusAndErrorOverloadsAgree) {
  EXPECT_TRUE(is_transient(Status{ZCONNECTIONLOSS}));
  EXPECT_TRUE(is_transient(Status{ZOPERATIONTIMEOUT}));
  EXPECT_TRUE(is_transient(Status{ZRUNTIMEINCONSISTENCY}));  // the C client dropped a garbled connection
  EXPECT_TRUE(is_session_fatal(Status{ZSESSIONEXPIRED}));
  EXPECT_TRUE(is_session_fatal(Status{ZCLOSING}));
  EXPECT_FALSE(is_transient(Status{}));
  EXPECT_FALSE(is_session_fatal(Status{}));
  EXPECT_TRUE(is_transient(Status{ZCONNECTIONLOSS}.error("x")));
  EXPECT_TRUE(is_session_fatal(Status::own_error(Errc::closing, "shutting down")));
  EXPECT_TRUE(is_transient(Error(Errc::connect_timeout, "no server")));
}

TEST(Status, OkCarriesNoCodes) {
  const Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.zk_code(), 0);
  EXPECT_EQ(ok.code(), Errc::ok);
  EXPECT_FALSE(ok.is(Errc::ok));
  EXPECT_FALSE(ok.is(Errc::unknown_zk_error));
  EXPECT_TRUE(Status{ZOK}.ok());
}

TEST(Status, ZooKeeperFailureCarriesTheSamePairAsError) {
  for (int rc = -1; rc >= -130; --rc) {
    const Status st{rc};
    const Error e = error_from_zk(rc, "ctx");
    SCOPED_TRACE(rc);
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.code(), e.code());
    EXPECT_EQ(st.zk_code(), rc);
    EXPECT_EQ(e.zk_code(), rc);
    EXPECT_TRUE(st.is(e.code()));
    const Error from_status = st.error("ctx");
    EXPECT_EQ(from_status.code(), e.code());
    EXPECT_EQ(from_status.zk_code(), rc);
    EXPECT_STREQ(from_status.what(), e.what());
  }
  EXPECT_EQ(Status{ZNONODE}.code(), Errc::no_node);
}

TEST(Status, OwnFailureHasNoZooKeeperCode) {
  const auto st = Status::own_error(Errc::protocol_error, "/zklock/ensemble-id holds 'x'");
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Errc::protocol_error);
  EXPECT_EQ(st.zk_code(), 0);
  EXPECT_TRUE(st.is(Errc::protocol_error));
  EXPECT_FALSE(st.is(Errc::api_error));
  const Error e = st.error("reading the ensemble id");
  EXPECT_EQ(e.code(), Errc::protocol_error);
  EXPECT_EQ(e.zk_code(), 0);
  EXPECT_STREQ(e.what(), "reading the ensemble id: /zklock/ensemble-id holds 'x'");
  const Status copy = st;  // copies share the message
  EXPECT_STREQ(copy.error("again").what(), "again: /zklock/ensemble-id holds 'x'");
}

}  // namespace
}  // namespace zklock
