//! Who a member is: its own key pair, and the public key each raft id is bound to.
//!
//! `cluster_secret` proves that a peer belongs to the cluster; it cannot tell members
//! apart, since every member holds it. So each member also has a key pair of its own
//! (Ed25519: a 32-byte public key and 64-byte signatures, fixed sizes, so the handshake
//! still reads no length from an unauthenticated peer) and signs every handshake
//! transcript with it (`handshake.rs`). A raft id is bound to one public key:
//!
//! - keys the layer above pins at start ([`PeerKeys::pin`]; the master pins the keys in
//!   `cluster_pki_dir/peers/<name>.pub` for its founding peers), and
//! - otherwise the first key that completes a handshake under that id (proving the
//!   cluster secret and signing with it). That is how a joiner, unknown before, becomes
//!   known; from then on the binding holds for as long as the process runs, and the
//!   layer above may persist it ([`PeerKeys::on_learned`]).
//!
//! A handshake under a bound id with another key is refused (`peer_key_mismatch`): a
//! holder of `cluster_secret` without member X's private key cannot speak as X once X is
//! known.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use openssl::pkey::{Id, PKey, Private};
use openssl::sign::{Signer, Verifier};

use super::refusal::Refused;

/// Length of a member public key on the wire (Ed25519).
pub const PUBLIC_LEN: usize = 32;
/// Length of a handshake signature (Ed25519).
pub const SIG_LEN: usize = 64;
/// Most bindings kept; past it new ids are refused (a cluster has a handful of members;
/// the bound only stops a secret holder from growing the map without limit).
const MAX_BOUND: usize = 4096;

/// A member's own key pair.
pub struct MemberKey {
    key: PKey<Private>,
    public: [u8; PUBLIC_LEN],
}

impl MemberKey {
    /// A new key pair.
    pub fn generate() -> Result<Self, String> {
        Self::of(PKey::generate_ed25519().map_err(|e| e.to_string())?)
    }

    /// The key pair of a PKCS#8 PEM private key (what [`MemberKey::to_pem`] writes).
    pub fn from_pem(pem: &[u8]) -> Result<Self, String> {
        let key = PKey::private_key_from_pem(pem).map_err(|e| format!("not a private key PEM: {e}"))?;
        if key.id() != Id::ED25519 {
            return Err("not an Ed25519 key".into());
        }
        Self::of(key)
    }

    fn of(key: PKey<Private>) -> Result<Self, String> {
        let raw = key.raw_public_key().map_err(|e| e.to_string())?;
        let public = raw.as_slice().try_into().map_err(|_| "an Ed25519 public key is 32 bytes".to_string())?;
        Ok(MemberKey { key, public })
    }

    /// The private key as PKCS#8 PEM.
    pub fn to_pem(&self) -> Result<Vec<u8>, String> {
        self.key.private_key_to_pem_pkcs8().map_err(|e| e.to_string())
    }

    /// The public key as a SubjectPublicKeyInfo PEM (`peers/<name>.pub`).
    pub fn public_pem(&self) -> Result<Vec<u8>, String> {
        self.key.public_key_to_pem().map_err(|e| e.to_string())
    }

    /// The raw public key (what a hello carries).
    pub fn public(&self) -> [u8; PUBLIC_LEN] {
        self.public
    }

    pub(super) fn sign(&self, msg: &[u8]) -> Result<[u8; SIG_LEN], Refused> {
        let sig = Signer::new_without_digest(&self.key).and_then(|mut s| s.sign_oneshot_to_vec(msg)).map_err(|e| Refused::new("sign", e))?;
        sig.as_slice().try_into().map_err(|_| Refused::new("sign", "an Ed25519 signature is 64 bytes"))
    }
}

/// The raw public key of a public key PEM (`peers/<name>.pub`).
pub fn public_from_pem(pem: &[u8]) -> Result<[u8; PUBLIC_LEN], String> {
    let key = PKey::public_key_from_pem(pem).map_err(|e| format!("not a public key PEM: {e}"))?;
    if key.id() != Id::ED25519 {
        return Err("not an Ed25519 public key".into());
    }
    let raw = key.raw_public_key().map_err(|e| e.to_string())?;
    raw.as_slice().try_into().map_err(|_| "an Ed25519 public key is 32 bytes".to_string())
}

/// The PEM of a raw public key.
pub fn public_to_pem(public: &[u8; PUBLIC_LEN]) -> Result<Vec<u8>, String> {
    PKey::public_key_from_raw_bytes(public, Id::ED25519).and_then(|k| k.public_key_to_pem()).map_err(|e| e.to_string())
}

/// Whether `sig` is `public`'s signature of `msg`.
pub(super) fn verify(public: &[u8; PUBLIC_LEN], msg: &[u8], sig: &[u8; SIG_LEN]) -> bool {
    PKey::public_key_from_raw_bytes(public, Id::ED25519)
        .and_then(|k| Verifier::new_without_digest(&k).and_then(|mut v| v.verify_oneshot(sig, msg)))
        .unwrap_or(false)
}

/// Called once for each binding learned from a handshake: `(raft id, public key)`.
pub type Learned = Arc<dyn Fn(u64, &[u8; PUBLIC_LEN]) + Send + Sync>;

/// The public key each raft id is bound to (see the module documentation).
#[derive(Default)]
pub struct PeerKeys {
    bound: Mutex<HashMap<u64, [u8; PUBLIC_LEN]>>,
    learned: Mutex<Option<Learned>>,
}

impl PeerKeys {
    /// Binds `id` to `public` (a key known in advance); a later pin replaces it.
    pub fn pin(&self, id: u64, public: [u8; PUBLIC_LEN]) {
        self.bound.lock().unwrap_or_else(|p| p.into_inner()).insert(id, public);
    }

    /// The key `id` is bound to, if any.
    pub fn bound(&self, id: u64) -> Option<[u8; PUBLIC_LEN]> {
        self.bound.lock().unwrap_or_else(|p| p.into_inner()).get(&id).copied()
    }

    /// Where bindings learned from now on are reported.
    pub fn on_learned(&self, f: Learned) {
        *self.learned.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    /// Accepts `public` for `id` after a handshake proved the cluster secret and this
    /// key's signature: the key `id` is bound to, or, for an unbound id, binds it.
    pub(super) fn admit(&self, id: u64, public: &[u8; PUBLIC_LEN]) -> Result<(), Refused> {
        let mut bound = self.bound.lock().unwrap_or_else(|p| p.into_inner());
        match bound.get(&id) {
            Some(k) if openssl::memcmp::eq(k, public) => return Ok(()),
            Some(_) => return Err(Refused::new("peer_key_mismatch", format!("a peer claims member {id} but signs with another key than the one member {id} is bound to"))),
            None if bound.len() >= MAX_BOUND => return Err(Refused::new("member_keys_full", format!("{MAX_BOUND} member keys are bound already; member {id} is not admitted"))),
            None => {
                bound.insert(id, *public);
            }
        }
        drop(bound);
        tracing::info!(member = id, "member key bound (first authenticated handshake under this id)");
        let learned = self.learned.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(f) = learned {
            f(id, public);
        }
        Ok(())
    }
}
