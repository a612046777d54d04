// FenceGate and lease ordinals (docs/fencing.md, "The token"): tokens of one
// ensemble order as (czxid, lease ordinal), so a re-take's lease refuses the
// earlier leases of its node and a later node refuses them all; and a state
// file of plain tokens, as written before ordinals existed, keeps working.
// Through the text form only: what a service receives.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "zklock/fence_gate.hpp"

namespace zklock {
namespace {

namespace fs = std::filesystem;
using Verdict = AdmitResult::Verdict;

const std::string kId = "0b6f6a52-4f0e-4c55-9d7e-3f1f2d9c1a10";

std::string tok(const std::string& czxid_and_ordinal) { return kId + ":" + czxid_and_ordinal; }

TEST(FenceGateLease, ALaterLeaseOfANodeOrdersAfterItsEarlierLeasesAndAnotherHolderAfterAll) {
  FenceGate gate;
  ASSERT_TRUE(gate.admit("acct", tok("300")));
  auto re = gate.admit("acct", tok("300.1"));  // the node's first re-take
  EXPECT_TRUE(re) << re.reason();
  EXPECT_TRUE(re.raised);
  EXPECT_EQ(gate.admit("acct", tok("300")).verdict, Verdict::stale) << "the first lease's late write";
  auto again = gate.admit("acct", tok("300.1"));
  EXPECT_TRUE(again) << "a lease may write again";
  EXPECT_FALSE(again.raised);
  EXPECT_TRUE(gate.admit("acct", tok("300.12")).raised) << "ordinals compare as numbers";
  EXPECT_EQ(gate.admit("acct", tok("300.2")).verdict, Verdict::stale);
  EXPECT_TRUE(gate.admit("acct", tok("301")).raised) << "a later node orders after every lease of 300";
  const auto late = gate.admit("acct", tok("300.99"));
  EXPECT_EQ(late.verdict, Verdict::stale);
  EXPECT_EQ(late.reason(), "stale token " + tok("300.99") + ": highest seen " + tok("301"));
  EXPECT_EQ(gate.admit("acct", tok("300.0")).verdict, Verdict::malformed) << "ordinal 0 is written without .0";
}

TEST(FenceGateLease, AStateFileOfPlainTokensKeepsWorking) {
  const auto dir = fs::temp_directory_path() / ("zklock-fence-lease-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  FenceGateOptions opts;
  opts.state_file = dir / "marks";
  auto body = [&] {
    std::ifstream in(opts.state_file, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    const auto text = s.str();
    return text.substr(text.find('\n') + 1);
  };
  {
    FenceGate gate(opts);
    ASSERT_TRUE(gate.admit("acct", tok("300")));
  }
  EXPECT_EQ(body(), tok("300") + " acct\n") << "a plain token is stored as it always was";
  {
    FenceGate gate(opts);  // reads the plain mark: (300, 0)
    EXPECT_EQ(gate.admit("acct", tok("299")).verdict, Verdict::stale);
    EXPECT_TRUE(gate.admit("acct", tok("300.1")).raised) << "its node's next lease orders after it";
    EXPECT_EQ(gate.admit("acct", tok("300")).verdict, Verdict::stale);
  }
  EXPECT_EQ(body(), tok("300.1") + " acct\n");
  {
    FenceGate gate(opts);
    ASSERT_TRUE(gate.highest("acct"));
    EXPECT_EQ(gate.highest("acct")->str(), tok("300.1"));
    EXPECT_EQ(gate.admit("acct", tok("300")).verdict, Verdict::stale);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace zklock
