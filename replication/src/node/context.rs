//! The entry context: the bytes a node puts in a raft entry's `context` field (the
//! proposal's identity, and a membership change's address). The codec lives in
//! `halite_storage::context`, because the state machine reads the identity to apply
//! each proposal at most once; it is re-exported here for the node's users.

pub use halite_storage::context::*;
