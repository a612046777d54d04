// StripedMutex's key → stripe mapping: fixed vectors (the protocol) and an
// even spread (chi-square). Pure: no server.
#include "zklock/striped_mutex.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "zklock/protocol/node_name.hpp"

namespace zklock {
namespace {

// Published FNV-1a 64 vectors, and stripes computed independently
// (a few lines of Python), so a change to either side is caught.
TEST(Striped, KnownVectors) {
  EXPECT_EQ(protocol::fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(protocol::fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(protocol::fnv1a64("foobar"), 0x85944171f73967e8ull);
  EXPECT_EQ(protocol::fnv1a64("acct-991"), 0x498446e17170e272ull);
  EXPECT_EQ(protocol::fnv1a64("caf\xc3\xa9"), 0x48e8823acfa40d89ull);  // UTF-8 bytes, as given

  EXPECT_EQ(StripedMutex::stripe_of("acct-991", 16), 2u);
  EXPECT_EQ(StripedMutex::stripe_of("acct-0", 16), 15u);
  EXPECT_EQ(StripedMutex::stripe_of("key-12345", 16), 10u);
  EXPECT_EQ(StripedMutex::stripe_of("", 16), 5u);
  EXPECT_EQ(StripedMutex::stripe_of("foobar", 7), 6u);
  EXPECT_EQ(StripedMutex::stripe_of("acct-991", 1000), 250u);
  EXPECT_EQ(StripedMutex::stripe_of("anything", 1), 0u);

  EXPECT_EQ(StripedMutex::stripe_path("/locks/account", 2), "/locks/account/stripe-2");
  EXPECT_EQ(StripedMutex::stripe_path("/locks/account", 15), "/locks/account/stripe-15");
}

// Upper critical value of chi-square with k degrees of freedom at p = 0.001
// (Wilson–Hilferty; within 0.5% of the tables for k >= 5).
double chi_square_critical_p001(int k) {
  const double z = 3.090;
  const double a = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

double chi_square(const std::vector<std::string>& keys, std::size_t stripes) {
  std::vector<double> counts(stripes, 0.0);
  for (const auto& k : keys) counts[StripedMutex::stripe_of(k, stripes)] += 1.0;
  const double expected = static_cast<double>(keys.size()) / static_cast<double>(stripes);
  double chi = 0.0;
  for (double c : counts) chi += (c - expected) * (c - expected) / expected;
  return chi;
}

std::vector<std::string> keys_like(const char* kind, int n) {
  std::vector<std::string> keys;
  keys.reserve(static_cast<std::size_t>(n));
  std::mt19937_64 rng(20240401);  // the standard fixes mt19937_64's sequence: deterministic
  char buf[64];
  for (int i = 0; i < n; ++i) {
    if (std::string(kind) == "uuid") {
      std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                    static_cast<unsigned long long>(rng()));
    } else if (std::string(kind) == "user") {
      std::snprintf(buf, sizeof buf, "user:%08d", i);
    } else {
      std::snprintf(buf, sizeof buf, "%s-%d", kind, i);
    }
    keys.emplace_back(buf);
  }
  return keys;
}

// 100,000 keys of several shapes over several stripe counts: the spread is
// within the p = 0.001 bound of a uniform one. Deterministic inputs, so this
// either always passes or always fails.
TEST(Striped, SpreadsKeysEvenly) {
  constexpr int kKeys = 100000;
  for (const char* kind : {"acct", "key", "user", "uuid"}) {
    const auto keys = keys_like(kind, kKeys);
    for (std::size_t stripes : {7u, 16u, 31u, 64u, 100u}) {
      const double chi = chi_square(keys, stripes);
      const double bound = chi_square_critical_p001(static_cast<int>(stripes) - 1);
      std::printf("keys=%-5s stripes=%3zu chi2=%7.1f bound(p=.001)=%6.1f\n", kind, stripes, chi, bound);
      EXPECT_LT(chi, bound) << kind << " keys over " << stripes << " stripes";
    }
  }
}

}  // namespace
}  // namespace zklock
