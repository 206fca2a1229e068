//! The cluster and traffic metrics of `/metrics` (registered in the process-wide
//! registry of `crate::metrics` the first time they are used):
//!
//! | metric | type | what |
//! |---|---|---|
//! | `halite_commit_index` | gauge | highest commit index this member knows |
//! | `halite_applied_index` | gauge | last index applied to its state machine |
//! | `halite_lag_entries` | gauge | commit − applied |
//! | `halite_ready` | gauge | 1 when caught up with the cluster (serving minions) |
//! | `halite_term` | gauge | raft term |
//! | `halite_is_leader` | gauge | 1 on the leader |
//! | `halite_leader_info{leader}` | gauge | 1, labelled with the leader's name (none while there is none) |
//! | `halite_proposals_total` | counter | proposals handed to the node |
//! | `halite_view_errors_total` | counter | view writes that failed (`replication/src/node/driver/faults.rs`) |
//! | `halite_view_dirty{view}` | gauge | 1 while that view (`keys`, `roots`) waits to be rebuilt |
//! | `halite_disk_full` | gauge | 1 while `halite_data_dir`'s filesystem is under `halite_min_free_bytes`, or the state machine met a full disk and waits for space, or a log write that met one is tried again (writes refused) |
//! | `halite_returns_total` | counter | job returns committed (`_return`) |
//! | `halite_auths_total{result}` | counter | sign-ins answered: `accepted`, `other` (pending, rejected, denied, full), `not_ready` |
//! | `halite_minions_connected` | gauge | established TCP connections on `interface:publish_port` (Salt counts the same way) |
//! | `halite_state_memory_bytes{part}` | gauge | the state machine's RocksDB memory by RocksDB's estimates: `memtables`, `table_readers` (index and filter blocks of the open table files), `block_cache` |
//!
//! The node's values are copied from its [`NodeStatus`] when `/metrics` is read
//! ([`refresh`]); the request counters are bumped by the request path ([`answered`]).

use std::net::IpAddr;
use std::sync::{LazyLock, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use halite_replication::node::status::Role;
use halite_replication::NodeStatus;

use crate::metrics::metrics;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaderLabels {
    pub leader: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ViewLabels {
    pub view: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartLabels {
    pub part: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuthLabels {
    pub result: String,
}

pub struct NodeMetrics {
    commit: Gauge,
    applied: Gauge,
    lag: Gauge,
    ready: Gauge,
    term: Gauge,
    is_leader: Gauge,
    leader: Family<LeaderLabels, Gauge>,
    proposals: Counter,
    view_errors: Counter,
    dirty: Family<ViewLabels, Gauge>,
    disk_full: Gauge,
    returns: Counter,
    auths: Family<AuthLabels, Counter>,
    connected: Gauge,
    state_memory: Family<PartLabels, Gauge>,
    /// One refresh at a time (the counters are brought up to the node's totals).
    refreshing: Mutex<()>,
}

static NODE: LazyLock<NodeMetrics> = LazyLock::new(|| {
    let n = NodeMetrics {
        commit: Gauge::default(),
        applied: Gauge::default(),
        lag: Gauge::default(),
        ready: Gauge::default(),
        term: Gauge::default(),
        is_leader: Gauge::default(),
        leader: Family::default(),
        proposals: Counter::default(),
        view_errors: Counter::default(),
        dirty: Family::default(),
        disk_full: Gauge::default(),
        returns: Counter::default(),
        auths: Family::default(),
        connected: Gauge::default(),
        state_memory: Family::default(),
        refreshing: Mutex::new(()),
    };
    let m = metrics();
    m.register("commit_index", "Highest raft commit index this member knows", n.commit.clone());
    m.register("applied_index", "Last log index applied to this member's state machine", n.applied.clone());
    m.register("lag_entries", "Committed entries not yet applied on this member", n.lag.clone());
    m.register("ready", "1 when this member has caught up with the cluster and serves minions", n.ready.clone());
    m.register("term", "Raft term", n.term.clone());
    m.register("is_leader", "1 when this member is the raft leader", n.is_leader.clone());
    m.register("leader_info", "The leader this member knows, by name", n.leader.clone());
    m.register("proposals", "Proposals handed to this member's node", n.proposals.clone());
    m.register("view_errors", "View writes that failed (the view is then rebuilt)", n.view_errors.clone());
    m.register("view_dirty", "1 while a view waits to be rebuilt", n.dirty.clone());
    m.register("disk_full", "1 while the data directory's filesystem is under halite_min_free_bytes, or the state machine met a full disk and waits for space, or a log write that met one is tried again (writes refused)", n.disk_full.clone());
    m.register("returns", "Job returns committed through this member", n.returns.clone());
    m.register("auths", "Sign-ins answered by this member, by result", n.auths.clone());
    m.register("minions_connected", "Established TCP connections on the publish port", n.connected.clone());
    m.register("state_memory_bytes", "The state machine's RocksDB memory (RocksDB's estimates), by part", n.state_memory.clone());
    n
});

/// Brings the metrics up to the node's status: `leader_name` names the leader,
/// `interface:publish_port` is where minions connect.
pub fn refresh(status: &NodeStatus, leader_name: Option<String>, interface: &str, publish_port: u16) {
    let n = &*NODE;
    let _one = n.refreshing.lock().unwrap_or_else(|p| p.into_inner());
    let s = status.get();
    let g = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    n.commit.set(g(s.commit));
    n.applied.set(g(s.applied));
    n.lag.set(g(s.lag()));
    n.ready.set(i64::from(s.ready));
    n.term.set(g(s.term));
    n.is_leader.set(i64::from(s.role == Role::Leader));
    n.leader.clear();
    if let Some(l) = leader_name {
        n.leader.get_or_create(&LeaderLabels { leader: l }).set(1);
    }
    n.proposals.inc_by(status.proposals().saturating_sub(n.proposals.get()));
    n.view_errors.inc_by(status.view_errors().saturating_sub(n.view_errors.get()));
    for v in halite_storage::views::ViewKind::ALL {
        n.dirty.get_or_create(&ViewLabels { view: v.as_str().into() }).set(i64::from(s.dirty_views.contains(&v.as_str())));
    }
    n.disk_full.set(i64::from(s.disk_full.is_some()));
    n.connected.set(g(established_on(interface.parse().ok(), publish_port)));
    // So every series exists from the first scrape.
    for r in ["accepted", "other", "not_ready"] {
        let _ = n.auths.get_or_create(&AuthLabels { result: r.into() });
    }
}

/// Brings `halite_state_memory_bytes` up to what the state machine holds now (left as
/// it was if RocksDB cannot be asked, during a snapshot install's swap).
pub fn refresh_state_memory(sm: &halite_storage::state::StateMachine) {
    let Ok(m) = sm.memory() else { return };
    let n = &*NODE;
    for (part, bytes) in [("memtables", m.memtables), ("table_readers", m.table_readers), ("block_cache", m.block_cache)] {
        n.state_memory.get_or_create(&PartLabels { part: part.into() }).set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }
}

/// Counts a request answered: `cmd` and, for `_auth`, whether it signed the minion in.
pub fn answered(cmd: &str, signed_in: bool) {
    match cmd {
        "_return" => {
            NODE.returns.inc();
        }
        "_auth" => {
            NODE.auths.get_or_create(&AuthLabels { result: if signed_in { "accepted" } else { "other" }.into() }).inc();
        }
        _ => {}
    }
}

/// Counts a sign-in answered with a retry because this member is not ready.
pub fn auth_not_ready() {
    NODE.auths.get_or_create(&AuthLabels { result: "not_ready".into() }).inc();
}

/// Established TCP connections whose local end is `interface:port` (any local address
/// when `interface` is unspecified, `0.0.0.0` or `::`) in `/proc/net/tcp` and `tcp6`;
/// 0 where those cannot be read. The address matters when several masters share port
/// numbers on one host (members on 127.0.0.x, or one address each on a shared host).
fn established_on(interface: Option<IpAddr>, port: u16) -> u64 {
    let want = format!(":{port:04X}");
    let wanted = interface.filter(|a| !a.is_unspecified());
    let mut n = 0;
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(f) else { continue };
        for line in text.lines().skip(1) {
            let mut cols = line.split_whitespace();
            let (Some(_), Some(local), Some(_), Some(state)) = (cols.next(), cols.next(), cols.next(), cols.next()) else { continue };
            // State 01 is ESTABLISHED.
            let Some(addr) = local.strip_suffix(&want) else { continue };
            if state == "01" && wanted.is_none_or(|w| proc_net_addr(addr).is_some_and(|a| same_host(a, w))) {
                n += 1;
            }
        }
    }
    n
}

/// An address as `/proc/net/tcp{,6}` prints it: the kernel's network-order words, each
/// printed as a host-order `%08X` (8 hex digits for IPv4, 32 for IPv6).
fn proc_net_addr(hex: &str) -> Option<IpAddr> {
    let word = |i: usize| hex.get(i * 8..i * 8 + 8).and_then(|w| u32::from_str_radix(w, 16).ok()).map(u32::to_ne_bytes);
    match hex.len() {
        8 => Some(IpAddr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            Some(IpAddr::from(b))
        }
        _ => None,
    }
}

/// The same address, an IPv4 one also in its IPv4-mapped IPv6 form (a dual-stack socket).
fn same_host(a: IpAddr, b: IpAddr) -> bool {
    let canon = |x: IpAddr| match x {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(x),
        v4 => v4,
    };
    canon(a) == canon(b)
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_established_connections_on_a_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let here = Some("127.0.0.1".parse().unwrap());
        let before = super::established_on(here, port);
        let _c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _s = l.accept().unwrap();
        assert_eq!(super::established_on(here, port), before + 1);
        assert!(super::established_on(None, port) >= before + 1, "no address: any local address counts");
    }

    #[test]
    fn counts_only_the_connections_on_its_own_address() {
        // Two listeners on one port number, as members on 127.0.0.x share ports. Addresses
        // nothing else on the machine uses: on 127.0.0.1 a benchmark's thousands of
        // loopback connections can hold the same port number as their local port.
        let a = std::net::TcpListener::bind("127.0.3.1:0").unwrap();
        let port = a.local_addr().unwrap().port();
        let Ok(b) = std::net::TcpListener::bind(("127.0.3.2", port)) else { return };
        let _c1 = std::net::TcpStream::connect(("127.0.3.2", port)).unwrap();
        let _c2 = std::net::TcpStream::connect(("127.0.3.2", port)).unwrap();
        let _s = (b.accept().unwrap(), b.accept().unwrap());
        assert_eq!(super::established_on(Some("127.0.3.1".parse().unwrap()), port), 0);
        assert_eq!(super::established_on(Some("127.0.3.2".parse().unwrap()), port), 2);
    }

    #[test]
    fn reads_proc_net_addresses() {
        let v4 = u32::from_ne_bytes([127, 0, 0, 2]);
        assert_eq!(super::proc_net_addr(&format!("{v4:08X}")), Some("127.0.0.2".parse().unwrap()));
        let mapped: std::net::IpAddr = "::ffff:127.0.0.2".parse().unwrap();
        let std::net::IpAddr::V6(m) = mapped else { unreachable!() };
        let hex: String = m.octets().chunks(4).map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))).collect();
        let back = super::proc_net_addr(&hex).unwrap();
        assert!(super::same_host(back, "127.0.0.2".parse().unwrap()));
        assert_eq!(super::proc_net_addr("zz"), None);
    }
}
