//! The manifest: what a snapshot holds (`manifest.json` in its directory, and the first
//! thing a receiver gets).
//!
//! ```json
//! {"format": "halite.snapshot.v1", "index": 812, "term": 3,
//!  "conf_state": {"voters": [1, 2, 3], "learners": [], "voters_outgoing": [],
//!                 "learners_next": [], "auto_leave": false},
//!  "members": "<hex of the membership entries>",
//!  "files": [{"path": "state/000012.sst", "size": 1048576, "sha256": "<64 hex>"}, ...],
//!  "created_ns": 1763900000000000000}
//! ```
//!
//! A manifest from outside is hostile until [`Manifest::decode`] has checked it: its own
//! size, the format, the counts (files, members, conf state ids), each path (confined to
//! `state/<name>`, see [`check_path`]), each sha256, and the total size against the
//! receiver's bound, all before any file is created or any buffer sized from it.

use std::collections::HashSet;

use raft::eraftpb::{ConfState, Entry, SnapshotMetadata};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::log::{decode_members, encode_members, MAX_MEMBER_ENTRIES};

/// The `format` string of this version.
pub const FORMAT: &str = "halite.snapshot.v1";
/// Largest manifest accepted (bytes of JSON).
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;
/// Most files a snapshot may list.
pub const MAX_FILES: usize = 100_000;
/// Most ids in each list of a conf state.
const MAX_CONF_IDS: usize = 1024;
/// Longest file name inside `state/`.
const MAX_NAME: usize = 128;

/// raft's `ConfState`, as JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfStateJson {
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    #[serde(default)]
    pub voters_outgoing: Vec<u64>,
    #[serde(default)]
    pub learners_next: Vec<u64>,
    #[serde(default)]
    pub auto_leave: bool,
}

impl From<&ConfState> for ConfStateJson {
    fn from(c: &ConfState) -> Self {
        ConfStateJson {
            voters: c.voters.clone(),
            learners: c.learners.clone(),
            voters_outgoing: c.voters_outgoing.clone(),
            learners_next: c.learners_next.clone(),
            auto_leave: c.auto_leave,
        }
    }
}

impl ConfStateJson {
    pub fn to_raft(&self) -> ConfState {
        ConfState {
            voters: self.voters.clone(),
            learners: self.learners.clone(),
            voters_outgoing: self.voters_outgoing.clone(),
            learners_next: self.learners_next.clone(),
            auto_leave: self.auto_leave,
            ..Default::default()
        }
    }
}

/// One file of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Relative to the snapshot directory: `state/<name>`.
    pub path: String,
    pub size: u64,
    /// Lower-case hex.
    pub sha256: String,
}

/// A snapshot's description (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    /// The applied index the state machine in `state/` holds.
    pub index: u64,
    /// The term of the entry at `index`.
    pub term: u64,
    pub conf_state: ConfStateJson,
    /// The membership entries (u32 BE length + protobuf `Entry`, each), hex.
    #[serde(default)]
    pub members: String,
    pub files: Vec<FileEntry>,
    #[serde(default)]
    pub created_ns: u64,
}

/// Checks a path from a manifest: exactly `state/<name>`, the name 1–128 bytes of
/// `[A-Za-z0-9._-]`, not `.` or `..`. Nothing else can be written by a receiver.
pub fn check_path(path: &str) -> Result<&str> {
    let refuse = |why: &str| Error::SnapshotRefused(format!("manifest path {path:?}: {why}"));
    let name = path.strip_prefix("state/").ok_or_else(|| refuse("not under state/"))?;
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(refuse("name empty or too long"));
    }
    if name == "." || name == ".." {
        return Err(refuse("not a file name"));
    }
    if !name.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-')) {
        return Err(refuse("name has characters outside [A-Za-z0-9._-]"));
    }
    Ok(name)
}

impl Manifest {
    pub fn new(index: u64, term: u64, conf_state: &ConfState, members: &[Entry], files: Vec<FileEntry>) -> Self {
        Manifest {
            format: FORMAT.to_string(),
            index,
            term,
            conf_state: conf_state.into(),
            members: hex::encode(encode_members(members)),
            files,
            created_ns: crate::format::now_ns(),
        }
    }

    /// The manifest's bytes (pretty JSON, readable by an operator).
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).unwrap_or_default()
    }

    /// Parses and checks a manifest (see the module docs); `max_total` bounds the sum of
    /// the file sizes.
    pub fn decode(b: &[u8], max_total: u64) -> Result<Manifest> {
        let refuse = |why: String| Error::SnapshotRefused(format!("manifest: {why}"));
        if b.len() > MAX_MANIFEST_BYTES {
            return Err(refuse(format!("{} bytes, over the {MAX_MANIFEST_BYTES}-byte bound", b.len())));
        }
        let m: Manifest = serde_json::from_slice(b).map_err(|e| refuse(format!("not a manifest: {e}")))?;
        if m.format != FORMAT {
            return Err(refuse(format!("format {:?}, expected {FORMAT:?}", m.format)));
        }
        if m.index == 0 {
            return Err(refuse("index 0".into()));
        }
        let c = &m.conf_state;
        if [&c.voters, &c.learners, &c.voters_outgoing, &c.learners_next].iter().any(|l| l.len() > MAX_CONF_IDS) {
            return Err(refuse(format!("a conf state list longer than {MAX_CONF_IDS}")));
        }
        if c.voters.is_empty() {
            return Err(refuse("no voters".into()));
        }
        if m.files.is_empty() || m.files.len() > MAX_FILES {
            return Err(refuse(format!("{} files, expected 1..={MAX_FILES}", m.files.len())));
        }
        let mut total: u64 = 0;
        let mut seen = HashSet::with_capacity(m.files.len());
        for f in &m.files {
            check_path(&f.path)?;
            if !seen.insert(f.path.as_str()) {
                return Err(refuse(format!("{:?} listed twice", f.path)));
            }
            if f.sha256.len() != 64 || !f.sha256.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
                return Err(refuse(format!("{:?}: sha256 is not 64 lower-case hex digits", f.path)));
            }
            total = total.checked_add(f.size).filter(|t| *t <= max_total).ok_or_else(|| refuse(format!("files add up to more than the {max_total}-byte bound")))?;
        }
        let members = m.members().map_err(|e| refuse(e.to_string()))?;
        if members.len() > MAX_MEMBER_ENTRIES {
            return Err(refuse("too many membership entries".into()));
        }
        Ok(m)
    }

    /// Sum of the file sizes.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).fold(0u64, |a, b| a.saturating_add(b))
    }

    /// The membership entries it carries.
    pub fn members(&self) -> Result<Vec<Entry>> {
        let b = hex::decode(&self.members).map_err(|e| Error::Invalid(format!("membership entries are not hex: {e}")))?;
        decode_members(&b)
    }

    /// raft-rs's metadata of this snapshot.
    pub fn metadata(&self) -> SnapshotMetadata {
        let mut meta = SnapshotMetadata { index: self.index, term: self.term, ..Default::default() };
        meta.set_conf_state(self.conf_state.to_raft());
        meta
    }
}
