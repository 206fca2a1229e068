//! Halite's replication: the raft-rs node that turns proposals into committed, applied
//! records. Today it runs one voter; the cluster work adds the peer transport on
//! `cluster_pool_port`, the join handshake, learners and the HashRing here.

pub mod logging;
pub mod node;

pub use node::{DataDir, Node, NodeConfig, NodeError, Pending};
