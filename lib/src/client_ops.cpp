// The asynchronous operations of zklock::Client and the ACL they create with, each through send_op (async_op.hpp).
#include "async_op.hpp"
#include "client_impl.hpp"
#include "multi_request.hpp"

namespace zklock {
namespace {

Stat to_stat(const ::Stat* s) {
  Stat out;
  if (s == nullptr) return out;
  out.czxid = s->czxid;
  out.mzxid = s->mzxid;
  out.ctime = s->ctime;
  out.mtime = s->mtime;
  out.pzxid = s->pzxid;
  out.version = s->version;
  out.cversion = s->cversion;
  out.aversion = s->aversion;
  out.ephemeral_owner = s->ephemeralOwner;
  out.data_length = s->dataLength;
  out.num_children = s->numChildren;
  return out;
}

std::vector<std::string> to_names(int rc, const String_vector* sv) {
  std::vector<std::string> names;
  if (rc == ZOK && sv != nullptr) {
    names.reserve(static_cast<std::size_t>(sv->count));
    for (int i = 0; i < sv->count; ++i) names.emplace_back(sv->data[i]);
  }
  return names;
}

using CreateDone = std::function<void(Status, const std::string&, const Stat&)>;
using ChildrenDone = std::function<void(Status, std::vector<std::string>)>;
using StatDone = std::function<void(Status, const Stat&)>;
using GetDone = std::function<void(Status, std::string, const Stat&)>;
using VoidDone = std::function<void(Status)>;
using MultiDone = std::function<void(Status, std::vector<OpResult>)>;
using MultiCtx = OpCtx<MultiDone, std::unique_ptr<MultiRequest>>;

}  // namespace

AclList::AclList(const ClientOptions& o) {
  if (!o.acl.empty()) {
    for (const auto& e : o.acl) {
      strings_.push_back(e.scheme);
      strings_.push_back(e.id);
    }
    for (std::size_t i = 0; i < o.acl.size(); ++i) {
      ACL a{};
      a.perms = o.acl[i].perms;
      a.id.scheme = strings_[2 * i].data();
      a.id.id = strings_[2 * i + 1].data();
      entries_.push_back(a);
    }
    vector_.count = static_cast<int32_t>(entries_.size());
    vector_.data = entries_.data();
  } else if (o.credentials) {
    strings_ = {"auth", "", "world", "anyone"};
    entries_.push_back(ACL{perm::all, {strings_[0].data(), strings_[1].data()}});
    entries_.push_back(ACL{perm::read, {strings_[2].data(), strings_[3].data()}});
    vector_.count = 2;
    vector_.data = entries_.data();
  } else {
    vector_ = ZOO_OPEN_ACL_UNSAFE;
  }
}

void Client::Impl::create(std::string path, std::string data, CreateMode mode, CreateDone done,
                          std::uint64_t session) {
  using Ctx = OpCtx<CreateDone>;
  send_op<Ctx>(this, session, std::move(done), nullptr, [&](zhandle_t* zh, Ctx* ctx, ArmedWatch) {
    return zoo_acreate2(
        zh, path.c_str(), data.data(), static_cast<int>(data.size()), acl(), to_zoo_mode(mode),
        [](int rc, const char* value, const ::Stat* st, const void* d) noexcept {
          complete_write<Ctx>(d, rc, value ? value : "", to_stat(st));
        },
        ctx);
  });
}

void Client::Impl::get_children(std::string path, Watcher watch, ChildrenDone done, std::uint64_t session) {
  using Ctx = OpCtx<ChildrenDone>;
  send_op<Ctx>(this, session, std::move(done), std::move(watch), [&](zhandle_t* zh, Ctx* ctx, ArmedWatch w) {
    return zoo_awget_children(
        zh, path.c_str(), w.fn, w.ctx,
        [](int rc, const String_vector* sv, const void* d) noexcept {
          complete_read<Ctx>(d, rc, rc == ZOK, to_names(rc, sv));
        },
        ctx);
  });
}

void Client::Impl::exists(std::string path, Watcher watch, StatDone done, std::uint64_t session) {
  using Ctx = OpCtx<StatDone>;
  send_op<Ctx>(this, session, std::move(done), std::move(watch), [&](zhandle_t* zh, Ctx* ctx, ArmedWatch w) {
    return zoo_awexists(
        zh, path.c_str(), w.fn, w.ctx,
        [](int rc, const ::Stat* st, const void* d) noexcept {
          // exists registers its watch both when the node exists and when it does not.
          complete_read<Ctx>(d, rc, rc == ZOK || rc == ZNONODE, to_stat(rc == ZOK ? st : nullptr));
        },
        ctx);
  });
}

void Client::Impl::get(std::string path, Watcher watch, GetDone done, WatchRef* armed, std::uint64_t session) {
  using Ctx = OpCtx<GetDone>;
  send_op<Ctx>(this, session, std::move(done), std::move(watch), [&](zhandle_t* zh, Ctx* ctx, ArmedWatch w) {
    if (armed != nullptr && w.ctx != nullptr) {  // read before the request goes: then it may fire
      *armed = WatchRef{ctx->h->epoch, w.ctx, static_cast<WatchCtx*>(w.ctx)->id, path};
    }
    return zoo_awget(
        zh, path.c_str(), w.fn, w.ctx,
        [](int rc, const char* value, int len, const ::Stat* st, const void* d) noexcept {
          std::string bytes =
              (rc == ZOK && value && len > 0) ? std::string(value, static_cast<std::size_t>(len)) : std::string();
          complete_read<Ctx>(d, rc, rc == ZOK, std::move(bytes), to_stat(st));
        },
        ctx);
  });
}

void Client::Impl::unwatch(const WatchRef& ref) {
  if (ref.ctx == nullptr) return;
  std::shared_lock lk(handle_mu_);
  if (handle_ == nullptr || handle_->epoch != ref.epoch) return;  // gone with its session
  Handle* h = handle_.get();
  // Under watches_mu throughout: the trampoline frees a fired watch only
  // after taking it, so `w` cannot be freed (nor its address reused) here.
  std::lock_guard wl(h->watches_mu);
  auto* w = static_cast<WatchCtx*>(const_cast<void*>(ref.ctx));
  if (h->watches.count(w) == 0 || w->id != ref.id) return;  // fired, or never set
  // Not taken back when its event is already queued (the trampoline frees
  // it) or its getData is not answered yet: then that answer's completion
  // takes it back (settle_abandoned).
  if (!take_back_locked(h, w, ref.path)) w->abandoned_path = ref.path;
}

void Client::Impl::set_data(std::string path, std::string data, int version, StatDone done,
                            std::uint64_t session) {
  using Ctx = OpCtx<StatDone>;
  send_op<Ctx>(this, session, std::move(done), nullptr, [&](zhandle_t* zh, Ctx* ctx, ArmedWatch) {
    return zoo_aset(
        zh, path.c_str(), data.data(), static_cast<int>(data.size()), version,
        [](int rc, const ::Stat* st, const void* d) noexcept { complete_write<Ctx>(d, rc, to_stat(st)); }, ctx);
  });
}

void Client::Impl::remove(std::string path, int version, VoidDone done, std::uint64_t session) {
  using Ctx = OpCtx<VoidDone>;
  send_op<Ctx>(this, session, std::move(done), nullptr, [&](zhandle_t* zh, Ctx* ctx, ArmedWatch) {
    return zoo_adelete(
        zh, path.c_str(), version, [](int rc, const void* d) noexcept { complete_write<Ctx>(d, rc); }, ctx);
  });
}

void Client::Impl::multi(std::vector<Op> ops, MultiDone done, std::uint64_t session) {
  auto request = std::make_unique<MultiRequest>(std::move(ops), acl());
  // Taken now: once tracked, the request belongs to the completion.
  const auto call = request->call();
  send_op<MultiCtx>(
      this, session, std::move(done), nullptr,
      [&](zhandle_t* zh, MultiCtx* ctx, ArmedWatch) {
        return issue_multi(
            zh, call,
            [](int rc, const void* d) noexcept {
              // A multi is one transaction through the leader, even when it only checks.
              auto c = begin_completion<MultiCtx>(d, rc, false, true);
              auto out = c->extra->outcome();
              finish(std::move(c), rc, std::move(out));
            },
            ctx);
      },
      std::move(request));
}

}  // namespace zklock
