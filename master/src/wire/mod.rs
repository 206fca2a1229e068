//! Salt's wire format, as a minion speaks it: msgpack payloads ([`payload`]), the
//! cryptography ([`crypto`]: RSA, X9.31, the Crypticle), the request envelope and its
//! checks ([`envelope`]), the publish envelope ([`publish`]) and reading a msgpack map in
//! place ([`scan`]). Pure functions of bytes and keys: no state, no I/O.

pub mod crypto;
pub mod envelope;
pub mod payload;
pub mod publish;
pub mod scan;
#[cfg(test)]
pub mod test_values;
