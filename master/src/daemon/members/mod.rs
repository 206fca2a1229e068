//! What cluster members share outside the log: the cluster key pair and AES key, events fanned out to the other members.

pub mod cluster;
pub mod peer_events;
