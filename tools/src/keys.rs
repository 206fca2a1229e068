//! `salt-key`'s logic: listings and fingerprints read the configured key view (so they
//! work with the master stopped, like Salt's own salt-key); accept, reject and delete
//! are key records committed through the log, then mirrored into the view.

use serde_json::{Map, Value};

use halite_master::{start, store, MasterConfig};
pub use halite_master::admin::keys::{applied, glob_match, looks_like_public_key, records_for, select, state_listing, Cmd, Include, ACC, DEN, PEND, REJ, GROUP};
use halite_replication::Node;
use halite_storage::keys::KeyListing;

use crate::common::{Failure, Result};
use crate::output::listing_value;


/// The `salt-key -L` listing from the configured view.
pub fn listing(cfg: &MasterConfig) -> Result<KeyListing> {
    Ok(store::key_view(cfg)?.list()?)
}

/// `-l ARG`: one bucket (or all).
pub fn list_status(l: &KeyListing, arg: &str) -> Result<Value> {
    let all = listing_value(l);
    let pick = |k: &str| {
        let mut m = Map::new();
        m.insert(k.to_string(), all[k].clone());
        Value::Object(m)
    };
    Ok(match arg {
        "acc" | "accepted" => pick(ACC),
        "pre" | "un" | "unaccepted" => pick(PEND),
        "rej" | "rejected" => pick(REJ),
        "den" | "denied" => pick(DEN),
        "all" => all,
        other => return Err(Failure::new(format!("'{other}' is not a valid argument to '--list'"), 2)),
    })
}

/// Salt's `pem_finger` over the exact stored bytes (the master's, which `key.finger` answers).
pub use halite_master::admin::wheel_keys::finger;

/// `-f GLOB` / `-F`: fingerprints per bucket.
pub fn fingers(cfg: &MasterConfig, pattern: &str) -> Result<Value> {
    let view = store::key_view(cfg)?;
    let l = view.list()?;
    let matched = glob_match(&l, pattern);
    let mut out = Map::new();
    for (bucket, ids) in matched {
        let mut m = Map::new();
        for id in ids.as_array().into_iter().flatten().filter_map(Value::as_str) {
            let pub_key = if bucket == DEN { view.get_denied(id)? } else { view.get_key(id)?.map(|e| e.pub_key) };
            if let Some(p) = pub_key {
                m.insert(id.to_string(), Value::String(finger(&p)));
            }
        }
        out.insert(bucket, Value::Object(m));
    }
    Ok(Value::Object(out))
}

/// Starts the node over the configured view (see `halite_master::start::start_node_adopting`),
/// for `salt-key --offline`, which holds the data directory's lock ([`crate::offline`]).
pub fn open_node(cfg: &MasterConfig) -> Result<Node> {
    start::start_node_adopting(cfg).map_err(crate::pki::in_use(cfg))
}

/// Carries out `cmd` on the selected keys through a stopped master's log (the same
/// records the running master's `key.apply` commits). Returns the ids changed and the
/// ids skipped because their stored key is not a public key.
pub fn apply(node: &Node, cmd: Cmd, selected: &Map<String, Value>) -> Result<(Vec<String>, Vec<String>)> {
    let ch = records_for(&**node.state(), cmd, selected, halite_storage::format::now_ns())?;
    let groups = halite_storage::Record::fit_groups(ch.records, GROUP, halite_storage::entry::MAX_ENTRY_LEN)?;
    node.propose_all(&groups, 1, &mut |_, _| {})?;
    Ok((applied(&**node.state(), &ch.intents)?, ch.invalid))
}

