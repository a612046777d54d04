// Sends the lock machine's requests through the C client and feeds answers and watches back as events.
//
// Part of the LockAttempt shell (lock_attempt.hpp). Nothing here decides:
// a C-client answer becomes the MachineEvent of the same tag, with its
// return code mapped once (rc_of); listings go through listing_batch.hpp.
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include "lock_attempt.hpp"
#include "listing_batch.hpp"
#include "zklock/protocol/revocation.hpp"

namespace zklock::detail {
namespace {

using Kind = MachineEvent::Kind;
using Req = MachineRequest::Kind;

// Which codes are transient and which end the session is error.hpp's
// decision (is_transient, is_session_fatal), not the recipe's. One more
// ends it here: invalid_state, which for an asynchronous request (the only
// kind the shell sends) means the C client refused to send it on a handle
// that is over — its session expired, its authentication failed, or it is
// closing. Read as an error, a revocation record unreadable that way would
// make a frozen holder whose session expired report "revoked".
Rc rc_of(const Status& st) {
  if (st.ok()) return Rc::ok;
  if (st.is(Errc::no_node)) return Rc::no_node;
  if (st.is(Errc::node_exists)) return Rc::node_exists;
  if (is_transient(st)) return Rc::connection_loss;
  if (is_session_fatal(st) || st.is(Errc::invalid_state)) return Rc::session_expired;
  return Rc::error;
}

MachineEvent answer(Kind kind, std::uint64_t tag, const Status& st) {
  MachineEvent ev{kind};
  ev.tag = tag;
  ev.rc = rc_of(st);
  if (ev.rc == Rc::error) {
    const auto err = st.error("");
    ev.errc = err.code();
    ev.detail = err.what();
  }
  return ev;
}

// A data read with a watch; a deletion is fed as `fired` with the request's
// tag. Any other notification (someone wrote the node's data; zklock never
// does) re-arms a blocker's watch, and for our own node goes to the machine
// (own_changed), which watches again.
//
// getData, not exists: on a node already gone, exists leaves a watch for the
// node's creation, which for a sequential name never comes. The C client
// keeps that callback for the rest of the session: one more for every
// blocker that went before we looked (a common race in a hand-off). getData
// sets no watch then, and answers no_node all the same.
// Returns the watch armed (a blocker's is taken back if the attempt ends
// first: LockAttempt::blocker_watch_).
Client::Impl::WatchRef watch_deletion(Client::Impl* impl, std::uint64_t epoch, std::weak_ptr<LockAttempt> weak,
                                      std::uint64_t tag, Kind answered, Kind fired, std::string path) {
  auto on_event = [impl, epoch, weak, tag, answered, fired, path](const WatchEvent& e) {
    auto s = weak.lock();
    if (!s) return;
    if (e.type != WatchEvent::Type::deleted && answered == Kind::own_checked) {
      MachineEvent ev{Kind::own_changed};
      ev.tag = tag;
      s->feed(std::move(ev));
      return;
    }
    if (e.type != WatchEvent::Type::deleted) {
      s->note_blocker_watch(tag, watch_deletion(impl, epoch, weak, tag, answered, fired, path));
      return;
    }
    MachineEvent ev{fired};
    ev.tag = tag;
    s->feed(std::move(ev));
  };
  Client::Impl::WatchRef armed;
  impl->get(
      path, std::move(on_event),
      [weak, tag, answered](Status st, std::string, const Stat&) {
        if (auto s = weak.lock()) s->feed(answer(answered, tag, st));
      },
      &armed, epoch);
  return armed;
}

}  // namespace

void LockAttempt::send_locked(const MachineRequest& c) {
  std::weak_ptr<LockAttempt> weak = weak_from_this();
  const auto tag = c.tag;
  auto feed_to = [weak](MachineEvent ev) {
    if (auto s = weak.lock()) s->feed(std::move(ev));
  };
  // Invariant (2): never on another session. This check only saves a
  // request; the pin (`epoch_`, the last argument of every request below)
  // is what holds while the session is replaced between here and the send.
  if (impl_->epoch() != epoch_) {
    impl_->defer([feed_to, tag] {
      MachineEvent ev{Kind::removed};  // any answer saying "session over" ends the attempt
      ev.tag = tag;
      ev.rc = Rc::session_expired;
      feed_to(ev);
    });
    return;
  }
  if (auto* hook = g_send_hook_for_test.load(std::memory_order_acquire)) hook->before_send(epoch_);
  switch (c.kind) {
    case Req::create:
      impl_->create(child_path(protocol::lock_node_prefix(req_.mode, protocol::owner_key(owner_), c.name)), data_,
                    CreateMode::ephemeral_sequential,
                    [feed_to, tag](Status st, const std::string& path, const Stat& stat) {
                      MachineEvent ev = answer(Kind::created, tag, st);
                      if (st.ok()) {
                        ev.name = split_path(path).second;
                        ev.czxid = stat.czxid;
                      }
                      feed_to(ev);
                    },
                    epoch_);
      break;
    case Req::make_parents: {
      // Containers, top-down and pipelined; "already exists" is fine.
      std::vector<std::string> prefixes;
      for (std::size_t pos = 1; (pos = req_.lock_path.find('/', pos)) != std::string::npos; ++pos) {
        prefixes.push_back(req_.lock_path.substr(0, pos));
      }
      prefixes.push_back(req_.lock_path);
      auto remaining = std::make_shared<std::size_t>(prefixes.size());
      auto worst = std::make_shared<Status>();
      for (const auto& p : prefixes) {
        impl_->create(
            p, "", CreateMode::container,
            [feed_to, tag, remaining, worst](Status st, const std::string&, const Stat&) {
              if (!st.ok() && !st.is(Errc::node_exists)) *worst = st;
              if (--*remaining == 0) feed_to(answer(Kind::parents_made, tag, *worst));
            },
            epoch_);
      }
      break;
    }
    case Req::list:
    case Req::list_watch:  // batched alike; the watch is shared (issue_listing)
      list_batched(impl_, req_.lock_path, epoch_, ListingWant{weak_from_this(), tag, c.kind == Req::list_watch});
      break;
    case Req::read_stats: {
      auto stats = std::make_shared<std::vector<NodeStat>>(c.names.size());
      auto remaining = std::make_shared<std::size_t>(c.names.size());
      for (std::size_t i = 0; i < c.names.size(); ++i) {
        impl_->exists(
            child_path(c.names[i]), nullptr,
            [feed_to, tag, stats, remaining, i](Status st, const Stat& s) {
              (*stats)[i] = NodeStat{rc_of(st), st.ok() ? s.czxid : 0};
              if (--*remaining > 0) return;
              MachineEvent ev{Kind::stats_read};
              ev.tag = tag;
              ev.stats = std::move(*stats);
              feed_to(ev);
            },
            epoch_);
      }
      break;
    }
    case Req::watch_blocker:
      // The machine follows only its latest blocker: an earlier watch, if
      // it has not fired, is taken back.
      impl_->unwatch(blocker_watch_);
      blocker_watch_ =
          watch_deletion(impl_, epoch_, weak, tag, Kind::blocker_checked, Kind::blocker_deleted, child_path(c.name));
      arm_watchdog_locked(std::hash<std::string>{}(c.name));
      break;
    case Req::watch_own:
      watch_deletion(impl_, epoch_, weak, tag, Kind::own_checked, Kind::own_deleted, child_path(c.name));
      break;
    case Req::probe_blocker:
      // A write the leader answers from its own tree, changing nothing: the
      // version no node has (the heartbeat's probe, on the blocker).
      impl_->set_data(
          child_path(c.name), std::string(), Client::Impl::kImpossibleVersion,
          [feed_to, tag](Status st, const Stat&) { feed_to(answer(Kind::blocker_probed, tag, st)); }, epoch_);
      break;
    case Req::read_marker:
    case Req::read_record: {
      const bool marker = c.kind == Req::read_marker;
      impl_->get(marker ? req_.lock_path : protocol::revocation_record_path(c.name), nullptr,
                 [feed_to, tag, marker](Status st, std::string data, const Stat&) {
                   MachineEvent ev = answer(marker ? Kind::marker_read : Kind::record_read, tag, st);
                   ev.data = std::move(data);
                   feed_to(ev);
                 },
                 nullptr, epoch_);
      break;
    }
    case Req::remove:
    case Req::remove_extra:
      if (c.with_marker) {
        // Invariant (3) of the machine: the marker in the same transaction.
        impl_->multi({Op::remove(child_path(c.name)), Op::set_data(req_.lock_path, c.name)},
                     [feed_to, tag](Status st, std::vector<OpResult>) { feed_to(answer(Kind::removed, tag, st)); },
                     epoch_);
      } else {
        impl_->remove(
            child_path(c.name), -1, [feed_to, tag](Status st) { feed_to(answer(Kind::removed, tag, st)); }, epoch_);
      }
      break;
  }
}

// A blocker's watch re-armed after a data change (a retained node re-taken):
// kept while the machine still waits on it, else taken back (the attempt
// ended, or follows another blocker, meanwhile).
void LockAttempt::note_blocker_watch(std::uint64_t tag, Client::Impl::WatchRef ref) {
  locked([&] {
    if (machine_ && machine_->waits_on(tag)) blocker_watch_ = std::move(ref);
    else impl_->unwatch(ref);
  });
}

// A batched listing's answer, and its children watch's notification.
void LockAttempt::on_listing(std::uint64_t tag, const Status& st, std::shared_ptr<const Listing> listing) {
  MachineEvent ev = answer(Kind::listed, tag, st);
  ev.listing = std::move(listing);
  feed(std::move(ev));
}

void LockAttempt::on_children_changed(std::uint64_t tag) {
  MachineEvent ev{Kind::children_changed};
  ev.tag = tag;
  feed(std::move(ev));
}

}  // namespace zklock::detail
