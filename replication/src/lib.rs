//! Halite's replication: the raft-rs node that turns proposals into committed, applied
//! records, alone or with peers over the sealed TCP transport on the cluster's pool port,
//! and how members find each other. Knows nothing of Salt's payloads or configuration.
//!
//! | module | owns |
//! |--------|------|
//! | [`node`] | the node: public face (`mod.rs`), boot, the driver thread and group commit, waiting proposals, apply and the tap, membership, the entry-context bytes |
//! | [`transport`] | raft and control messages between members, one sealed frame each |
//! | [`cluster`] | the cluster plan: member names → raft ids, addresses, the transport key |
//! | [`join`] | the join handshake: hello / welcome / join as control frames, a new member added as a learner |
//! | [`ring`] | the HashRing of members |
//! | [`snapshot_transfer`] | a snapshot streamed to a peer over the transport (manifest, chunks, then raft's message) and received, checked, into its store |
//! | [`logging`] | raft-rs's slog output into `tracing` |

pub mod cluster;
pub mod join;
pub mod logging;
pub mod node;
pub mod ring;
pub mod snapshot_transfer;
pub mod transport;

#[cfg(test)]
mod testutil;

pub use cluster::{member_id, ClusterPlan};
pub use node::{DataDir, Inbox, Mailbox, Node, NodeConfig, NodeError, NodeHandle, NodeStatus, Pending, Tap};
pub use ring::HashRing;
pub use transport::{ClusterKey, Credentials, Outbox, TcpTransport};
