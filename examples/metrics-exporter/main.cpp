// zklock-metrics-exporter: a Client's lock metrics on a Prometheus endpoint.
//
//   zklock-metrics-exporter --connect HOST:PORT --lock-path /locks/x
//       [--port N] [--host ADDR] [--cycles N] [--hold-ms MS] [--retain-ms MS]
//       [--linger SECONDS]
//
// Plugs a PrometheusObserver into ClientOptions::observer, serves /metrics
// from the start, acquires and releases --lock-path --cycles times (holding
// each lease --hold-ms), and keeps serving --linger seconds after the last
// cycle. Prints "listening on HOST:PORT" once the endpoint is up (--port 0
// picks a free port) and "cycles done N" after the loop. Exit codes: 0 done,
// 64 usage, 69 ZooKeeper or the endpoint unavailable (sysexits(3)).
#include <CLI/CLI.hpp>

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "prometheus_observer.hpp"
#include "zklock/client.hpp"
#include "zklock/error.hpp"
#include "zklock/fair_mutex.hpp"

namespace {

constexpr int kExitUsage = 64;        // EX_USAGE
constexpr int kExitUnavailable = 69;  // EX_UNAVAILABLE

// The endpoint on its own thread; the destructor stops and joins it.
class Endpoint {
 public:
  Endpoint(const metrics_exporter::PrometheusObserver& observer, const std::string& host, int port) {
    server_.Get("/metrics", [&observer](const httplib::Request&, httplib::Response& res) {
      res.set_content(observer.render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    port_ = port == 0 ? server_.bind_to_any_port(host.c_str()) : (server_.bind_to_port(host.c_str(), port) ? port : -1);
    if (port_ < 0) throw zklock::Error(zklock::Errc::io_error, "cannot listen on " + host + ":" + std::to_string(port));
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~Endpoint() {
    server_.stop();
    thread_.join();
  }
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;
  int port() const { return port_; }

 private:
  httplib::Server server_;
  int port_ = -1;
  std::thread thread_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Acquire and release one zklock lock in a loop; serve the client's lock metrics on /metrics."};
  std::string connect = "127.0.0.1:2181", lock_path, host = "127.0.0.1";
  int port = 9464, cycles = 10, hold_ms = 10, retain_ms = 0;
  double linger = 0;
  app.add_option("--connect", connect, "ZooKeeper connect string")->capture_default_str();
  app.add_option("--lock-path", lock_path, "The lock's path (a FairMutex)")->required();
  app.add_option("--host", host, "Address /metrics listens on")->capture_default_str();
  app.add_option("--port", port, "Port /metrics listens on (0: any free port)")->capture_default_str();
  app.add_option("--cycles", cycles, "Acquire/release cycles to run")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--hold-ms", hold_ms, "How long each lease is held")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--retain-ms", retain_ms, "MutexOptions::retain (0: off; on, re-takes count as retained)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--linger", linger, "Seconds to keep serving /metrics after the last cycle")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }

  try {
    auto observer = std::make_shared<metrics_exporter::PrometheusObserver>();
    Endpoint endpoint(*observer, host, port);
    std::cout << "listening on " << host << ":" << endpoint.port() << std::endl;

    zklock::ClientOptions options;
    options.connect = connect;
    options.observer = observer;
    zklock::Client client(options);
    {
      zklock::FairMutex mutex(client, lock_path, zklock::MutexOptions{.retain = std::chrono::milliseconds(retain_ms)});
      for (int i = 0; i < cycles; ++i) {
        auto lease = mutex.acquire();
        std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
        lease.release();
        observer->cycle_done();
      }
    }
    std::cout << "cycles done " << cycles << std::endl;
    std::this_thread::sleep_for(std::chrono::duration<double>(linger));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "zklock-metrics-exporter: " << e.what() << "\n";
    return kExitUnavailable;
  }
}
