// The alerting rules and the Grafana dashboard in deploy/ use only metrics
// that a running zklock-detector exports: every zklock_* name in them must
// be a sample in the binary's /metrics. And every metric family /metrics
// declares is documented in docs/detector.md.
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "zk_harness.hpp"

namespace {

using namespace std::chrono_literals;

const std::string kSource = ZKLOCK_SOURCE_DIR;

// A source file that must exist and say something: an empty read would make
// every check below pass vacuously.
std::string read_file(const std::string& path) {
  auto text = zklock::test::read_file(path);
  if (text.empty()) throw std::runtime_error("cannot read " + path + " (or it is empty)");
  return text;
}

std::set<std::string> metric_names_in(const std::string& text) {
  static const std::regex name(R"(\bzklock_[a-z0-9_]*[a-z0-9])");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), name); it != std::sregex_iterator(); ++it) {
    out.insert(it->str());
  }
  return out;
}

// One GET over plain HTTP/1.0 (the server closes after answering); the body.
std::optional<std::string> http_get(int port, const std::string& path) {
  const auto answer = zklock::test::four_letter_word("127.0.0.1", port, "GET " + path + " HTTP/1.0\r\n\r\n", 5000ms);
  if (!answer || answer->rfind("HTTP/1.", 0) != 0 || answer->find(" 200 ") == std::string::npos) return std::nullopt;
  const auto body = answer->find("\r\n\r\n");
  return body == std::string::npos ? std::nullopt : std::optional(answer->substr(body + 4));
}

// Sample names (before '{' or ' ') and declared families (# TYPE lines).
struct Exposition {
  std::set<std::string> samples, families;
};
Exposition parse(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string family;
      words >> family;
      e.families.insert(family);
    } else if (!line.empty() && line[0] != '#') {
      e.samples.insert(line.substr(0, line.find_first_of("{ ")));
    }
  }
  return e;
}

TEST(DeployMetricNames, RulesAndDashboardUseOnlyMetricsARunningDetectorExports) {
  const auto zk = zklock::test::shared_server().connect_string();
  const int port = zklock::test::free_loopback_port();
  const auto log = std::filesystem::temp_directory_path() /
                   ("zklock-metric-names-" + std::to_string(::getpid()) + ".log");
  zklock::test::SpawnOptions so;
  so.argv = {ZKLOCK_DETECTOR_BINARY, "--zk", zk, "--root", zklock::test::unique_path("metric-names"),
             "--metrics-host", "127.0.0.1", "--metrics-port", std::to_string(port), "--interval", "200ms",
             "--id", "metric-names-test"};
  so.output_file = log;
  so.capture_stdout = false;
  auto detector = zklock::test::ChildProcess::spawn(so);

  // Wait for a leading detector that has scanned: every gauge has its value.
  std::string metrics;
  const bool up = zklock::test::eventually(
      [&] {
        const auto body = http_get(port, "/metrics");
        if (!body) return false;
        metrics = *body;
        return metrics.find("\nzklock_detector_leader 1\n") != std::string::npos &&
               metrics.find("\nzklock_detector_scans_total 0\n") == std::string::npos;
      },
      20s);
  detector.terminate(5000ms);
  ASSERT_TRUE(up) << "no leading detector on /metrics:\n" << metrics << "\n--- log ---\n" << zklock::test::read_file(log);
  std::filesystem::remove(log);

  const auto exported = parse(metrics);
  for (const char* file : {"deploy/prometheus/zklock-detector.rules.yml", "deploy/grafana/zklock-detector.json"}) {
    const auto used = metric_names_in(read_file(kSource + "/" + file));
    EXPECT_GE(used.size(), 5u) << file;
    for (const auto& name : used) {
      EXPECT_TRUE(exported.samples.count(name)) << file << " uses " << name << ", which /metrics does not export:\n"
                                                << metrics;
    }
  }
  // The series the alerts need exist before the first event, at 0 (so that
  // increase() sees the first revocation and the first disconnection).
  EXPECT_NE(metrics.find("zklock_detector_revocations_total{policy=\"youngest\",outcome=\"revoked\"} 0"),
            std::string::npos) << metrics;
  EXPECT_NE(metrics.find("zklock_detector_zookeeper_session_state_changes_total{state=\"suspended\"} 0"),
            std::string::npos) << metrics;
  EXPECT_NE(metrics.find("zklock_detector_scan_interval_seconds 0.2\n"), std::string::npos) << metrics;

  const auto docs = read_file(kSource + "/docs/detector.md");
  for (const auto& family : exported.families) {
    EXPECT_TRUE(docs.find("`" + family + "`") != std::string::npos || docs.find("`" + family + "{") != std::string::npos)
        << family << " is not documented in docs/detector.md";
  }
}

}  // namespace
