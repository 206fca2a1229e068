//! Who a member is: its own key pair, and the public key each raft id is bound to.
//!
//! `cluster_secret` proves that a peer belongs to the cluster; it cannot tell members
//! apart, since every member holds it. So each member also has a key pair of its own
//! (Ed25519: a 32-byte public key and 64-byte signatures, fixed sizes, so the handshake
//! still reads no length from an unauthenticated peer) and signs every handshake
//! transcript with it (`handshake.rs`). Which key speaks for a raft id is decided by the
//! log: the **key book** of the applied state (`halite_storage::state`'s
//! `member_keys.rs`: a joiner's key travels in the membership change that adds it, a
//! founder records its own with a `member_key` record; both decided at apply), which
//! the node hands to the transport at start and whenever it changes
//! ([`PeerKeys::set_applied`]). Before a founder's record applies, its key is the one
//! **pinned** for it, if any (the master pins a founder's `cluster_pki_dir/peers/<name>.pub`
//! when the file is there), else, by default, the first key that completes a handshake
//! under its id: the cluster secret is what authenticates a founder, as in Salt, and its
//! key is bound in the log by its own `member_key` record from then on. With
//! [`PeerKeys::require_pins`] (the master's `halite_cluster_pin_founders`) a founder
//! is admitted only under a pinned key. A handshake under id X with key K is
//! ([`PeerKeys::admit`]):
//!
//! 1. X in the book: admitted as a [member](Admission::Member) if K is X's key, refused
//!    otherwise (`peer_key_mismatch`), on every member alike, whether or not it ever
//!    talked to X;
//! 2. this node a member of the applied group and X a member too, without a key in the
//!    book yet (a founder before its record applied): admitted if K is the key pinned for
//!    X ([`PeerKeys::pin`]), refused otherwise (`peer_key_mismatch`). With nothing pinned
//!    for X, the first K that completes a handshake under X is **held** for X in memory
//!    and admitted, and from then on only K until the book names X's key (a second key
//!    under X is refused, `peer_key_mismatch`); with [`PeerKeys::require_pins`] X is
//!    refused outright (`peer_key_unknown`), so a holder of the secret racing a founder at
//!    cluster start gets nowhere;
//! 3. this node a member and X no member (a joiner, a removed member): admitted for the
//!    **join path** only ([`Admission::Joining`]): the connection may carry control
//!    messages (hello, join), never raft messages or snapshots. The key it proved is what
//!    its join entry carries; once that applies, only that key speaks for X. A removed
//!    member's id leaves the book and the group, so its key no longer opens a session; an
//!    inbound connection re-checks its admission at every raft frame, so one opened
//!    before the removal is closed at its next frame;
//! 4. this node not a member yet (before its node starts, a joiner during its state
//!    sync): the pinned key if X has one, else whatever key completes a handshake under X
//!    is held for X in memory. Once this node is a member, only what case 2 allows stays
//!    held (a member of the group without a key in the book); every other such key is
//!    dropped. A joiner has no state of its own to protect yet, checks the keys of the
//!    log it receives, and never writes such a key anywhere.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use openssl::pkey::{Id, PKey, Private};
use openssl::sign::{Signer, Verifier};

use super::refusal::Refused;

/// Length of a member public key on the wire (Ed25519).
pub const PUBLIC_LEN: usize = 32;
/// Length of a handshake signature (Ed25519).
pub const SIG_LEN: usize = 64;
/// Most keys held from handshakes (cases 2 and 4); past it new ids are refused (the bound only stops a secret holder from growing the map without limit).
const MAX_BOUND: usize = 4096;

/// Why a member key could not be made, read or written.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("not a private key PEM: {0}")]
    NotPrivatePem(openssl::error::ErrorStack),
    #[error("not a public key PEM: {0}")]
    NotPublicPem(openssl::error::ErrorStack),
    #[error("not an Ed25519 key")]
    NotEd25519,
    #[error("an Ed25519 public key is 32 bytes")]
    PublicLength,
    #[error("OpenSSL: {0}")]
    OpenSsl(#[from] openssl::error::ErrorStack),
}

/// A member's own key pair.
pub struct MemberKey {
    key: PKey<Private>,
    public: [u8; PUBLIC_LEN],
}

impl MemberKey {
    /// A new key pair.
    pub fn generate() -> Result<Self, KeyError> {
        Self::of(PKey::generate_ed25519()?)
    }

    /// The key pair of a PKCS#8 PEM private key (what [`MemberKey::to_pem`] writes).
    pub fn from_pem(pem: &[u8]) -> Result<Self, KeyError> {
        let key = PKey::private_key_from_pem(pem).map_err(KeyError::NotPrivatePem)?;
        if key.id() != Id::ED25519 {
            return Err(KeyError::NotEd25519);
        }
        Self::of(key)
    }

    fn of(key: PKey<Private>) -> Result<Self, KeyError> {
        let raw = key.raw_public_key()?;
        let public = raw.as_slice().try_into().map_err(|_| KeyError::PublicLength)?;
        Ok(MemberKey { key, public })
    }

    /// The private key as PKCS#8 PEM.
    pub fn to_pem(&self) -> Result<Vec<u8>, KeyError> {
        Ok(self.key.private_key_to_pem_pkcs8()?)
    }

    /// The public key as a SubjectPublicKeyInfo PEM (`peers/<name>.pub`).
    pub fn public_pem(&self) -> Result<Vec<u8>, KeyError> {
        Ok(self.key.public_key_to_pem()?)
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
pub fn public_from_pem(pem: &[u8]) -> Result<[u8; PUBLIC_LEN], KeyError> {
    let key = PKey::public_key_from_pem(pem).map_err(KeyError::NotPublicPem)?;
    if key.id() != Id::ED25519 {
        return Err(KeyError::NotEd25519);
    }
    let raw = key.raw_public_key()?;
    raw.as_slice().try_into().map_err(|_| KeyError::PublicLength)
}

/// The PEM of a raw public key.
pub fn public_to_pem(public: &[u8; PUBLIC_LEN]) -> Result<Vec<u8>, KeyError> {
    Ok(PKey::public_key_from_raw_bytes(public, Id::ED25519).and_then(|k| k.public_key_to_pem())?)
}

/// Whether `sig` is `public`'s signature of `msg`.
pub(super) fn verify(public: &[u8; PUBLIC_LEN], msg: &[u8], sig: &[u8; SIG_LEN]) -> bool {
    PKey::public_key_from_raw_bytes(public, Id::ED25519)
        .and_then(|k| Verifier::new_without_digest(&k).and_then(|mut v| v.verify_oneshot(sig, msg)))
        .unwrap_or(false)
}

/// Called with the applied key book whenever it changes.
pub type BookChanged = Arc<dyn Fn(&BTreeMap<u64, [u8; PUBLIC_LEN]>) + Send + Sync>;

/// What a connection that completed its handshake may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// A member: raft messages, snapshots and control messages.
    Member,
    /// Not a member (see the module documentation, case 3): control messages only.
    Joining,
}

/// What the applied state says (see [`PeerKeys::set_applied`]).
#[derive(Default)]
struct Applied {
    book: BTreeMap<u64, [u8; PUBLIC_LEN]>,
    members: HashSet<u64>,
    /// Whether this node is a member of the applied group (before the node hands its
    /// state over, or while it joins, it is not).
    me_member: bool,
}

/// The public key each raft id is bound to (see the module documentation).
#[derive(Default)]
pub struct PeerKeys {
    applied: RwLock<Applied>,
    pinned: Mutex<HashMap<u64, [u8; PUBLIC_LEN]>>,
    /// The key of every id without a pin of its own ([`PeerKeys::pin_all`]).
    pinned_all: Mutex<Option<[u8; PUBLIC_LEN]>>,
    /// Keys held from handshakes: while this node is no member yet (case 4 of the module
    /// documentation), and for members without a key in the book (case 2).
    bound: Mutex<HashMap<u64, [u8; PUBLIC_LEN]>>,
    /// Whether a member without a key in the book is admitted only under a pinned key.
    require_pins: AtomicBool,
    book_changed: Mutex<Option<BookChanged>>,
}

impl PeerKeys {
    /// Pins `id` to `public` (a key known in advance, used while the log holds none for
    /// `id`); a later pin replaces it.
    pub fn pin(&self, id: u64, public: [u8; PUBLIC_LEN]) {
        self.pinned.lock().unwrap_or_else(|p| p.into_inner()).insert(id, public);
    }

    /// Pins every id without a pin of its own to `public`: for a process whose transports
    /// all present the same key (tests, benches: `From<ClusterKey>` for [`Credentials`]).
    ///
    /// [`Credentials`]: super::Credentials
    pub fn pin_all(&self, public: [u8; PUBLIC_LEN]) {
        *self.pinned_all.lock().unwrap_or_else(|p| p.into_inner()) = Some(public);
    }

    /// From now on a member of the group without a key in the book is admitted only under
    /// the key pinned for it, never on first contact (case 2 of the module
    /// documentation); keys held for such members are dropped.
    pub fn require_pins(&self) {
        self.require_pins.store(true, Ordering::SeqCst);
        if self.applied.read().unwrap_or_else(|p| p.into_inner()).me_member {
            self.bound.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
    }

    fn pins_required(&self) -> bool {
        self.require_pins.load(Ordering::SeqCst)
    }

    /// Whether a key is pinned for `id` (its own pin or [`PeerKeys::pin_all`]'s).
    pub fn is_pinned(&self, id: u64) -> bool {
        self.pinned_key(id).is_some()
    }

    fn pinned_key(&self, id: u64) -> Option<[u8; PUBLIC_LEN]> {
        let own = self.pinned.lock().unwrap_or_else(|p| p.into_inner()).get(&id).copied();
        own.or_else(|| *self.pinned_all.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The key `id` is bound to, if any: the applied one, else the pinned one, else the one
    /// held from a handshake (cases 2 and 4 of the module documentation).
    pub fn bound(&self, id: u64) -> Option<[u8; PUBLIC_LEN]> {
        let me_member = {
            let a = self.applied.read().unwrap_or_else(|p| p.into_inner());
            if let Some(k) = a.book.get(&id) {
                return Some(*k);
            }
            a.me_member
        };
        if let Some(k) = self.pinned_key(id) {
            return Some(k);
        }
        if me_member && self.pins_required() {
            return None;
        }
        self.bound.lock().unwrap_or_else(|p| p.into_inner()).get(&id).copied()
    }

    /// The applied key book, as last set.
    pub fn book(&self) -> BTreeMap<u64, [u8; PUBLIC_LEN]> {
        self.applied.read().unwrap_or_else(|p| p.into_inner()).book.clone()
    }

    /// Where the applied book goes whenever it changes from now on (the master keeps
    /// `peers/<name>.pub` as its view).
    pub fn on_book_changed(&self, f: BookChanged) {
        *self.book_changed.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    /// What the applied state says: every id's key (`book`), the group's voters and
    /// learners (`members`), and whether this node is one of them.
    pub fn set_applied(&self, book: BTreeMap<u64, [u8; PUBLIC_LEN]>, members: HashSet<u64>, me_member: bool) {
        let changed = {
            let mut a = self.applied.write().unwrap_or_else(|p| p.into_inner());
            let changed = a.book != book;
            *a = Applied { book, members, me_member };
            changed.then(|| a.book.clone())
        };
        if me_member {
            // Keys held before this node was a member speak for nobody now (case 4), but
            // for members of the group the book holds no key for (case 2).
            let a = self.applied.read().unwrap_or_else(|p| p.into_inner());
            let keep = !self.pins_required();
            self.bound.lock().unwrap_or_else(|p| p.into_inner()).retain(|id, _| keep && a.members.contains(id) && !a.book.contains_key(id));
        }
        if let Some(book) = changed {
            tracing::info!(members = ?book.keys().collect::<Vec<_>>(), "member key book applied");
            let f = self.book_changed.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(f) = f {
                f(&book);
            }
        }
    }

    /// What a connection under `id` proving `public` may do now, without binding
    /// anything (an open connection re-checks with this).
    pub(super) fn admits(&self, id: u64, public: &[u8; PUBLIC_LEN]) -> Result<Admission, Refused> {
        match self.lookup(id) {
            Lookup::Key(k) if openssl::memcmp::eq(&k, public) => Ok(Admission::Member),
            Lookup::Key(_) => Err(mismatch(id)),
            Lookup::Unbound => match self.bound.lock().unwrap_or_else(|p| p.into_inner()).get(&id) {
                Some(k) if !openssl::memcmp::eq(k, public) => Err(mismatch(id)),
                _ => Ok(Admission::Member),
            },
            Lookup::Unknown => Err(unknown(id)),
            Lookup::Joining => Ok(Admission::Joining),
        }
    }

    /// Admits `public` for `id` after a handshake proved the cluster secret and this
    /// key's signature (see the module documentation); an id with no key yet is held to
    /// it (cases 2 and 4).
    pub(super) fn admit(&self, id: u64, public: &[u8; PUBLIC_LEN]) -> Result<Admission, Refused> {
        match self.lookup(id) {
            Lookup::Key(k) if openssl::memcmp::eq(&k, public) => return Ok(Admission::Member),
            Lookup::Key(_) => return Err(mismatch(id)),
            Lookup::Unknown => return Err(unknown(id)),
            Lookup::Joining => return Ok(Admission::Joining),
            Lookup::Unbound => {}
        }
        let mut bound = self.bound.lock().unwrap_or_else(|p| p.into_inner());
        match bound.get(&id) {
            Some(k) if openssl::memcmp::eq(k, public) => return Ok(Admission::Member),
            Some(_) => return Err(mismatch(id)),
            None if bound.len() >= MAX_BOUND => return Err(Refused::new("member_keys_full", format!("{MAX_BOUND} member keys are bound already; member {id} is not admitted"))),
            None => {
                bound.insert(id, *public);
            }
        }
        drop(bound);
        tracing::debug!(member = id, "member key held from its first handshake until the log's key book names one");
        Ok(Admission::Member)
    }

    /// Where `id` stands (the cases of the module documentation): its applied key, join
    /// path only, its pinned key, unknown (a member with neither, pins required), or
    /// unbound (held from its first handshake).
    fn lookup(&self, id: u64) -> Lookup {
        let a = self.applied.read().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = a.book.get(&id) {
            return Lookup::Key(*k);
        }
        if a.me_member && !a.members.contains(&id) {
            return Lookup::Joining;
        }
        let me_member = a.me_member;
        drop(a);
        match self.pinned_key(id) {
            Some(k) => Lookup::Key(k),
            None if me_member && self.pins_required() => Lookup::Unknown,
            None => Lookup::Unbound,
        }
    }
}

enum Lookup {
    Key([u8; PUBLIC_LEN]),
    /// A member the log holds no key for and nothing is pinned for, pins required: refused.
    Unknown,
    /// Nothing decides the id's key yet: held from its first handshake.
    Unbound,
    Joining,
}

fn unknown(id: u64) -> Refused {
    Refused::new("peer_key_unknown", format!("member {id} has no key in the log yet and none is pinned for it (halite_cluster_pin_founders: a founder's cluster_pki_dir/peers/<name>.pub): not admitted"))
}

fn mismatch(id: u64) -> Refused {
    Refused::new("peer_key_mismatch", format!("a peer claims member {id} but signs with another key than the one member {id} is bound to"))
}
