//! The publish envelope (Salt's `salt/channel/server.py`, `PubServerChannel`): a job load sealed with the publish AES key and
//! signed with the master key, numbered with `serial` on a lone master.

use rmpv::Value;

use super::crypto::{Crypticle, PrivateKey, SigAlgo, PICKLE};
use super::payload::{self, bin, encode};

/// The wall clock in microseconds since the epoch, below `i64::MAX` (minions read the
/// serial as a signed integer).
fn serial_floor() -> u64 {
    let us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros()).unwrap_or(0);
    u64::try_from(us).unwrap_or(0).min(i64::MAX as u64 / 2)
}

/// Publishes jobs: serial numbers and the envelope.
pub struct Publisher {
    aes: Crypticle,
    serial: u64,
    /// Whether publishes carry `serial` (not in a cluster, as in Salt: members keep their
    /// own counters and a minion's publish connection may move between them).
    numbered: bool,
}

impl Publisher {
    /// A lone master's publisher. Its serials start at the wall clock in microseconds,
    /// not at zero: a lone master keeps its AES key across restarts (`daemon::cluster`),
    /// and a minion that did not sign in again keeps the last serial it accepted for that
    /// key, dropping every publish numbered at or below it. A run publishes
    /// far fewer than one job a microsecond, so a later start numbers above every earlier
    /// run's serials (unless the clock is set back by more than the gap).
    pub fn new(aes: Crypticle) -> Self {
        Publisher { aes, serial: serial_floor(), numbered: true }
    }

    /// A cluster member's publisher: no `serial`.
    pub fn unnumbered(aes: Crypticle) -> Self {
        Publisher { aes, serial: 0, numbered: false }
    }

    /// Switches to a new AES key; serials start again from zero for it.
    pub fn rotate(&mut self, aes: Crypticle) {
        self.aes = aes;
        self.serial = 0;
    }

    /// The envelope frame for a publish load (a msgpack map without `serial`).
    pub fn envelope(&mut self, load: &Value, key: &PrivateKey, sig_algo: SigAlgo) -> Result<Vec<u8>, super::crypto::CryptoError> {
        self.serial = self.serial.saturating_add(1);
        let mut plain_map = match load {
            Value::Map(m) => m.clone(),
            _ => Vec::new(),
        };
        if self.numbered {
            plain_map.push((Value::from("serial"), Value::from(self.serial)));
        }
        let mut plain = PICKLE.to_vec();
        plain.extend_from_slice(&encode(&Value::Map(plain_map)));
        let ct = self.aes.encrypt(&plain)?;
        let sig = key.sign(&ct, sig_algo)?;
        Ok(encode(&payload::map([("enc", Value::from("aes")), ("load", bin(ct)), ("sig_algo", Value::from(sig_algo.name())), ("sig", bin(sig))])))
    }
}
