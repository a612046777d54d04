// Known answers for the digest ACL id (SHA-1 + base64, from OpenSSL's
// libcrypto) and the fence gate's CRC-32 (from zlib). Every expected value was
// computed outside zklock: the ACL ids by ZooKeeper's own
// DigestAuthenticationProvider (java -cp zookeeper.jar ...
// DigestAuthenticationProvider super:superpw), the rest by Python's hashlib,
// base64 and zlib. A wrong algorithm, byte order or padding fails here.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "crc32.hpp"
#include "digest.hpp"
#include "zklock/client.hpp"

namespace {

std::string hex(const std::array<std::uint8_t, 20>& bytes) {
  std::string out;
  char buf[3];
  for (auto b : bytes) {
    std::snprintf(buf, sizeof buf, "%02x", b);
    out += buf;
  }
  return out;
}

TEST(Checksums, Crc32IsCrc32IsoHdlc) {
  EXPECT_EQ(zklock::crc32("123456789"), 0xCBF43926u);  // the catalogue's check value
  EXPECT_EQ(zklock::crc32(""), 0u);
}

TEST(Checksums, Sha1KnownAnswers) {
  EXPECT_EQ(hex(zklock::sha1("abc")), "a9993e364706816aba3e25717850c26c9cd0d89d");  // FIPS 180 example
  EXPECT_EQ(zklock::base64(zklock::sha1("")), "2jmj7l5rSw0yVb/vlWAYkK/YBwk=");
}

TEST(Checksums, DigestAclIdMatchesZooKeeper) {
  EXPECT_EQ(zklock::digest_acl_id("super", "superpw"), "super:g9oN2HttPfn8MMWJZ2r45Np/LIA=");
  EXPECT_EQ(zklock::digest_acl_id("detector", "s3cret"), "detector:J6pVZ0rAl5zq8sBLhgjeeqEqYsU=");
}

}  // namespace
