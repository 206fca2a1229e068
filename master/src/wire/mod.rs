//! Salt's wire format, as a minion speaks it: msgpack payloads ([`payload`]), the
//! cryptography ([`crypto`]: RSA, X9.31, the Crypticle), the request envelope and its
//! checks ([`envelope`]) and the publish envelope ([`publish`]). Pure functions of bytes
//! and keys: no state, no I/O.

pub mod crypto;
pub mod envelope;
pub mod payload;
pub mod publish;
