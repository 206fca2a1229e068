//! Halite's replication: the raft-rs node that turns proposals into committed, applied
//! records, alone or with peers over the sealed TCP transport on `cluster_pool_port`.
//! The join handshake, learners and the HashRing come next.

pub mod logging;
pub mod node;
pub mod ring;
pub mod transport;

pub use node::{DataDir, Inbox, Mailbox, Node, NodeConfig, NodeError, NodeHandle, Pending, Tap};
pub use ring::HashRing;
pub use transport::{ClusterKey, Outbox, TcpTransport};
