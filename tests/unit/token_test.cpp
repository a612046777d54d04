#include "zklock/token.hpp"

#include <gtest/gtest.h>

#include "zklock/error.hpp"

#include <vector>

namespace zklock {
namespace {

const std::string kId = "0b6f6a52-4f0e-4c55-9d7e-3f1f2d9c1a10";
const std::string kOther = "11111111-2222-4333-8444-555555555555";

TEST(FencingToken, TextRoundTrip) {
  FencingToken t(kId, 4294967302, 17);
  EXPECT_EQ(t.str(), kId + ":4294967302");
  auto back = FencingToken::parse(t.str());
  EXPECT_EQ(back, t);
  EXPECT_EQ(back.czxid(), 4294967302);
}

TEST(FencingToken, OrdersByCzxidNotSequence) {
  FencingToken older(kId, 100, 9), newer(kId, 200, 1);
  EXPECT_TRUE(older < newer);
  EXPECT_TRUE(newer > older);
  EXPECT_TRUE(older <= older);
}

TEST(FencingToken, DifferentEnsemblesAreUnordered) {
  FencingToken a(kId, 100), b(kOther, 999);
  EXPECT_EQ(a <=> b, std::partial_ordering::unordered);
  EXPECT_FALSE(a < b);
  EXPECT_FALSE(a > b);
  EXPECT_FALSE(a == b);
  EXPECT_EQ(FencingToken() <=> FencingToken(), std::partial_ordering::unordered);
}

TEST(FencingToken, RejectsMalformedText) {
  for (const std::string& bad : std::vector<std::string>{std::string(""), std::string(":"), kId, kId + ":", ":5", kId + ":-1", kId + ":+1",
        kId + ":01", kId + ":1x", kId + ": 1", kId + ":99999999999999999999",
        kId + ":9223372036854775808", "0B6F6A52-4F0E-4C55-9D7E-3F1F2D9C1A10:1",
        "not-a-uuid:1", kId + ":1:2", kId.substr(1) + ":1"}) {
    EXPECT_FALSE(FencingToken::try_parse(bad)) << bad;
    EXPECT_THROW(FencingToken::parse(bad), Error) << bad;
  }
  EXPECT_TRUE(FencingToken::try_parse(kId + ":0"));
  EXPECT_TRUE(FencingToken::try_parse(kId + ":9223372036854775807"));
}

// Every lease its own token: a re-take of a retained node has its czxid and
// the next lease ordinal; the text form appends ".<ordinal>" from 1 on, so a
// node's first lease reads as every token did before ordinals existed.
TEST(FencingToken, LeaseOrdinalsOrderAfterTheirNodeAndBeforeTheNextNode) {
  const auto first = FencingToken::parse(kId + ":300");  // also a token from before ordinals
  const auto re1 = FencingToken::parse(kId + ":300.1");
  const auto re2 = FencingToken::parse(kId + ":300.2");
  const auto re10 = FencingToken::parse(kId + ":300.10");
  const auto next = FencingToken::parse(kId + ":301");
  EXPECT_EQ(re1.str(), kId + ":300.1");
  EXPECT_EQ(first.str(), kId + ":300");
  EXPECT_NE(first, re1);
  EXPECT_TRUE(first < re1 && re1 < re2 && re2 < re10 && re10 < next);
  EXPECT_EQ(re1.czxid(), 300);
  EXPECT_EQ(re1, FencingToken::parse(re1.str()));
  EXPECT_EQ(FencingToken::parse(kId + ":300.1") <=> FencingToken::parse(kOther + ":300.2"),
            std::partial_ordering::unordered);
  EXPECT_TRUE(FencingToken::try_parse(kId + ":0.9223372036854775807"));
  for (const std::string& bad : {kId + ":300.0", kId + ":300.", kId + ":.1", kId + ":300.01", kId + ":300.-1",
                                 kId + ":300.+1", kId + ":300.1.2", kId + ":300.1x", kId + ":300.9223372036854775808",
                                 kId + ":300:1"}) {
    EXPECT_FALSE(FencingToken::try_parse(bad)) << bad;
  }
}

}  // namespace
}  // namespace zklock
