// Regressions found by fuzzing the parsers of untrusted input (fuzz/,
// scripts/fuzz). Each input is inline, with the finding it reproduces.
//
// Numbers in lock node data and revocation records are read with
// nlohmann::json's value<integer>(), which converts a JSON number to the
// integer type with a plain cast. A number outside the integer's range
// ("pid": 9.2e21, "time": 1e30, "priority": 1e10) is parsed by nlohmann as a
// double, and the cast is undefined behaviour (UBSan: "is outside the range of
// representable values of type 'long'"); on x86-64 it yields INT64_MIN and the
// record is accepted with a garbage field. An integer beyond int's range is
// silently truncated ("priority": 4294967297 reads as 1). The decoders promise
// nullopt for malformed data: out-of-range numbers must be refused.
#include <gtest/gtest.h>

#include "zklock/protocol/node_data.hpp"
#include "zklock/protocol/revocation.hpp"

namespace zklock {
namespace {

// fuzz_node_data, crash-7329799ca8e99f23735bbec928f5e91994762508 (found in 20 s).
TEST(ParserFuzzRegression, NodeDataPidBeyondInt64IsRejected) {
  EXPECT_FALSE(protocol::decode_node_data(R"({"owner":"\u00e9\ud83d\ude00","host":"h","pid":9203623372036854775807,)"
                                R"("mode":"exclusive","priority":2147483647})"));
  EXPECT_FALSE(protocol::decode_node_data(R"({"owner":"a","host":"h","pid":1e300,"mode":"exclusive","priority":0})"));
}

TEST(ParserFuzzRegression, NodeDataPriorityBeyondIntIsRejected) {
  EXPECT_FALSE(protocol::decode_node_data(R"({"owner":"a","host":"h","pid":1,"mode":"exclusive","priority":1e10})"));
  EXPECT_FALSE(protocol::decode_node_data(R"({"owner":"a","host":"h","pid":1,"mode":"exclusive","priority":4294967297})"));
}

TEST(ParserFuzzRegression, RevocationRecordNumbersOutOfRangeAreRejected) {
  const std::string head = R"({"victim_node":"/locks/x/n","victim_owner":"o","victim_token":"","cycle":[],)"
                           R"("policy":"operator","mode":"all","detector":"d","reason":"",)";
  EXPECT_FALSE(protocol::decode_revocation_record(head + R"("version":1,"time":1e30})"));
  EXPECT_FALSE(protocol::decode_revocation_record(head + R"("version":1e30,"time":1})"));
  EXPECT_FALSE(protocol::decode_revocation_record(head + R"("version":4294967297,"time":1})"));
  // In range, the same record decodes.
  EXPECT_TRUE(protocol::decode_revocation_record(head + R"("version":1,"time":1700000000123})"));
}

}  // namespace
}  // namespace zklock
