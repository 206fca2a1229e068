//! The record format: the bytes of one state change, as stored in each raft entry.
//!
//! Every state change Halite knows is one [`Record`]. A record is framed so that it can be
//! checked on its own, whoever hands it to us (the local log, a peer, a dump file):
//!
//! ```text
//! offset  size  field
//!      0     2  magic, the ASCII bytes "HL" (0x48 0x4C)
//!      2     1  format version, currently 1
//!      3     1  kind (see RecordKind: 1 key set ... 13 roots sync, 16 mine update, 17 reaction, 18 eauth token, 19 batch run, 20 file recv)
//!      4     4  payload length N, u32 little-endian, at most MAX_PAYLOAD_LEN
//!      8     4  CRC-32 (IEEE, as crc32fast computes it) of bytes 0..8 and the payload
//!     12     N  payload: a msgpack map with the kind's named fields (rmp-serde)
//! ```
//!
//! Each kind's payload struct and its own rules are a file of [`crate::record`] (named
//! as the kind, e.g. `record/key_set.rs`), re-exported here; field names are the msgpack
//! map keys. Byte strings (public keys, return loads, file contents) are msgpack `bin`.
//! This file keeps the frame, the kind table and the [`Record`] enum. A decoder
//! checks, in this order: enough bytes for the header, the magic, the version, the kind,
//! the length bound, the CRC, the payload schema, then the record's own rules (valid
//! minion ids, safe relative paths, chunk numbering). Any failure is an
//! [`Error::BadRecord`] naming the byte offset of the field that failed; decoding never
//! panics, whatever the input (a property test feeds it random and mutated bytes).
//!
//! `docs/formats.md` §1 repeats this table and every kind's fields, next to the
//! raft-engine and view layouts. The tests are in `format_tests.rs`.

use serde::{Deserialize, Serialize};
#[cfg(test)] // format_tests.rs builds an import marker's counts
use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::record::Payload;
pub use crate::record::aes_key_rotation::AesKeyRotation;
pub use crate::record::batch_run::BatchRun;
pub use crate::record::cluster_key_pair::ClusterKeyPair;
pub use crate::record::eauth_token::EauthToken;
pub use crate::record::file_recv::FileRecv;
pub use crate::record::grains_report::{GrainsReport, MAX_GRAINS_LEN};
pub use crate::record::import_marker::{ImportMarker, ImportPhase};
pub use crate::record::job_published::JobPublished;
pub use crate::record::job_return::JobReturn;
pub use crate::record::jobs_expired::JobsExpired;
pub use crate::record::key_set::{KeyExpect, KeySet, KeyState};
pub use crate::record::master_key_pair::MasterKeyPair;
pub use crate::record::member_key::{MemberKey, MEMBER_KEY_LEN};
pub use crate::record::member_release::{MemberRelease, MAX_RELEASE_LEN, RELEASE};
pub use crate::record::mine_update::{MineEntry, MineOp, MineUpdate, MAX_MINE_BYTES, MAX_MINE_FUNS, MAX_MINE_FUN_LEN};
pub use crate::record::pillar_cache::{PillarCache, MAX_PILLAR_CACHE_LEN};
pub use crate::record::reaction::Reaction;
pub use crate::record::roots_blob::{RootsBlob, RootsTree, ROOTS_CHUNK_LEN};
pub use crate::record::roots_stage::{RootsStage, SYNC_ID_LEN};
pub use crate::record::roots_sync::{RootsSync, RootsSyncFile};
pub use crate::record::roots_tombstone::RootsTombstone;
pub use crate::record::MAX_JID_LEN;

/// The two magic bytes at the start of every record.
pub const MAGIC: [u8; 2] = *b"HL";
/// The only format version this build writes and reads.
pub const VERSION: u8 = 1;
/// The record set this build reads and writes: every kind of [`RecordKind`] with its
/// rules. A release that adds a kind, or changes what a kind does at apply, raises it
/// and gives the kind that number in [`RecordKind::since`]; a cluster writes such a kind
/// only once every member has recorded a record set at least as high
/// (`record/member_release.rs`).
pub const RECORD_SET: u32 = 1;
/// Length of the fixed header before the payload.
pub const HEADER_LEN: usize = 12;
/// Upper bound of a payload. Larger roots files are split into chunks of
/// [`ROOTS_CHUNK_LEN`] bytes, so only a pathological job return could reach it.
pub const MAX_PAYLOAD_LEN: usize = 64 << 20;

/// The kind byte of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(u8)]
pub enum RecordKind {
    KeySet = 1,
    JobPublished = 2,
    JobReturn = 3,
    GrainsReport = 4,
    RootsBlob = 5,
    RootsTombstone = 6,
    AesKeyRotation = 7,
    ImportMarker = 8,
    JobsExpired = 9,
    ClusterKeyPair = 10,
    MasterKeyPair = 11,
    RootsStage = 12,
    RootsSync = 13,
    PillarCache = 14,
    MemberKey = 15,
    MineUpdate = 16,
    Reaction = 17,
    EauthToken = 18,
    BatchRun = 19,
    FileRecv = 20,
    MemberRelease = 21,
}

impl RecordKind {
    pub const ALL: [RecordKind; 21] = [
        RecordKind::KeySet,
        RecordKind::JobPublished,
        RecordKind::JobReturn,
        RecordKind::GrainsReport,
        RecordKind::RootsBlob,
        RecordKind::RootsTombstone,
        RecordKind::AesKeyRotation,
        RecordKind::ImportMarker,
        RecordKind::JobsExpired,
        RecordKind::ClusterKeyPair,
        RecordKind::MasterKeyPair,
        RecordKind::RootsStage,
        RecordKind::RootsSync,
        RecordKind::PillarCache,
        RecordKind::MemberKey,
        RecordKind::MineUpdate,
        RecordKind::Reaction,
        RecordKind::EauthToken,
        RecordKind::BatchRun,
        RecordKind::FileRecv,
        RecordKind::MemberRelease,
    ];

    pub fn from_u8(b: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|k| *k as u8 == b)
    }

    /// The record set ([`RECORD_SET`]) that brought this kind, or the rules it applies
    /// by: a cluster writes it only once its members' lowest record set reaches this.
    pub fn since(self) -> u32 {
        match self {
            RecordKind::KeySet
            | RecordKind::JobPublished
            | RecordKind::JobReturn
            | RecordKind::GrainsReport
            | RecordKind::RootsBlob
            | RecordKind::RootsTombstone
            | RecordKind::AesKeyRotation
            | RecordKind::ImportMarker
            | RecordKind::JobsExpired
            | RecordKind::ClusterKeyPair
            | RecordKind::MasterKeyPair
            | RecordKind::RootsStage
            | RecordKind::RootsSync
            | RecordKind::PillarCache
            | RecordKind::MemberKey
            | RecordKind::MineUpdate
            | RecordKind::Reaction
            | RecordKind::EauthToken
            | RecordKind::BatchRun
            | RecordKind::FileRecv
            | RecordKind::MemberRelease => 1,
        }
    }

    /// The name used by `halite-ctl dump --kind`.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::KeySet => "key_set",
            RecordKind::JobPublished => "job_published",
            RecordKind::JobReturn => "job_return",
            RecordKind::GrainsReport => "grains_report",
            RecordKind::RootsBlob => "roots_blob",
            RecordKind::RootsTombstone => "roots_tombstone",
            RecordKind::AesKeyRotation => "aes_key_rotation",
            RecordKind::ImportMarker => "import_marker",
            RecordKind::JobsExpired => "jobs_expired",
            RecordKind::ClusterKeyPair => "cluster_key_pair",
            RecordKind::MasterKeyPair => "master_key_pair",
            RecordKind::RootsStage => "roots_stage",
            RecordKind::RootsSync => "roots_sync",
            RecordKind::PillarCache => "pillar_cache",
            RecordKind::MemberKey => "member_key",
            RecordKind::MineUpdate => "mine_update",
            RecordKind::Reaction => "reaction",
            RecordKind::EauthToken => "eauth_token",
            RecordKind::BatchRun => "batch_run",
            RecordKind::FileRecv => "file_recv",
            RecordKind::MemberRelease => "member_release",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// One state change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Record {
    KeySet(KeySet),
    JobPublished(JobPublished),
    JobReturn(JobReturn),
    GrainsReport(GrainsReport),
    RootsBlob(RootsBlob),
    RootsTombstone(RootsTombstone),
    AesKeyRotation(AesKeyRotation),
    ImportMarker(ImportMarker),
    JobsExpired(JobsExpired),
    ClusterKeyPair(ClusterKeyPair),
    MasterKeyPair(MasterKeyPair),
    RootsStage(RootsStage),
    RootsSync(RootsSync),
    PillarCache(PillarCache),
    MemberKey(MemberKey),
    MineUpdate(MineUpdate),
    Reaction(Reaction),
    EauthToken(EauthToken),
    BatchRun(BatchRun),
    FileRecv(FileRecv),
    MemberRelease(MemberRelease),
}

impl Record {
    pub fn kind(&self) -> RecordKind {
        match self {
            Record::KeySet(_) => RecordKind::KeySet,
            Record::JobPublished(_) => RecordKind::JobPublished,
            Record::JobReturn(_) => RecordKind::JobReturn,
            Record::GrainsReport(_) => RecordKind::GrainsReport,
            Record::RootsBlob(_) => RecordKind::RootsBlob,
            Record::RootsTombstone(_) => RecordKind::RootsTombstone,
            Record::AesKeyRotation(_) => RecordKind::AesKeyRotation,
            Record::ImportMarker(_) => RecordKind::ImportMarker,
            Record::JobsExpired(_) => RecordKind::JobsExpired,
            Record::ClusterKeyPair(_) => RecordKind::ClusterKeyPair,
            Record::MasterKeyPair(_) => RecordKind::MasterKeyPair,
            Record::RootsStage(_) => RecordKind::RootsStage,
            Record::RootsSync(_) => RecordKind::RootsSync,
            Record::PillarCache(_) => RecordKind::PillarCache,
            Record::MemberKey(_) => RecordKind::MemberKey,
            Record::MineUpdate(_) => RecordKind::MineUpdate,
            Record::Reaction(_) => RecordKind::Reaction,
            Record::EauthToken(_) => RecordKind::EauthToken,
            Record::BatchRun(_) => RecordKind::BatchRun,
            Record::FileRecv(_) => RecordKind::FileRecv,
            Record::MemberRelease(_) => RecordKind::MemberRelease,
        }
    }

    /// The record's own rules, checked before encoding and after decoding.
    pub fn validate(&self) -> Result<()> {
        self.payload().check()
    }

    /// About how many bytes the record's payload encodes to: its large fields' lengths
    /// plus room for the field names and small values. Only a capacity to start the
    /// output with (a return of a few hundred bytes then takes one allocation, not the
    /// five or six of a buffer that doubles from nothing); never a bound.
    pub fn payload_len_hint(&self) -> usize {
        const SMALL: usize = 128;
        SMALL + self.payload().len_hint()
    }

    /// The record's payload, as its kind's file defines it.
    fn payload(&self) -> &dyn Payload {
        match self {
            Record::KeySet(p) => p,
            Record::JobPublished(p) => p,
            Record::JobReturn(p) => p,
            Record::GrainsReport(p) => p,
            Record::RootsBlob(p) => p,
            Record::RootsTombstone(p) => p,
            Record::AesKeyRotation(p) => p,
            Record::ImportMarker(p) => p,
            Record::JobsExpired(p) => p,
            Record::ClusterKeyPair(p) => p,
            Record::MasterKeyPair(p) => p,
            Record::RootsStage(p) => p,
            Record::RootsSync(p) => p,
            Record::PillarCache(p) => p,
            Record::MemberKey(p) => p,
            Record::MineUpdate(p) => p,
            Record::Reaction(p) => p,
            Record::EauthToken(p) => p,
            Record::BatchRun(p) => p,
            Record::FileRecv(p) => p,
            Record::MemberRelease(p) => p,
        }
    }

    /// Encodes the record into its framed bytes. Fails only if the record breaks its own
    /// rules or is larger than [`MAX_PAYLOAD_LEN`].
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut out = Vec::with_capacity(HEADER_LEN + self.payload_len_hint().min(MAX_PAYLOAD_LEN));
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(self.kind() as u8);
        out.extend_from_slice(&[0; 8]);
        rmp_serde::encode::write_named(&mut out, self)
            .map_err(|e| Error::Invalid(format!("cannot encode {} record: {e}", self.kind().name())))?;
        let len = out.len() - HEADER_LEN;
        if len > MAX_PAYLOAD_LEN {
            return Err(Error::Invalid(format!("{} record of {len} bytes exceeds the {MAX_PAYLOAD_LEN}-byte limit", self.kind().name())));
        }
        out[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        let crc = frame_crc(&out[..8], &out[HEADER_LEN..]);
        out[8..12].copy_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Decodes one framed record that must span `buf` exactly.
    pub fn decode(buf: &[u8]) -> Result<Record> {
        let (rec, used) = Self::decode_prefix(buf)?;
        if used != buf.len() {
            return Err(bad(used, format!("{} trailing bytes after the record", buf.len() - used)));
        }
        Ok(rec)
    }

    /// Decodes the record at the start of `buf`; returns it and the bytes it used.
    pub fn decode_prefix(buf: &[u8]) -> Result<(Record, usize)> {
        let header = read_header(buf)?;
        let payload = &buf[HEADER_LEN..HEADER_LEN + header.len];
        let rec = decode_payload(header.kind, payload)?;
        rec.validate().map_err(|e| bad(HEADER_LEN, e.to_string()))?;
        Ok((rec, HEADER_LEN + header.len))
    }
}

/// The checked fixed header of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: RecordKind,
    pub len: usize,
}

/// Reads and checks the header and CRC of the record at the start of `buf`, without
/// decoding the payload (what `verify` and `dump --kind` need).
pub fn read_header(buf: &[u8]) -> Result<Header> {
    if buf.len() < HEADER_LEN {
        return Err(bad(0, format!("{} bytes, shorter than the {HEADER_LEN}-byte header", buf.len())));
    }
    if buf[0..2] != MAGIC {
        return Err(bad(0, format!("magic {:02x}{:02x}, expected 484c (\"HL\")", buf[0], buf[1])));
    }
    if buf[2] != VERSION {
        let newer = if buf[2] > VERSION { ": a record of a newer Halite; run a release that knows it (docs/operations.md, \"Upgrading a cluster\")" } else { "" };
        return Err(bad(2, format!("unknown format version {} (this build reads version {VERSION}){newer}", buf[2])));
    }
    let kind = RecordKind::from_u8(buf[3]).ok_or_else(|| {
        let newest = RecordKind::ALL.iter().map(|k| *k as u8).max().unwrap_or(0);
        let newer = if buf[3] > newest { ": a record of a newer Halite; run a release that knows it (docs/operations.md, \"Upgrading a cluster\")" } else { "" };
        bad(3, format!("unknown record kind {} (this build knows kinds up to {newest}){newer}", buf[3]))
    })?;
    let len = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
    if len > MAX_PAYLOAD_LEN {
        return Err(bad(4, format!("payload length {len} exceeds the {MAX_PAYLOAD_LEN}-byte limit")));
    }
    if buf.len() - HEADER_LEN < len {
        return Err(bad(4, format!("payload length {len} but only {} bytes follow the header", buf.len() - HEADER_LEN)));
    }
    let stored = u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]);
    let actual = frame_crc(&buf[..8], &buf[HEADER_LEN..HEADER_LEN + len]);
    if stored != actual {
        return Err(bad(8, format!("checksum mismatch: stored {stored:08x}, computed {actual:08x}")));
    }
    Ok(Header { kind, len })
}

fn frame_crc(header8: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(header8);
    h.update(payload);
    h.finalize()
}

fn bad(offset: usize, why: impl Into<String>) -> Error {
    Error::BadRecord { offset: offset as u64, why: why.into() }
}

/// The payload of a record of `kind` (its schema; its rules are checked after).
fn decode_payload(kind: RecordKind, payload: &[u8]) -> Result<Record> {
    fn de<'a, T: Deserialize<'a>>(p: &'a [u8]) -> Result<T> {
        rmp_serde::from_slice(p).map_err(|e| bad(HEADER_LEN, format!("payload does not match its kind: {e}")))
    }
    Ok(match kind {
        RecordKind::KeySet => Record::KeySet(de(payload)?),
        RecordKind::JobPublished => Record::JobPublished(de(payload)?),
        RecordKind::JobReturn => Record::JobReturn(de(payload)?),
        RecordKind::GrainsReport => Record::GrainsReport(de(payload)?),
        RecordKind::RootsBlob => Record::RootsBlob(de(payload)?),
        RecordKind::RootsTombstone => Record::RootsTombstone(de(payload)?),
        RecordKind::AesKeyRotation => Record::AesKeyRotation(de(payload)?),
        RecordKind::ImportMarker => Record::ImportMarker(de(payload)?),
        RecordKind::JobsExpired => Record::JobsExpired(de(payload)?),
        RecordKind::ClusterKeyPair => Record::ClusterKeyPair(de(payload)?),
        RecordKind::MasterKeyPair => Record::MasterKeyPair(de(payload)?),
        RecordKind::RootsStage => Record::RootsStage(de(payload)?),
        RecordKind::RootsSync => Record::RootsSync(de(payload)?),
        RecordKind::PillarCache => Record::PillarCache(de(payload)?),
        RecordKind::MemberKey => Record::MemberKey(de(payload)?),
        RecordKind::MineUpdate => Record::MineUpdate(de(payload)?),
        RecordKind::Reaction => Record::Reaction(de(payload)?),
        RecordKind::EauthToken => Record::EauthToken(de(payload)?),
        RecordKind::BatchRun => Record::BatchRun(de(payload)?),
        RecordKind::FileRecv => Record::FileRecv(de(payload)?),
        RecordKind::MemberRelease => Record::MemberRelease(de(payload)?),
    })
}

/// Nanoseconds since the Unix epoch, the timestamp records carry.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
#[path = "format_tests.rs"]
pub(crate) mod tests;
