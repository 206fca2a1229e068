//! Listening: TCP listeners with Salt's options, the request and publish sockets and their bounds, the descriptors kept for the master's own files.

pub mod listen;
pub mod sockets;
pub mod files;
#[cfg(test)]
mod sockets_fuzz_tests;
