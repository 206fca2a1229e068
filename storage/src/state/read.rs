//! [`StateRead`]: the applied state, read only, as a type.

use crate::batch_run::StoredRun;
use crate::eauth_token::EauthToken;
use crate::error::Result;
use crate::format::{JobPublished, JobReturn, RootsTree};
use crate::keys::BankState;

use super::{RootsMeta, StateDigest, StateMachine, StoredKey};

/// The queries a reader of the applied state may make, and nothing else.
///
/// Whatever decides from the state without changing it (the master's admin verbs, which
/// an orchestration's steps are, the reactor's plan, the offline `salt-key` and
/// `salt-run`) is handed a `&dyn StateRead`: it can look up keys, jobs, returns, grains, pillar, mine,
/// tokens, batch runs and roots, but the state machine's writes (`apply`,
/// `apply_entries`, `flush`, `checkpoint`, `set_views_index`, ...) are not methods of
/// this trait, so such a reader cannot change the state, however it is written. What it
/// wants changed it returns as records, which reach the state only through the log.
///
/// [`StateMachine`] implements it over RocksDB; each method is the state machine's
/// method of the same name.
///
/// A reader compiles:
///
/// ```
/// use halite_storage::state::{StateMachine, StateRead};
///
/// fn applied(state: &dyn StateRead) -> halite_storage::Result<u64> {
///     state.applied_index()
/// }
/// let sm = StateMachine::open_in_memory("state-read-doc").unwrap();
/// assert_eq!(applied(&sm).unwrap(), 0);
/// ```
///
/// and a reader that tries to apply a record does not:
///
/// ```compile_fail
/// use halite_storage::state::StateRead;
///
/// fn sneaks_a_write(state: &dyn StateRead) {
///     state.apply(&[]).unwrap();
/// }
/// ```
pub trait StateRead {
    /// The last applied log index (0 before any).
    fn applied_index(&self) -> Result<u64>;
    /// A digest of everything applied, the same on every member at the same index.
    fn digest(&self) -> Result<StateDigest>;

    /// A minion's entry in the keys bank.
    fn get_key(&self, id: &str) -> Result<Option<StoredKey>>;
    /// A minion's first denied key: (time_ns, public key bytes).
    fn get_denied(&self, id: &str) -> Result<Option<(u64, Vec<u8>)>>;
    /// Every entry of the keys bank, by id.
    fn keys(&self) -> Result<Vec<(String, StoredKey)>>;
    /// Every denied key: (id, time_ns, public key bytes).
    fn denied(&self) -> Result<Vec<(String, u64, Vec<u8>)>>;
    /// The ids of the keys in `state`, sorted.
    fn ids_in(&self, state: BankState) -> Result<Vec<String>>;

    /// The grains a minion last reported (msgpack).
    fn grains(&self, id: &str) -> Result<Option<Vec<u8>>>;
    /// When a minion last reported its grains (ns since the epoch).
    fn grains_time_ns(&self, id: &str) -> Result<Option<u64>>;
    /// The pillar last compiled for a minion (msgpack).
    fn pillar(&self, id: &str) -> Result<Option<Vec<u8>>>;
    /// A minion's mine: (function, msgpack data) pairs.
    fn mine(&self, id: &str) -> Result<Vec<(String, Vec<u8>)>>;

    /// A published job.
    fn job(&self, jid: &str) -> Result<Option<JobPublished>>;
    /// Every published job, in jid order.
    fn jobs(&self) -> Result<Vec<JobPublished>>;
    /// The returns stored for a job.
    fn job_returns(&self, jid: &str) -> Result<Vec<JobReturn>>;
    /// One minion's return to a job.
    fn job_return(&self, jid: &str, id: &str) -> Result<Option<JobReturn>>;

    /// A salt-api token by its hash (whether it has expired is the reader's to decide).
    fn eauth_token(&self, hash: &str) -> Result<Option<EauthToken>>;
    /// A master-driven batch run.
    fn batch_run(&self, jid: &str) -> Result<Option<StoredRun>>;
    /// Every batch run, in jid order.
    fn batch_runs(&self) -> Result<Vec<(String, StoredRun)>>;

    /// Every complete roots file: (tree, saltenv, path, meta).
    fn roots_files(&self) -> Result<Vec<(RootsTree, String, String, RootsMeta)>>;

    /// Every complete roots file of one tree: (tree, saltenv, path, meta).
    fn roots_files_of(&self, tree: RootsTree) -> Result<Vec<(RootsTree, String, String, RootsMeta)>>;
}

impl StateRead for StateMachine {
    fn applied_index(&self) -> Result<u64> {
        StateMachine::applied_index(self)
    }
    fn digest(&self) -> Result<StateDigest> {
        StateMachine::digest(self)
    }
    fn get_key(&self, id: &str) -> Result<Option<StoredKey>> {
        StateMachine::get_key(self, id)
    }
    fn get_denied(&self, id: &str) -> Result<Option<(u64, Vec<u8>)>> {
        StateMachine::get_denied(self, id)
    }
    fn keys(&self) -> Result<Vec<(String, StoredKey)>> {
        StateMachine::keys(self)
    }
    fn denied(&self) -> Result<Vec<(String, u64, Vec<u8>)>> {
        StateMachine::denied(self)
    }
    fn ids_in(&self, state: BankState) -> Result<Vec<String>> {
        StateMachine::ids_in(self, state)
    }
    fn grains(&self, id: &str) -> Result<Option<Vec<u8>>> {
        StateMachine::grains(self, id)
    }
    fn grains_time_ns(&self, id: &str) -> Result<Option<u64>> {
        StateMachine::grains_time_ns(self, id)
    }
    fn pillar(&self, id: &str) -> Result<Option<Vec<u8>>> {
        StateMachine::pillar(self, id)
    }
    fn mine(&self, id: &str) -> Result<Vec<(String, Vec<u8>)>> {
        StateMachine::mine(self, id)
    }
    fn job(&self, jid: &str) -> Result<Option<JobPublished>> {
        StateMachine::job(self, jid)
    }
    fn jobs(&self) -> Result<Vec<JobPublished>> {
        StateMachine::jobs(self)
    }
    fn job_returns(&self, jid: &str) -> Result<Vec<JobReturn>> {
        StateMachine::job_returns(self, jid)
    }
    fn job_return(&self, jid: &str, id: &str) -> Result<Option<JobReturn>> {
        StateMachine::job_return(self, jid, id)
    }
    fn eauth_token(&self, hash: &str) -> Result<Option<EauthToken>> {
        StateMachine::eauth_token(self, hash)
    }
    fn batch_run(&self, jid: &str) -> Result<Option<StoredRun>> {
        StateMachine::batch_run(self, jid)
    }
    fn batch_runs(&self) -> Result<Vec<(String, StoredRun)>> {
        StateMachine::batch_runs(self)
    }
    fn roots_files(&self) -> Result<Vec<(RootsTree, String, String, RootsMeta)>> {
        StateMachine::roots_files(self)
    }
    fn roots_files_of(&self, tree: RootsTree) -> Result<Vec<(RootsTree, String, String, RootsMeta)>> {
        StateMachine::roots_files_of(self, tree)
    }
}
