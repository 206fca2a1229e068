//! The admin socket (`<sock_dir>/halite-admin.sock`, protocol in `admin::client`): one
//! JSON request per line, parsed and answered by `crate::admin` as a [`Plan`], which is
//! carried out here: its groups of records committed in order (a few in flight at once),
//! its membership change, then its events and effects, then the answer.
//!
//! Who may speak and how much: besides the socket's mode (0600 in a 0700 directory; 0666
//! in a 0711 directory when `publisher_acl` names users), a connection is served only if
//! its peer's credentials (`SO_PEERCRED`) name root or the master's own user, or, when
//! `publisher_acl` names users, another system user, which may then only publish
//! (checked by `crate::publisher_acl`) and follow its own jobs; a request line longer
//! than [`MAX_LINE`] is refused while it is read (it is never buffered whole) and the
//! connection closed; a connection that sends no request for [`IDLE_TIMEOUT`], or does
//! not take an answer or event within [`crate::daemon::lines::WRITE_TIMEOUT`], is closed (the
//! line protocol is in [`crate::daemon::lines`]). Each refusal is counted (`metrics::refuse`,
//! port `admin`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value as J;
use tokio::io::BufReader;

use crate::daemon::lines::{read_line, write_line, Line};
use crate::daemon::live::Master;
use crate::admin::{self, Answer, Command, Effect, MemberChange, Plan};
use crate::error::Result;

/// Proposals of one plan kept in flight at once (a roots sync: 32 MiB of its 4 MiB
/// entries, `admin::cluster::SYNC_GROUP`).
const IN_FLIGHT: usize = 8;

/// Longest request line read (a `cluster.sync_roots` or key list can be large; nothing
/// a tool sends comes near it).
pub const MAX_LINE: usize = 64 << 20;

/// How long a connection may wait before sending its next request.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// Whether a peer with this uid may use the admin socket: root, or the user the master
/// runs as.
pub fn peer_allowed(uid: u32) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    uid == 0 || uid == unsafe { libc::geteuid() }
}

/// Serves one admin connection until it closes.
pub async fn connection(master: Arc<Master>, stream: tokio::net::UnixStream) {
    use crate::metrics::{refuse, Port};
    // `None`: root or the master's user, trusted; `Some(name)`: a system user that
    // `publisher_acl` governs.
    let caller = match stream.peer_cred() {
        Ok(c) if peer_allowed(c.uid()) => None,
        Ok(c) => match crate::publisher_acl::user_name(c.uid()).filter(|_| acl_enabled(&master)) {
            Some(name) => Some(name),
            None => {
                let source = format!("uid {} pid {}", c.uid(), c.pid().unwrap_or(0));
                return refuse(Port::Admin, &source, "peer_credentials", &format_args!("only root, the master's own user and (for publishes) users publisher_acl names may use the admin socket"));
            }
        },
        Err(e) => return refuse(Port::Admin, "unknown peer", "peer_credentials", &format_args!("cannot read the peer's credentials: {e}")),
    };
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    loop {
        let line = match tokio::time::timeout(IDLE_TIMEOUT, read_line(&mut rd, MAX_LINE)).await {
            Ok(Ok(Line::Request(l))) => l,
            Ok(Ok(Line::Closed)) | Ok(Err(_)) => return,
            Ok(Ok(Line::TooLong)) => {
                refuse(Port::Admin, "admin client", "line_too_long", &format_args!("a request line passed {MAX_LINE} bytes; connection closed"));
                let _ = write_line(&mut wr, admin::error(format!("request line longer than {MAX_LINE} bytes")).to_string()).await;
                return;
            }
            Err(_) => {
                tracing::debug!("admin connection idle for {IDLE_TIMEOUT:?}; closed");
                return;
            }
        };
        let mut parsed = serde_json::from_slice::<J>(&line).map_err(|e| crate::error::Error::refused(format!("bad request: {e}"))).and_then(|r| Command::parse(&r));
        if let Some(name) = &caller {
            // publisher_acl first: a refused caller makes no range query either.
            parsed = parsed.and_then(|c| restrict(&master, name, c));
        }
        let needs_range = match &mut parsed {
            Ok(c) => crate::daemon::range_client::command_needs_range(&master.cfg, c),
            Err(_) => false,
        };
        if needs_range {
            // A range target is expanded first, by asking the range server.
            if let Ok(c) = parsed {
                parsed = crate::daemon::range_client::resolve(&master.cfg, c).await;
            }
        }
        let answer = match parsed {
            Ok(Command::EventsWatch) => return watch(&master, wr).await,
            Ok(Command::JobFollow(f)) => return crate::daemon::follow::follow(master, f, rd, wr).await,
            Ok(cmd) => {
                let m = master.clone();
                tokio::task::spawn_blocking(move || execute(&m, cmd)).await.unwrap_or_else(admin::error)
            }
            Err(e) => admin::refusal(&e),
        };
        if !write_line(&mut wr, answer.to_string()).await {
            break;
        }
    }
}

/// Whether `publisher_acl` names any user (then system users may publish through the
/// admin socket, and it is opened to them: see `daemon::mod`).
pub fn acl_enabled(master: &Master) -> bool {
    master.cfg.raw.get("publisher_acl").and_then(serde_yaml::Value::as_mapping).is_some_and(|m| !m.is_empty())
}

/// What a system user other than root and the master's may ask: a publish, checked
/// against `publisher_acl` under its own name (whatever `user` it sent), and the returns
/// of its own jobs. Anything else is refused and counted.
fn restrict(master: &Master, name: &str, cmd: Command) -> Result<Command> {
    use crate::admin::jobs::JobCmd;
    use crate::metrics::{refuse, Port};
    match cmd {
        Command::Jobs(JobCmd::Publish { fun, tgt, tgt_type, arg, kwarg, opts, .. }) => Ok(Command::Jobs(JobCmd::Publish { fun, tgt, tgt_type, arg, kwarg, user: name.to_string(), acl_checked: true, opts })),
        Command::JobFollow(f) => {
            let job = master.sm().job(&f.jid)?;
            let owner = job.and_then(|j| crate::wire::payload::decode(&j.load).ok()).map(|l| crate::wire::payload::to_json(&l)).and_then(|l| l.get("user").and_then(J::as_str).map(str::to_string));
            if owner.as_deref() == Some(name) {
                Ok(Command::JobFollow(f))
            } else {
                refuse(Port::Admin, name, "publisher_acl", &format_args!("job.follow of a job {name} did not publish"));
                Err(crate::error::Error::Unauthorized)
            }
        }
        _ => {
            refuse(Port::Admin, name, "publisher_acl", &format_args!("{name} may only publish (publisher_acl)"));
            Err(crate::error::Error::Unauthorized)
        }
    }
}

/// One `events.watch` line: `{"tag", "data"}`.
#[derive(serde::Serialize)]
struct WatchLine<'a> {
    tag: &'a str,
    data: &'a J,
}

/// Bytes of event lines one watcher may have waiting to be written. The bus keeps each
/// event until every watcher has read it (its last 4,096 events), so a watcher that
/// stops reading (a paused terminal, a stalled HTTP client) would hold that many events,
/// returns with their data, for as long as its write waits (`WRITE_TIMEOUT`): here every
/// event is read off the bus at once, made into its line, and dropped for this watcher
/// (counted) once this many bytes wait.
pub const WATCH_BUFFER: usize = 16 << 20;

/// From here on the connection streams events, one JSON object per line, through a
/// writer of its own, so that the bus is always read ([`WATCH_BUFFER`]).
async fn watch(master: &Master, wr: tokio::net::unix::OwnedWriteHalf) {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use crate::metrics::{refuse, Port};
    let mut rx = master.bus.subscribe();
    let waiting = Arc::new(AtomicUsize::new(0));
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut writer = {
        let waiting = waiting.clone();
        tokio::spawn(async move {
            let mut wr = wr;
            while let Some(line) = lines.recv().await {
                let n = line.len();
                let written = write_line(&mut wr, line).await;
                waiting.fetch_sub(n, Relaxed);
                if !written {
                    return;
                }
            }
        })
    };
    loop {
        tokio::select! {
            // The watcher went away, or did not take a line within `WRITE_TIMEOUT`.
            _ = &mut writer => return,
            got = rx.recv() => match got {
                Ok(e) => {
                    // Written from the shared event, not copied into a new JSON value.
                    let line = serde_json::to_string(&WatchLine { tag: &e.tag, data: e.data() }).unwrap_or_default();
                    drop(e);
                    let held = waiting.load(Relaxed);
                    if held > 0 && held + line.len() > WATCH_BUFFER {
                        refuse(Port::Admin, "events.watch", "watcher_behind", &format_args!("an event watcher has {held} bytes of events it has not read: events dropped for it"));
                        continue;
                    }
                    waiting.fetch_add(line.len(), Relaxed);
                    if tx.send(line).is_err() {
                        return;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => tracing::warn!(n, "an event watcher fell behind; events dropped"),
                Err(_) => return,
            }
        }
    }
}

/// Answers and carries out one command (on the blocking pool).
pub(crate) fn execute(m: &Master, cmd: Command) -> J {
    match cmd.answer(m).and_then(|plan| carry_out(m, plan)) {
        Ok(v) => v,
        Err(e) => admin::refusal(&e),
    }
}

pub(crate) fn carry_out(m: &Master, plan: Plan) -> Result<J> {
    let label = plan.progress;
    let mut logged = 0u64;
    m.node.propose_all(&plan.proposals, IN_FLIGHT, &mut |done, total| {
        if let Some(label) = label {
            if done == total || (done - logged) * 10 >= total {
                logged = done;
                tracing::info!(done, total, "{label}");
            }
        }
    })?;
    if let Some(MemberChange::Remove(id)) = plan.membership {
        m.node.remove_member(id)?;
    }
    for e in plan.events {
        m.bus.fire(e);
    }
    for e in plan.effects {
        effect(m, e)?;
    }
    let settled = match plan.answer {
        Answer::Now(v) => return Ok(v),
        Answer::After(f) => f(m)?,
    };
    for e in settled.events {
        m.bus.fire(e);
    }
    for e in settled.effects {
        effect(m, e)?;
    }
    Ok(settled.value)
}

/// Carries out one effect of a committed plan.
fn effect(m: &Master, e: Effect) -> Result<()> {
    match e {
        Effect::RotateAes => crate::daemon::publish_key::rotate_aes(m),
        Effect::Uncount(ids) => m.uncount(&ids),
        Effect::FinishMmapMigration { build_view } => finish_migration(m, build_view)?,
    }
    Ok(())
}

/// The end of an online `pki.migrate_to_mmap`.
fn finish_migration(m: &Master, build_view: bool) -> Result<()> {
    if build_view {
        crate::pki::build_mmap_view(&m.cfg, m.sm())?;
    }
    let mut view = halite_storage::keys::mmap::MmapKeys::open(m.cfg.keys_dir(), m.cfg.mmap_geometry())?;
    crate::pki::copy_master_keys(&m.cfg, &mut view)?;
    halite_storage::keys::KeyView::sync(&mut view)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_root_and_the_masters_user_are_served() {
        assert!(peer_allowed(0));
        // SAFETY: geteuid cannot fail.
        assert!(peer_allowed(unsafe { libc::geteuid() }));
    }
}
