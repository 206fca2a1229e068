//! The reactor's loop (`crate::reactor`): a thread that reads the bus (this member's
//! events and those its peers forward), and for an event whose tag the `reactor` option
//! names renders its SLS files, proposes one entry (a `reaction` record, then the
//! records its reactions make), and, if that entry is the one that applied for the
//! event, carries out the rest: the events of the verbs (`salt/job/<jid>/new`,
//! `salt/key`), their effects, and the runners.
//!
//! One reaction at a time, in the order the events were fired. The bus keeps 4,096
//! events for a slow reader: a reactor that falls further behind loses the oldest
//! (counted, `halite_refused_total{port="admin",reason="reactor_lagged"}`); a member
//! that is down reacts to nothing, while its peers still react to what they see. A bad
//! SLS file is logged and counted (`port="disk",reason="reactor_sls"`) and the event
//! gets the reactions of the other files; so is a reaction that cannot be prepared
//! (`port="admin",reason="reactor_reaction"`: no minion matched, a bad argument).
//!
//! At most once for what follows the entry: if this member stops between its entry
//! applying and the events and runners, those are not carried out by anyone (the jobs
//! and key changes in the entry are, being records).

use std::sync::Arc;

use halite_storage::format::{now_ns, Reaction, Record};
use tokio::sync::broadcast::error::RecvError;

use crate::daemon::live::Master;
use crate::events::Event;
use crate::metrics::{refuse, Port};
use crate::reactor::{self, plan, render, Reactors};

/// Starts the reactor when the `reactor` option names any reactions. It runs on a
/// thread of its own; `rt` carries its network I/O (range queries).
pub fn start(master: &Arc<Master>, rt: tokio::runtime::Handle) {
    let reactors = Reactors::from_option(master.cfg.raw.get("reactor"));
    if reactors.is_empty() {
        return;
    }
    let mut rx = master.bus.subscribe();
    let m = master.clone();
    let spawned = std::thread::Builder::new().name("reactor".into()).spawn(move || loop {
        match rx.blocking_recv() {
            Ok(e) => react(&m, &rt, &reactors, &e),
            Err(RecvError::Lagged(n)) => refuse(Port::Admin, "event bus", "reactor_lagged", &format_args!("the reactor fell {n} events behind the bus; they get no reaction here")),
            Err(RecvError::Closed) => return,
        }
    });
    match spawned {
        Ok(_) => tracing::info!("reactor started"),
        Err(e) => tracing::error!("cannot start the reactor: {e}"),
    }
}

/// Reacts to one event (nothing when no reactor names its tag).
fn react(m: &Master, rt: &tokio::runtime::Handle, reactors: &Reactors, e: &Event) {
    let files = reactors.sls_for(&e.tag);
    if files.is_empty() {
        return;
    }
    let Some(id) = reactor::event_id(e) else { return };
    if e.tag.len() > halite_storage::reaction::MAX_TAG_LEN {
        return refuse(Port::Admin, "reactor", "reactor_reaction", &format_args!("an event tag longer than {} bytes gets no reaction", halite_storage::reaction::MAX_TAG_LEN));
    }
    let served = crate::admin::AdminView::file_server(m);
    let roots = &served;
    let mut reactions = Vec::new();
    for sls in &files {
        let found = reactor::resolve(sls);
        if found.is_empty() {
            refuse(Port::Disk, sls, "reactor_sls", &format_args!("cannot render the reactor SLS {sls} for tag {}: file missing or not found", e.tag));
        }
        for f in found {
            match render::render_sls(roots, &f, &e.tag, e.data()) {
                Ok(r) => reactions.extend(r),
                Err(why) => refuse(Port::Disk, &f.to_string(), "reactor_sls", &format_args!("reactor SLS for tag {} not rendered: {why}", e.tag)),
            }
        }
    }
    reactions.truncate(render::MAX_REACTIONS);
    // Range words in a `local.*` target are expanded here, by asking the range server
    // (this runs on the blocking pool); a reaction whose expansion fails is dropped.
    reactions.retain_mut(|r| {
        if r.kind != render::Kind::Local {
            return true;
        }
        let Some(tgt) = r.low.get("tgt").cloned() else { return true };
        let tgt_type = r.low.get("tgt_type").or_else(|| r.low.get("expr_form")).and_then(serde_json::Value::as_str).unwrap_or("glob").to_string();
        match rt.block_on(crate::daemon::range_client::resolve_target(&m.cfg, Port::Admin, &tgt, &tgt_type)) {
            Ok(None) => true,
            Ok(Some((t, ty))) => {
                r.low.remove("expr_form");
                r.low.insert("tgt".into(), t);
                r.low.insert("tgt_type".into(), serde_json::Value::String(ty));
                true
            }
            Err(why) => {
                refuse(Port::Admin, "reactor", "reactor_reaction", &format_args!("a reaction to tag {} not carried out: {why}", e.tag));
                false
            }
        }
    });
    if reactions.is_empty() {
        return;
    }
    let prepared = plan::prepare(m, &reactions);
    for why in &prepared.errors {
        refuse(Port::Admin, "reactor", "reactor_reaction", &format_args!("a reaction to tag {} not carried out: {why}", e.tag));
    }
    // A member that is behind (the key or minion is not applied here yet) may have
    // nothing to do where another has: it must not claim the event.
    if prepared.records.is_empty() && prepared.runners.is_empty() {
        tracing::info!(tag = %e.tag, "reactor: nothing to do here for this event; not claimed");
        return;
    }
    let described = serde_json::Value::Array(reactions.iter().map(|r| r.to_json()).collect());
    let name = m.cfg.node_id();
    let claim = Record::Reaction(Reaction { id: id.clone(), member: name.clone(), tag: e.tag.clone(), reactions: described.to_string().into_bytes(), time_ns: now_ns() });
    let mut entry = vec![claim];
    entry.extend(prepared.records);
    match claim_first(m, &entry, &id, &name) {
        Claim::Ours => {}
        Claim::Theirs => {
            tracing::debug!(tag = %e.tag, id = %id, "reactor: another member reacted to this event first");
            return;
        }
        Claim::Failed(err) => {
            tracing::error!(tag = %e.tag, id = %id, "reactor: the reaction was not claimed: {err}");
            return;
        }
    }
    tracing::info!(tag = %e.tag, id = %id, reactions = reactions.len(), "reactor: reacted");
    for p in prepared.plans {
        if let Err(err) = crate::daemon::admin::carry_out(m, p) {
            tracing::error!(tag = %e.tag, "reactor: {err}");
        }
    }
    for c in prepared.runners {
        let out = crate::daemon::admin::execute(m, c);
        if let Some(err) = out.get("error") {
            tracing::error!(tag = %e.tag, "reactor: runner failed: {err}");
        }
    }
}

/// Whose an entry that starts with a `reaction` claim turned out to be.
pub(crate) enum Claim {
    /// This member's entry applied first: it carries the rest out.
    Ours,
    /// Another member's entry for the same id applied first (this one was skipped).
    Theirs,
    /// Not committed, or the claim could not be read.
    Failed(String),
}

/// Proposes `entry` (a `reaction` record for `id` by `member`, then what it does) and
/// reads back which entry for `id` applied: the reactor's events and the schedule's
/// firings are decided this way, once per cluster.
pub(crate) fn claim_first(m: &Master, entry: &[Record], id: &str, member: &str) -> Claim {
    let index = match m.node.propose(entry) {
        Ok(i) => i,
        Err(e) => return Claim::Failed(format!("not committed: {e}")),
    };
    match m.sm().reaction(id) {
        Ok(Some(c)) if c.index == index && c.member == member => Claim::Ours,
        Ok(_) => Claim::Theirs,
        Err(e) => Claim::Failed(format!("cannot read the claim: {e}")),
    }
}
