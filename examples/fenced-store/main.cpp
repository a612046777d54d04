// fenced-store: a command-line key-value store that rejects stale lock holders.
//
//   fenced-store [--db PATH] put KEY VALUE --token <ensemble-id>:<czxid>[.<ordinal>] [--fence NAME]
//   fenced-store [--db PATH] get KEY
//
// The database path comes from --db, else $FENCED_STORE_DB, else
// ./fenced-store.db. The fence defaults to the key; keys guarded by one lock
// should name one fence (--fence), so they share one highest token. Exit
// codes follow sysexits(3):
//   0  success (get prints the value and a newline on stdout)
//   64 usage error, including a malformed token
//   65 put rejected: stale token, or a token from another source ensemble
//   66 get: no such key
//   74 the database cannot be opened or written
// A rejection, a missing key and a database error print one line on stderr;
// a usage error prints the problem and a short usage hint.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "store.hpp"
#include "zklock/error.hpp"
#include "zklock/token.hpp"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitUsage = 64;     // EX_USAGE
constexpr int kExitRejected = 65;  // EX_DATAERR
constexpr int kExitNoKey = 66;     // EX_NOINPUT
constexpr int kExitIo = 74;        // EX_IOERR

constexpr const char* kUsage =
    "usage: fenced-store [--db PATH] put KEY VALUE --token ENSEMBLE-ID:CZXID[.ORDINAL] [--fence NAME]\n"
    "       fenced-store [--db PATH] get KEY";

int run_put(const std::string& db, const std::string& key, const std::string& value,
            const std::string& token_text, const std::string& fence) {
  const auto token = zklock::FencingToken::try_parse(token_text);
  if (!token) {
    std::cerr << "fenced-store: malformed token '" << token_text
              << "': expected <ensemble-id>:<czxid>[.<lease ordinal>]\n";
    return kExitUsage;
  }
  fenced_store::FencedStore store(db);
  const auto r = store.put(key, value, *token, fence);
  const std::string where = fence.empty() || fence == key ? "key " + key : "key " + key + " (fence " + fence + ")";
  // Refused by the key's own row under another fence name: say so, or the
  // operator looks for the token in the wrong fence.
  const bool by_row = r.by == fenced_store::PutResult::Floor::key && !fence.empty() && fence != key;
  const std::string seen = by_row ? "the key was last written with " : "highest seen ";
  using V = fenced_store::PutResult::Verdict;
  switch (r.verdict) {
    case V::accepted:
      return kExitOk;
    case V::stale:
      std::cerr << "fenced-store: rejected stale token " << token->str() << " for " << where << ": " << seen
                << r.stored.str() << "\n";
      return kExitRejected;
    case V::foreign_source:
      std::cerr << "fenced-store: rejected token " << token->str() << " for " << where
                << ": it comes from ensemble " << token->ensemble_id()
                << " but it is fenced by ensemble " << r.stored.ensemble_id() << " (" << seen << r.stored.str()
                << ")\n";
      return kExitRejected;
  }
  return kExitRejected;
}

int run_get(const std::string& db, const std::string& key) {
  fenced_store::FencedStore store(db);
  const auto value = store.get(key);
  if (!value) {
    std::cerr << "fenced-store: no such key " << key << "\n";
    return kExitNoKey;
  }
  std::fwrite(value->data(), 1, value->size(), stdout);
  std::fputc('\n', stdout);
  return std::fflush(stdout) == 0 ? kExitOk : kExitIo;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "A key-value store in SQLite that enforces zklock fencing tokens: a put is applied only\n"
      "if its token is >= both the key's own last token and its fence's highest, and from the\n"
      "same ensemble."};
  app.footer(
      "Exit codes: 0 ok, 64 usage (or malformed token), 65 put rejected (stale or foreign\n"
      "token), 66 get found no such key, 74 database error.");
  app.require_subcommand(1);
  app.fallthrough();

  std::string db = "./fenced-store.db";
  app.add_option("--db", db, "SQLite database file (default ./fenced-store.db)")
      ->envname("FENCED_STORE_DB");

  std::string key, value, token, fence;
  auto* put = app.add_subcommand("put", "Write VALUE under KEY if TOKEN passes the key's fence");
  put->add_option("KEY", key, "Key")->required();
  put->add_option("VALUE", value, "Value")->required();
  put->add_option("--token", token, "Fencing token, <ensemble-id>:<czxid>[.<lease ordinal>]")->required();
  put->add_option("--fence", fence,
                  "Fence the token is checked against and raises (default: KEY). Give every key that "
                  "one lock guards the same fence");
  auto* get = app.add_subcommand("get", "Print the value stored under KEY");
  get->add_option("KEY", key, "Key")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::cerr << "fenced-store: " << e.what() << "\n" << kUsage << "\n";
    return kExitUsage;
  }

  try {
    if (*put) return run_put(db, key, value, token, fence);
    return run_get(db, key);
  } catch (const std::exception& e) {
    std::cerr << "fenced-store: " << e.what() << "\n";
    return kExitIo;
  }
}
