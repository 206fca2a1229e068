//! The request port (`ret_port`): reading requests within their bounds, handling and carrying them out, the session keys and nonces they are checked against.

pub mod intake;
pub mod shares;
pub mod signins;
pub mod requests;
pub mod budget;
pub mod sessions;
pub mod replay;
