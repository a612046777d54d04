// TLS to ZooKeeper by sidecar (docs/operations.md, "TLS to ZooKeeper").
//
// Debian's ZooKeeper C client is built without TLS, so zklock speaks plain
// TCP to a local stunnel in client mode, which carries the bytes over TLS to
// ZooKeeper's secureClientPort (the Netty connection factory). Here, all on
// loopback and all real:
//   - keytool makes the server's keystore and a truststore holding the
//     stunnel client's certificate (made by openssl); ZooKeeper requires it
//     (ssl.clientAuth=need), and stunnel verifies the server's certificate;
//   - a FairMutex is taken and released through the tunnel, and a plain TCP
//     client pointed straight at the secure port gets no session;
//   - the zklock-detector binary, connected only through the tunnel, becomes
//     leader and breaks a real deadlock between two owners that also connect
//     through it.
// The test skips, saying why, when stunnel4, keytool or openssl is missing
// (scripts/install-deps installs stunnel4 when it can).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "zk_harness.hpp"
#include "zklock/client.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using std::chrono::milliseconds;
using test::ChildProcess;
using test::eventually;
using test::read_file;
using test::SpawnOptions;

constexpr const char* kPassword = "zklock-test-secret";
constexpr const char* kClientCn = "zklock-tls-test-client";

// The program's full path if it is in PATH, else empty.
std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path p = fs::path(dir) / name;
    if (!dir.empty() && ::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return {};
}

// Runs a tool to completion (bounded); throws with its output unless it exits 0.
void run(const std::vector<std::string>& argv) {
  const auto r = test::run_to_exit({.argv = argv}, 60s);
  if (r.code != 0) throw test::HarnessError(argv[0] + " failed (" + r.describe() + ")");
}

// True once something accepts TCP connections on 127.0.0.1:port.
bool accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// ZooKeeper with a TLS-only secureClientPort (Netty), and stunnel in client
// mode offering plain TCP on loopback. The server's plain clientPort stays
// open only because the harness checks readiness with `ruok` through it;
// zklock is never given that port.
class TlsSidecar {
 public:
  // Empty when every tool is there; otherwise why the test must skip.
  static std::string missing_tools() {
    std::string missing;
    for (const char* tool : {"stunnel4", "keytool", "openssl"}) {
      if (find_program(tool).empty()) missing += std::string(missing.empty() ? "" : ", ") + tool;
    }
    return missing;
  }

  TlsSidecar() {
    make_certificates();
    secure_port_ = test::free_loopback_port();
    test::ZkServerOptions zo;
    zo.extra_classpath = {"/usr/share/java/netty-codec.jar", "/usr/share/java/netty-resolver.jar",
                          "/usr/share/java/netty-transport-native-unix-common.jar"};
    zo.extra_config = {
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
        "secureClientPort=" + std::to_string(secure_port_),
        "secureClientPortAddress=127.0.0.1",
        "ssl.keyStore.location=" + (dir_.path() / "server.p12").string(),
        "ssl.keyStore.password=" + std::string(kPassword),
        "ssl.keyStore.type=PKCS12",
        "ssl.trustStore.location=" + (dir_.path() / "trust.p12").string(),
        "ssl.trustStore.password=" + std::string(kPassword),
        "ssl.trustStore.type=PKCS12",
        "ssl.clientAuth=need",
    };
    server_ = std::make_unique<test::ZkServer>(zo);
    server_->start();
    start_stunnel();
  }

  // What zklock connects to: stunnel's plain local port.
  std::string connect_string() const { return "127.0.0.1:" + std::to_string(tunnel_port_); }
  std::string secure_connect_string() const { return "127.0.0.1:" + std::to_string(secure_port_); }
  test::ZkServer& server() { return *server_; }
  std::string stunnel_log() const { return read_file(dir_.path() / "stunnel.log"); }
  std::string server_log() const { return server_->log_tail(400); }
  const fs::path& dir() const { return dir_.path(); }

 private:
  void make_certificates() {
    const auto d = dir_.path();
    const std::string keytool = find_program("keytool"), openssl = find_program("openssl");
    // The server's key pair; its certificate names 127.0.0.1 and localhost.
    run({keytool, "-genkeypair", "-alias", "zookeeper", "-keyalg", "EC", "-groupname", "secp256r1",
         "-validity", "2", "-dname", "CN=localhost", "-ext", "SAN=ip:127.0.0.1,dns:localhost",
         "-keystore", (d / "server.p12").string(), "-storetype", "PKCS12", "-storepass", kPassword,
         "-keypass", kPassword});
    // Its certificate, PEM, for stunnel to verify the server against.
    run({keytool, "-exportcert", "-rfc", "-alias", "zookeeper", "-keystore", (d / "server.p12").string(),
         "-storetype", "PKCS12", "-storepass", kPassword, "-file", (d / "server.pem").string()});
    // stunnel's client key and certificate; ZooKeeper trusts exactly it.
    run({openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", (d / "client.key").string(), "-out", (d / "client.pem").string(), "-days", "2", "-subj",
         std::string("/CN=") + kClientCn});
    run({keytool, "-importcert", "-noprompt", "-alias", "stunnel-client", "-file", (d / "client.pem").string(),
         "-keystore", (d / "trust.p12").string(), "-storetype", "PKCS12", "-storepass", kPassword});
  }

  void start_stunnel() {
    const auto d = dir_.path();
    for (int attempt = 0;; ++attempt) {
      tunnel_port_ = test::free_loopback_port();
      std::ofstream(d / "stunnel.conf", std::ios::trunc)
          << "foreground = yes\n"
          << "pid =\n"
          << "debug = 6\n"
          << "output = " << (d / "stunnel.log").string() << "\n"
          << "[zookeeper]\n"
          << "client = yes\n"
          << "accept = 127.0.0.1:" << tunnel_port_ << "\n"
          << "connect = 127.0.0.1:" << secure_port_ << "\n"
          << "cert = " << (d / "client.pem").string() << "\n"
          << "key = " << (d / "client.key").string() << "\n"
          << "CAfile = " << (d / "server.pem").string() << "\n"
          << "verifyPeer = yes\n"
          << "checkHost = localhost\n";
      SpawnOptions so;
      so.argv = {find_program("stunnel4"), (d / "stunnel.conf").string()};
      so.output_file = d / "stunnel.out";
      so.capture_stdout = false;
      stunnel_ = ChildProcess::spawn(so);
      if (eventually([&] { return accepts(tunnel_port_) || !stunnel_.running(); }, 10s) && stunnel_.running()) {
        return;
      }
      stunnel_.terminate(1s);
      if (attempt == 2) {
        throw test::HarnessError("stunnel did not start:\n" + read_file(d / "stunnel.out") + stunnel_log());
      }
    }
  }

  test::TempDir dir_{"zklock-tls-"};  // first: outlives the server and stunnel that use its files
  int secure_port_ = 0;
  int tunnel_port_ = 0;
  std::unique_ptr<test::ZkServer> server_;
  ChildProcess stunnel_;
};

#define SKIP_WITHOUT_TLS_TOOLS()                                                                          \
  do {                                                                                                    \
    if (const auto missing = TlsSidecar::missing_tools(); !missing.empty()) {                            \
      GTEST_SKIP() << "TLS sidecar test skipped: " << missing                                            \
                   << " not installed (Debian packages stunnel4, default-jdk-headless, openssl; "         \
                      "scripts/install-deps installs them when it can)";                                  \
    }                                                                                                     \
  } while (0)

ClientOptions through(const std::string& connect) {
  ClientOptions o;
  o.connect = connect;
  o.session_timeout = 4s;
  o.connect_timeout = 10s;
  return o;
}

TEST(TlsSidecar, ALockIsTakenAndReleasedThroughStunnelAndThePlainClientIsRefused) {
  SKIP_WITHOUT_TLS_TOOLS();
  TlsSidecar tls;
  const auto lock = test::unique_lock_path("tls");
  {
    Client client(through(tls.connect_string()));
    FairMutex mutex(client, lock);
    Lease lease = mutex.acquire({.owner = "tls-owner"});
    ASSERT_TRUE(lease);
    EXPECT_EQ(client.children(lock).size(), 1u) << "the holder's node is on the server";
    std::printf("[ tls      ] holding %s through stunnel, token %s\n", lock.c_str(), lease.token().str().c_str());
    lease.release();
    EXPECT_TRUE(client.children(lock).empty()) << "released";
  }
  // stunnel verified the server's certificate and the server ours: the bytes
  // went over TLS, and ZooKeeper saw the x509 identity.
  const auto slog = tls.stunnel_log();
  EXPECT_NE(slog.find("Certificate accepted at depth=0: CN=localhost"), std::string::npos) << slog;
  const auto suite = slog.find(" ciphersuite: ");  // e.g. "TLSv1.3 ciphersuite: TLS_AES_256_GCM_SHA384 ..."
  ASSERT_NE(suite, std::string::npos) << slog;
  const auto line_start = slog.rfind('\n', suite) + 1;
  std::printf("[ tls      ] stunnel: %s\n", slog.substr(line_start, slog.find('\n', suite) - line_start).c_str());
  EXPECT_TRUE(eventually([&] {
    return tls.server_log().find(std::string("Authenticated Id 'CN=") + kClientCn + "' for Scheme 'x509'") !=
           std::string::npos;
  }, 5s)) << tls.server_log();

  // The secure port speaks only TLS: the C client in plain TCP gets no session.
  auto plain = through(tls.secure_connect_string());
  plain.connect_timeout = 3s;
  // (The C client logs each failed attempt at ERROR below: expected here.)
  try {
    Client direct(plain);
    ADD_FAILURE() << "a plain-TCP session on the secureClientPort";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::connect_timeout) << e.what();
  }
}

// The detector binary, only through the tunnel, breaks a real deadlock
// between two owners who also connect through it.
TEST(TlsSidecar, TheDetectorBinaryBreaksADeadlockThroughStunnel) {
  SKIP_WITHOUT_TLS_TOOLS();
  TlsSidecar tls;
  const auto root = test::unique_lock_path("tls-det");
  const auto id = "tls-detector-" + std::to_string(::getpid());
  const auto det_log = tls.dir() / "detector.log";
  SpawnOptions so;
  so.argv = {ZKLOCK_DETECTOR_BINARY, "--zk", tls.connect_string(), "--root", root, "--min-wait", "500ms",
             "--interval", "200ms", "--session-timeout", "4s", "--metrics-port", "0", "--id", id};
  so.output_file = det_log;
  so.capture_stdout = false;
  auto detector = ChildProcess::spawn(so);
  ASSERT_TRUE(eventually([&] { return read_file(det_log).find("now the leader") != std::string::npos; }, 30s))
      << read_file(det_log);

  Client ca(through(tls.connect_string())), cb(through(tls.connect_string()));
  const auto x = root + "/x", y = root + "/y";
  FairMutex ax(ca, x), ay(ca, y), bx(cb, x), by(cb, y);
  Lease a_holds_x = ax.acquire({.owner = "alice"});
  Lease b_holds_y = by.acquire({.owner = "bob"});
  // Shared with the callbacks, which may outlive this scope if a check fails.
  auto a_wait = std::make_shared<std::promise<AcquireResult>>();
  auto b_wait = std::make_shared<std::promise<AcquireResult>>();
  auto a_future = a_wait->get_future(), b_future = b_wait->get_future();
  ay.acquire_async([a_wait](AcquireResult r) { a_wait->set_value(std::move(r)); }, {.owner = "alice"});
  ASSERT_TRUE(eventually([&] { return cb.children(y).size() == 2; }, 10s)) << "alice's wait for y is queued";
  bx.acquire_async([b_wait](AcquireResult r) { b_wait->set_value(std::move(r)); }, {.owner = "bob"});

  // Bob's wait is the youngest node of the cycle: the default policy revokes it.
  ASSERT_EQ(b_future.wait_for(20s), std::future_status::ready) << read_file(det_log);
  auto b_result = b_future.get();
  ASSERT_TRUE(b_result.error) << "bob was granted x while alice holds it";
  EXPECT_EQ(b_result.error->code(), Errc::deadlock_victim) << b_result.error->what();
  EXPECT_NE(std::string(b_result.error->what()).find("deadlock detector " + id), std::string::npos)
      << b_result.error->what();

  b_holds_y.release();  // the victim backs off; alice gets y
  ASSERT_EQ(a_future.wait_for(15s), std::future_status::ready);
  auto a_result = a_future.get();
  ASSERT_FALSE(a_result.error) << a_result.error->what();
  a_result.lease.release();
  a_holds_x.release();

  EXPECT_TRUE(eventually([&] { return read_file(det_log).find("outcome revoked") != std::string::npos; }, 5s))
      << read_file(det_log);
  EXPECT_EQ(detector.terminate(5s).describe(), "exit 0") << read_file(det_log);
}

}  // namespace
}  // namespace zklock
