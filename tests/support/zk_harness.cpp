// Unique node paths, the bare C-client session (ZkHandle), and the
// sequence-counter surgery (SetCversion) for the harness's users.
#include "zk_harness.hpp"

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <random>
#include <sstream>

namespace zklock::test {
namespace fs = std::filesystem;

using detail::errno_text;
using detail::last_lines;

namespace {
constexpr const char* kSlf4jNop = "/usr/share/java/slf4j-nop.jar";
}  // namespace

std::string unique_path(std::string_view prefix) {
  static std::atomic<unsigned> counter{0};
  static const unsigned salt = std::random_device{}();
  std::ostringstream out;
  out << "/" << prefix << "-" << ::getpid() << "-" << counter.fetch_add(1) << "-" << std::hex
      << (salt & 0xffffffu);
  return out.str();
}

// ---------------------------------------------------------------------------
// ZkHandle

struct ZkHandle::Watch {
  std::mutex mu;
  std::condition_variable cv;
  int state = 0;
};

namespace {
// The C client calls this on its completion thread: only record and signal.
void handle_watcher(zhandle_t*, int type, int state, const char*, void* ctx) noexcept {
  if (type != ZOO_SESSION_EVENT || ctx == nullptr) return;
  auto* w = static_cast<ZkHandle::Watch*>(ctx);
  {
    std::lock_guard lock(w->mu);
    w->state = state;
  }
  w->cv.notify_all();
}
}  // namespace

ZkHandle ZkHandle::connect(const std::string& hosts, milliseconds session_timeout, milliseconds timeout) {
  ZkHandle h;
  h.watch_ = std::make_unique<Watch>();
  h.zh_ = zookeeper_init(hosts.c_str(), handle_watcher, static_cast<int>(session_timeout.count()),
                         nullptr, h.watch_.get(), 0);
  if (h.zh_ == nullptr) throw HarnessError(errno_text("zookeeper_init " + hosts, errno));
  std::unique_lock lock(h.watch_->mu);
  bool ok = h.watch_->cv.wait_for(lock, timeout, [&] {
    return h.watch_->state == ZOO_CONNECTED_STATE || h.watch_->state == ZOO_EXPIRED_SESSION_STATE ||
           h.watch_->state == ZOO_AUTH_FAILED_STATE;
  });
  if (!ok || h.watch_->state != ZOO_CONNECTED_STATE) {
    int st = h.watch_->state;
    lock.unlock();
    throw HarnessError("ZkHandle: no session with " + hosts + " within " + std::to_string(timeout.count()) +
                       " ms (state " + std::to_string(st) + ")");
  }
  return h;
}

ZkHandle::ZkHandle(ZkHandle&& other) noexcept { *this = std::move(other); }

ZkHandle& ZkHandle::operator=(ZkHandle&& other) noexcept {
  if (this != &other) {
    close();
    zh_ = std::exchange(other.zh_, nullptr);
    watch_ = std::move(other.watch_);
  }
  return *this;
}

ZkHandle::~ZkHandle() { close(); }

void ZkHandle::close() {
  // zookeeper_close joins the client's threads, so watch_ outlives every
  // callback that could touch it.
  if (zh_ != nullptr) zookeeper_close(zh_);
  zh_ = nullptr;
  watch_.reset();
}

std::int64_t ZkHandle::session_id() const {
  const clientid_t* id = zh_ != nullptr ? zoo_client_id(zh_) : nullptr;
  return id != nullptr ? id->client_id : 0;
}

int ZkHandle::state() const { return zh_ != nullptr ? zoo_state(zh_) : 0; }

int ZkHandle::create(const std::string& path, std::string_view data, int flags, std::string* created) {
  std::vector<char> buf(path.size() + 64);
  int rc = zoo_create(zh_, path.c_str(), data.data(), static_cast<int>(data.size()), &ZOO_OPEN_ACL_UNSAFE,
                      flags, buf.data(), static_cast<int>(buf.size()));
  if (rc == ZOK && created != nullptr) *created = buf.data();
  return rc;
}

void ZkHandle::ensure(const std::string& path) {
  int rc = create(path, "", ZOO_PERSISTENT);
  if (rc != ZOK && rc != ZNODEEXISTS)
    throw HarnessError("create " + path + ": " + zerror(rc));
}

int ZkHandle::exists(const std::string& path, ::Stat* stat) {
  ::Stat local;
  return zoo_exists(zh_, path.c_str(), 0, stat != nullptr ? stat : &local);
}

int ZkHandle::children(const std::string& path, std::vector<std::string>* out) {
  String_vector names{};
  int rc = zoo_get_children(zh_, path.c_str(), 0, &names);
  if (rc == ZOK) {
    out->clear();
    for (int i = 0; i < names.count; ++i) out->emplace_back(names.data[i]);
    deallocate_String_vector(&names);
  }
  return rc;
}

// ---------------------------------------------------------------------------
// Sequence-counter surgery

bool child_sequence_tool_available() {
#ifdef ZKLOCK_SET_CVERSION_CLASSDIR
  return std::string_view(ZKLOCK_SET_CVERSION_CLASSDIR).size() > 0 &&
         fs::exists(fs::path(ZKLOCK_SET_CVERSION_CLASSDIR) / "SetCversion.class");
#else
  return false;
#endif
}

void set_child_sequence_counter(ZkServer& server, const std::string& path, std::int32_t value, bool container) {
  if (server.options().my_id != 0)
    throw HarnessError("set_child_sequence_counter: only for a standalone server");
  if (!child_sequence_tool_available())
    throw HarnessError("set_child_sequence_counter: SetCversion.class not built (no javac at configure time?)");
#ifdef ZKLOCK_SET_CVERSION_CLASSDIR
  const bool was_running = server.running();
  if (was_running) server.stop();

  std::string classpath = server.options().zk_jar + ":" + ZKLOCK_SET_CVERSION_CLASSDIR;
  if (fs::exists(kSlf4jNop)) classpath += std::string(":") + kSlf4jNop;
  SpawnOptions spawn;
  spawn.argv = {server.options().java, "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", classpath, "SetCversion",
                server.zk_data_dir().string(), path, std::to_string(value)};
  if (container) spawn.argv.push_back("container");
  spawn.output_file = server.data_dir() / "set-cversion.out";
  ChildProcess tool = ChildProcess::spawn(spawn);
  auto st = tool.wait_exit(milliseconds(60000));
  if (!st) {
    tool.terminate(milliseconds(1000));
    throw HarnessError("SetCversion did not finish within 60 s");
  }
  if (!st->exited() || st->exit_code() != 0)
    throw HarnessError("SetCversion failed (" + st->describe() + "):\n" +
                       last_lines(server.data_dir() / "set-cversion.out", 30));
  if (was_running) server.start();
#else
  (void)server, (void)path, (void)value, (void)container;
#endif
}

}  // namespace zklock::test
