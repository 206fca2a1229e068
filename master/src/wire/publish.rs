//! The publish envelope (spec §8.2): a job load sealed with the publish AES key and
//! signed with the master key, numbered with `serial` on a lone master.

use rmpv::Value;

use super::crypto::{Crypticle, PrivateKey, SigAlgo, PICKLE};
use super::payload::{self, bin, encode};

/// Publishes jobs: serial numbers and the envelope (spec §8.2).
pub struct Publisher {
    aes: Crypticle,
    serial: u64,
    /// Whether publishes carry `serial` (not in a cluster, as in Salt: members keep their
    /// own counters and a minion's publish connection may move between them).
    numbered: bool,
}

impl Publisher {
    pub fn new(aes: Crypticle) -> Self {
        Publisher { aes, serial: 0, numbered: true }
    }

    /// A cluster member's publisher: no `serial`.
    pub fn unnumbered(aes: Crypticle) -> Self {
        Publisher { aes, serial: 0, numbered: false }
    }

    /// Switches to a new AES key; serials start again from zero for it (spec §8.2).
    pub fn rotate(&mut self, aes: Crypticle) {
        self.aes = aes;
        self.serial = 0;
    }

    /// The envelope frame for a publish load (a msgpack map without `serial`).
    pub fn envelope(&mut self, load: &Value, key: &PrivateKey, sig_algo: SigAlgo) -> Result<Vec<u8>, super::crypto::CryptoError> {
        self.serial += 1;
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
