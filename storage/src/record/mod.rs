//! The record kinds, one file each: the kind's payload struct, the types and bounds only
//! it uses, and its own rules ([`Payload`]). A payload's bytes are its struct's serde
//! derive: a msgpack map of the named fields (rmp-serde, `write_named`), byte strings as
//! msgpack `bin` (`serde_bytes`); an optional field is left out of the map when it has
//! its default. The frame around a payload (magic, version, kind byte, length, CRC), the
//! kind table and the [`Record`](crate::format::Record) enum that dispatches to these
//! files are [`crate::format`]. `docs/formats.md` §1 documents every field.
//!
//! | kind | name               | file                  |
//! |------|--------------------|-----------------------|
//! | 1    | `key_set`          | [`key_set`]           |
//! | 2    | `job_published`    | [`job_published`]     |
//! | 3    | `job_return`       | [`job_return`]        |
//! | 4    | `grains_report`    | [`grains_report`]     |
//! | 5    | `roots_blob`       | [`roots_blob`]        |
//! | 6    | `roots_tombstone`  | [`roots_tombstone`]   |
//! | 7    | `aes_key_rotation` | [`aes_key_rotation`]  |
//! | 8    | `import_marker`    | [`import_marker`]     |
//! | 9    | `jobs_expired`     | [`jobs_expired`]      |
//! | 10   | `cluster_key_pair` | [`cluster_key_pair`]  |
//! | 11   | `master_key_pair`  | [`master_key_pair`]   |
//! | 12   | `roots_stage`      | [`roots_stage`]       |
//! | 13   | `roots_sync`       | [`roots_sync`]        |
//! | 14   | `pillar_cache`     | [`pillar_cache`]      |
//! | 15   | `member_key`       | [`member_key`]        |
//! | 16   | `mine_update`      | [`mine_update`]       |
//! | 17   | `reaction`         | [`reaction`]          |
//! | 18   | `eauth_token`      | [`eauth_token`]       |
//! | 19   | `batch_run`        | [`batch_run`]         |
//! | 20   | `file_recv`        | [`file_recv`]         |
//!
//! [`roots_commit`] is a part of kind 13: the commits a gitfs update's `roots_sync` names.
//!
//! A new kind is a new file here with its struct and `impl Payload`, its line in each
//! table and match of [`crate::format`] (`RecordKind`, its `ALL` and names, the `Record`
//! enum, its `kind`, `payload` and `decode_payload`), and a row in `docs/formats.md` §1.

pub mod aes_key_rotation;
pub mod batch_run;
pub mod cluster_key_pair;
pub mod eauth_token;
pub mod file_recv;
pub mod grains_report;
pub mod import_marker;
pub mod job_published;
pub mod job_return;
pub mod jobs_expired;
pub mod key_set;
pub mod master_key_pair;
pub mod member_key;
pub mod member_release;
pub mod mine_update;
pub mod pillar_cache;
pub mod reaction;
pub mod roots_blob;
pub mod roots_commit;
pub mod roots_stage;
pub mod roots_sync;
pub mod roots_tombstone;

use crate::error::{Error, Result};

/// What each kind's payload gives the record format.
pub(crate) trait Payload {
    /// The record's own rules (valid ids, safe paths, bounds), checked before encoding
    /// and after decoding.
    fn check(&self) -> Result<()>;

    /// Bytes of the payload's large fields: where the encoder's buffer starts (a
    /// capacity, never a bound). Kinds without large fields keep the default.
    fn len_hint(&self) -> usize {
        0
    }
}

/// The longest jid accepted (Salt jids are 20 digits; custom jids are short strings).
pub const MAX_JID_LEN: usize = 128;

/// A jid as records carry it: 1 to [`MAX_JID_LEN`] bytes, no path separator or NUL,
/// not `.` or `..` (a jid names a directory of the job cache).
pub(crate) fn check_jid(jid: &str) -> Result<()> {
    if jid.is_empty() || jid.len() > MAX_JID_LEN || jid.contains(['/', '\\', '\0']) || jid == "." || jid == ".." {
        return Err(Error::Invalid(format!("jid {:?} refused", jid.escape_debug().to_string())));
    }
    Ok(())
}

/// A private key as the key pair kinds carry it: PEM text of at most 16 KiB.
pub(crate) fn check_private_pem(what: &str, pem: &[u8]) -> Result<()> {
    if pem.is_empty() || pem.len() > 16 << 10 || !pem.starts_with(b"-----BEGIN") {
        return Err(Error::Invalid(format!("{what}: not a PEM private key of at most 16 KiB")));
    }
    Ok(())
}
