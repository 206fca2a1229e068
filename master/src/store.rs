//! Opening the storage a master config describes: the data directory (log and state
//! machine), the configured key view and the roots materialiser.

use halite_replication::{DataDir, Node, NodeConfig, NodeError};
use halite_storage::format::{now_ns, ImportMarker, ImportPhase, KeySet, KeyState, Record};
use halite_storage::keys::BankState;
use halite_storage::keys::{open_view, KeyDriver, KeyView};
use halite_storage::roots::RootsMaterialiser;
use halite_storage::views::Views;

use crate::config::MasterConfig;

/// The data directory of this master.
pub fn data_dir(cfg: &MasterConfig) -> DataDir {
    DataDir::new(&cfg.halite_data_dir)
}

/// The key view `keys.cache_driver` selects, over the keys directory.
pub fn key_view(cfg: &MasterConfig) -> halite_storage::Result<Box<dyn KeyView>> {
    open_view(&cfg.key_driver, cfg.keys_dir())
}

/// The key view of a given driver (e.g. mmap for a migration while the config still
/// says localfs), over the keys directory.
pub fn key_view_of(cfg: &MasterConfig, driver: &KeyDriver) -> halite_storage::Result<Box<dyn KeyView>> {
    open_view(driver, cfg.keys_dir())
}

/// All views of this master.
pub fn views(cfg: &MasterConfig, keys: Box<dyn KeyView>) -> Views {
    Views::new(keys, RootsMaterialiser::new(cfg.roots_dirs()))
}

/// Starts the node over this master's data directory with the given views.
pub fn start_node(cfg: &MasterConfig, views: Views) -> Result<Node, halite_replication::NodeError> {
    Node::start(&data_dir(cfg), views, NodeConfig::default())
}

/// Starts the node over the configured view, first importing into the log any key the
/// view holds that the state machine does not: on the first use of Halite on a pki dir a
/// Salt master filled, that is every key; later, keys an operator placed by hand (Salt's
/// way of pre-seeding a minion key into `minions/`). The log is the truth from then on.
pub fn start_node_adopting(cfg: &MasterConfig) -> Result<Node, NodeError> {
    let (keys, denied) = key_view(cfg)?.entries()?;
    let node = start_node(cfg, views(cfg, key_view(cfg)?))?;
    let sm = node.state();
    let mut recs = Vec::new();
    for e in keys {
        if sm.get_key(&e.id)?.is_some() {
            continue;
        }
        let state = match e.state {
            BankState::Accepted => KeyState::Accepted,
            BankState::Pending => KeyState::Pending,
            BankState::Rejected => KeyState::Rejected,
        };
        recs.push(Record::KeySet(KeySet { id: e.id, state, pub_key: e.pub_key, time_ns: now_ns() }));
    }
    for (id, p) in denied {
        if sm.get_denied(&id)?.is_none() {
            recs.push(Record::KeySet(KeySet { id, state: KeyState::Denied, pub_key: p, time_ns: now_ns() }));
        }
    }
    if !recs.is_empty() {
        let source = format!("{}:{}", cfg.key_driver_name(), cfg.keys_dir().display());
        tracing::info!(entries = recs.len(), "importing keys found in {source} that the log does not hold yet");
        recs.insert(0, Record::ImportMarker(ImportMarker { source: source.clone(), phase: ImportPhase::Begin, counts: Default::default(), time_ns: now_ns() }));
        recs.push(Record::ImportMarker(ImportMarker { source, phase: ImportPhase::End, counts: Default::default(), time_ns: now_ns() }));
        for chunk in recs.chunks(4096) {
            node.propose(chunk)?;
        }
    }
    Ok(node)
}
