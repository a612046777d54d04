// A minimal service using zklock through find_package(zklock):
//   zklock-consumer --zk 127.0.0.1:2181 /locks/invoice-42
// takes the lock, "writes" with its fencing token, and releases.
// `zklock-consumer --self-check` exercises the installed headers and library
// without a server (used by CI to prove the install is consumable): a token,
// a digest ACL id (libcrypto) and a fence gate's state file (zlib), so every
// link dependency the install declares is needed and checked.
//
// The same file is built without CMake, as a Make or Meson build would:
//   c++ -std=c++20 main.cpp $(pkg-config --cflags --libs zklock)
#include <zklock/client.hpp>
#include <zklock/fair_mutex.hpp>
#include <zklock/fence_gate.hpp>
#include <zklock/token.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <unistd.h>

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  if (argc == 2 && std::strcmp(argv[1], "--self-check") == 0) {
    const auto t = zklock::FencingToken::parse("0b6f6a52-4f0e-4c55-9d7e-3f1f2d9c1a10:42");
    std::printf("zklock consumer: parsed token %s\n", t.str().c_str());
    // ZooKeeper's own DigestAuthenticationProvider gives this id.
    const auto acl = zklock::digest_acl_id("super", "superpw");
    std::printf("zklock consumer: digest ACL id %s\n", acl.c_str());
    const auto dir = std::filesystem::temp_directory_path() / ("zklock-consumer-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    bool gate_ok = false;
    {
      zklock::FenceGate gate({.state_file = dir / "marks"});
      gate_ok = static_cast<bool>(gate.admit("invoice-42", t));
    }
    {
      zklock::FenceGate reopened({.state_file = dir / "marks", .require_state_file = true});
      gate_ok = gate_ok && reopened.highest("invoice-42") == t;
    }
    std::filesystem::remove_all(dir);
    std::printf("zklock consumer: fence gate state file %s\n", gate_ok ? "ok" : "WRONG");
    return t.czxid() == 42 && acl == "super:g9oN2HttPfn8MMWJZ2r45Np/LIA=" && gate_ok ? 0 : 1;
  }
  if (argc != 4 || std::strcmp(argv[1], "--zk") != 0) {
    std::fprintf(stderr, "usage: zklock-consumer --zk HOST:PORT LOCK_PATH | --self-check\n");
    return 64;
  }
  try {
    zklock::Client client({.connect = argv[2], .session_timeout = 10s});
    zklock::FairMutex mutex(client, argv[3]);
    zklock::Lease lease = mutex.acquire();
    // Hand the token to the protected resource with every write; it rejects
    // any token lower than the highest it has seen (docs/fencing.md).
    std::printf("holding %s with token %s\n", argv[3], lease.token().str().c_str());
    lease.release();
    return 0;
  } catch (const zklock::Error& e) {
    std::fprintf(stderr, "zklock-consumer: %s\n", e.what());
    return 69;
  }
}
