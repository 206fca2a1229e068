//! The admin socket: its line protocol, plans carried out, `job.follow`, master-driven batch runs, the range server's client.

pub mod admin;
pub mod follow;
pub mod lines;
pub mod batches;
pub mod range_client;
