//! The admin socket (`<sock_dir>/halite-admin.sock`, protocol in `admin::client`): one
//! JSON request per line, parsed and answered by `crate::admin` as a [`Plan`], which is
//! carried out here: its groups of records committed in order (a few in flight at once),
//! its membership change, then its events and effects, then the answer.

use std::sync::Arc;

use serde_json::{json, Value as J};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::live::Master;
use crate::admin::{self, Answer, Command, Effect, MemberChange, Plan};
use crate::error::Result;

/// Proposals of one plan kept in flight at once.
const IN_FLIGHT: usize = 4;

/// Serves one admin connection until it closes.
pub async fn connection(master: Arc<Master>, stream: tokio::net::UnixStream) {
    let (rd, mut wr) = stream.into_split();
    let mut lines = BufReader::new(rd).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let parsed = serde_json::from_str::<J>(&line).map_err(|e| crate::error::Error::refused(format!("bad request: {e}"))).and_then(|r| Command::parse(&r));
        let answer = match parsed {
            Ok(Command::EventsWatch) => return watch(&master, wr).await,
            Ok(cmd) => {
                let m = master.clone();
                tokio::task::spawn_blocking(move || execute(&m, cmd)).await.unwrap_or_else(admin::error)
            }
            Err(e) => admin::error(e),
        };
        let mut out = answer.to_string();
        out.push('\n');
        if wr.write_all(out.as_bytes()).await.is_err() {
            break;
        }
    }
}

/// From here on the connection streams events, one JSON object per line.
async fn watch(master: &Master, mut wr: tokio::net::unix::OwnedWriteHalf) {
    let mut rx = master.bus.subscribe();
    loop {
        match rx.recv().await {
            Ok(e) => {
                let mut out = json!({ "tag": e.tag, "data": e.data }).to_string();
                out.push('\n');
                if wr.write_all(out.as_bytes()).await.is_err() {
                    return;
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => tracing::warn!(n, "an event watcher fell behind; events dropped"),
            Err(_) => return,
        }
    }
}

/// Answers and carries out one command (on the blocking pool).
fn execute(m: &Master, cmd: Command) -> J {
    match cmd.answer(m).and_then(|plan| carry_out(m, plan)) {
        Ok(v) => v,
        Err(e) => admin::error(e),
    }
}

fn carry_out(m: &Master, plan: Plan) -> Result<J> {
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
        Effect::RotateAes => super::maintenance::rotate_aes(m),
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
