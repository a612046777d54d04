#include "zklock/protocol/revoke.hpp"

#include <gtest/gtest.h>

#include "zklock/error.hpp"

namespace zklock {
namespace {

protocol::RevocationRecord sample() {
  protocol::RevocationRecord r;
  r.victim_node = "/locks/y/w_aaaaaaaaaaaaaaaa_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb_0000000002";
  r.victim_owner = "A";
  r.victim_token = "123e4567-e89b-12d3-a456-426614174000:77";
  r.cycle = {{"A", "/locks/y", "/locks/y/w_a"}, {"B", "/locks/x", "/locks/x/w_b"}};
  r.policy = "youngest";
  r.mode = "wait";
  r.detector = "host/99";
  r.time_ms = 1'700'000'000'123;
  return r;
}

protocol::RevocationRequest request() {
  protocol::RevocationRequest q;
  q.victims = {{"/locks/y/w_a", "A", 77}};
  q.checks = {"/locks/x/w_b", "/locks/y/w_a", "/locks/x/w_a0", "/locks/y/w_b0", "/locks/x/w_b"};
  q.leader_node = "/zklock/detector/candidate_0000000001";
  q.record = sample();
  return q;
}

TEST(Revocation, RecordRoundTrip) {
  const auto r = sample();
  const auto bytes = protocol::encode_revocation_record(r);
  EXPECT_EQ(bytes.find("\"reason\""), std::string::npos);  // absent when empty
  auto back = protocol::decode_revocation_record(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, r);

  auto op = r;
  op.cycle.clear();
  op.policy = "operator";
  op.reason = "stuck batch job, ticket OPS-12";
  auto back2 = protocol::decode_revocation_record(encode_revocation_record(op));
  ASSERT_TRUE(back2);
  EXPECT_EQ(*back2, op);
}

TEST(Revocation, RejectsMalformedRecords) {
  EXPECT_FALSE(protocol::decode_revocation_record(""));
  EXPECT_FALSE(protocol::decode_revocation_record("not json"));
  EXPECT_FALSE(protocol::decode_revocation_record("[1,2]"));
  EXPECT_FALSE(protocol::decode_revocation_record(R"({"victim_owner":"A"})"));
  EXPECT_FALSE(protocol::decode_revocation_record(R"({"victim_node":""})"));
  EXPECT_FALSE(protocol::decode_revocation_record(R"({"victim_node":"/l/n","cycle":{"a":1}})"));
  EXPECT_FALSE(protocol::decode_revocation_record(R"({"victim_node":"/l/n","cycle":[{"owner":"A"}]})"));
  EXPECT_FALSE(protocol::decode_revocation_record(R"({"victim_node":7})"));
  EXPECT_FALSE(protocol::decode_revocation_record(std::string(protocol::kMaxRevocationRecordBytes + 1, ' ')));
  auto minimal = protocol::decode_revocation_record(R"({"victim_node":"/l/n"})");
  ASSERT_TRUE(minimal);
  EXPECT_TRUE(minimal->cycle.empty());
}

TEST(Revocation, CycleTextAndMessage) {
  const auto r = sample();
  EXPECT_EQ(protocol::cycle_text(r), "A -[/locks/y]-> B -[/locks/x]-> A");
  const auto msg = protocol::revocation_message(r);
  EXPECT_NE(msg.find("deadlock detector host/99 (policy youngest, mode wait)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("A -[/locks/y]-> B -[/locks/x]-> A"), std::string::npos) << msg;
  auto op = r;
  op.cycle.clear();
  op.detector = "zklock-cli@ops1";
  op.reason = "maintenance";
  EXPECT_EQ(revocation_message(op), "lock node " + r.victim_node + " was revoked by zklock-cli@ops1: maintenance");
}

TEST(Revocation, RecordPathUsesTheNodeName) {
  EXPECT_EQ(protocol::revocation_record_path("/locks/a/b/w_x_y_1"), "/zklock/revocations/w_x_y_1");
  EXPECT_EQ(protocol::revocation_record_path("w_x_y_1"), "/zklock/revocations/w_x_y_1");
}

TEST(Revocation, OpsCheckEveryCycleNodeAndTheLeaderThenCreateThenDelete) {
  const auto q = request();
  const auto ops = protocol::revocation_ops(q, "123e4567-e89b-12d3-a456-426614174000");
  ASSERT_EQ(ops.size(), 1u + 4u + 1u + 1u);
  EXPECT_EQ(ops[0].kind, Op::Kind::check);
  EXPECT_EQ(ops[0].path, *q.leader_node);
  for (int i = 1; i <= 4; ++i) EXPECT_EQ(ops[i].kind, Op::Kind::check);
  EXPECT_EQ(ops[5].kind, Op::Kind::create);
  EXPECT_EQ(ops[5].path, "/zklock/revocations/w_a");
  EXPECT_EQ(ops[5].mode, CreateMode::persistent);
  auto rec = protocol::decode_revocation_record(ops[5].data);
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->victim_node, "/locks/y/w_a");
  EXPECT_EQ(rec->victim_owner, "A");
  EXPECT_EQ(rec->victim_token, "123e4567-e89b-12d3-a456-426614174000:77");
  EXPECT_EQ(rec->cycle.size(), 2u);
  EXPECT_EQ(ops[6].kind, Op::Kind::remove);
  EXPECT_EQ(ops[6].path, "/locks/y/w_a");
}

TEST(Revocation, ModeAllWritesARecordPerDeletedNode) {
  auto q = request();
  q.leader_node.reset();
  q.victims.push_back({"/locks/z/w_held", "A", 12});
  q.record.mode = "all";
  const auto ops = protocol::revocation_ops(q, "");
  ASSERT_EQ(ops.size(), 4u + 2u + 2u);
  EXPECT_EQ(ops[4].path, "/zklock/revocations/w_a");
  EXPECT_EQ(ops[5].path, "/zklock/revocations/w_held");
  EXPECT_EQ(protocol::decode_revocation_record(ops[5].data)->victim_token, "");  // no ensemble id known
  EXPECT_EQ(ops[7].path, "/locks/z/w_held");
  EXPECT_EQ(ops[7].version, -1);  // no version read: any
}

// A victim's token is its node's czxid, and its delete expects the
// version read with it (revoke_async fills both from one stat).
TEST(Revocation, TheTokenAndTheDeleteFollowTheVictimsStat) {
  auto q = request();
  q.victims[0].token_zxid = 4242;  // the node's czxid
  q.victims[0].version = 3;
  const auto ops = protocol::revocation_ops(q, "123e4567-e89b-12d3-a456-426614174000");
  EXPECT_EQ(protocol::decode_revocation_record(ops[5].data)->victim_token, "123e4567-e89b-12d3-a456-426614174000:4242");
  EXPECT_EQ(ops[6].kind, Op::Kind::remove);
  EXPECT_EQ(ops[6].version, 3);
}

std::vector<OpResult> failed_at(std::size_t n, std::size_t idx, Errc code) {
  auto rc = [](Errc c) {
    switch (c) {
      case Errc::no_node: return -101;
      case Errc::node_exists: return -110;
      case Errc::no_auth: return -102;
      case Errc::bad_version: return -103;
      default: return -2;  // ZRUNTIMEINCONSISTENCY
    }
  };
  std::vector<OpResult> out(n);
  for (std::size_t i = idx; i < n; ++i) out[i].status = Status{i == idx ? rc(code) : -2};
  return out;
}

TEST(Revocation, InterpretsEveryFailure) {
  const auto q = request();
  const std::size_t n = 7;
  EXPECT_EQ(protocol::interpret_revocation(q, Status{0}, std::vector<OpResult>(n)).outcome, protocol::RevokeOutcome::revoked);
  EXPECT_EQ(protocol::interpret_revocation(q, Status{0}, std::vector<OpResult>(n)).records,
            std::vector<std::string>{"/zklock/revocations/w_a"});
  EXPECT_EQ(protocol::interpret_revocation(q, Status{-101}, failed_at(n, 0, Errc::no_node)).outcome, protocol::RevokeOutcome::deposed);
  EXPECT_EQ(protocol::interpret_revocation(q, Status{-101}, failed_at(n, 3, Errc::no_node)).outcome, protocol::RevokeOutcome::aborted);
  EXPECT_EQ(protocol::interpret_revocation(q, Status{-110}, failed_at(n, 5, Errc::node_exists)).outcome,
            protocol::RevokeOutcome::aborted);
  auto parent = protocol::interpret_revocation(q, Status{-101}, failed_at(n, 5, Errc::no_node));
  EXPECT_EQ(parent.outcome, protocol::RevokeOutcome::failed);
  EXPECT_EQ(parent.detail.rfind("create of record", 0), 0u);
  EXPECT_EQ(interpret_revocation(q, Status{-101}, failed_at(n, 6, Errc::no_node)).outcome, protocol::RevokeOutcome::aborted);
  // The victim's data rewritten (by someone else: zklock never writes it) since revoke_async read its version.
  EXPECT_EQ(interpret_revocation(q, Status{-103}, failed_at(n, 6, Errc::bad_version)).outcome,
            protocol::RevokeOutcome::aborted);
  EXPECT_EQ(interpret_revocation(q, Status{-102}, failed_at(n, 6, Errc::no_auth)).outcome, protocol::RevokeOutcome::failed);
  EXPECT_EQ(interpret_revocation(q, Status{-4}, {}).outcome, protocol::RevokeOutcome::failed);  // connection loss
}

}  // namespace
}  // namespace zklock
