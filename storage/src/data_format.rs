//! The data directory's format stamp: `<halite_data_dir>/FORMAT`.
//!
//! One line, ASCII: `halite-data-format N\n`, where `N` (decimal) names the layout of
//! everything in the directory (`docs/formats.md` §1–§5: the log's entries and
//! records, the state machine's column families and keys, the snapshots). A release that
//! changes any of them in a way an older build cannot read raises [`CURRENT`].
//!
//! Whoever holds the directory's lock ([`crate::dirlock`]) checks the stamp before it
//! opens anything else ([`check`]):
//!
//! - **no stamp, empty directory**: a new directory; the stamp is written (temp file,
//!   fsync, rename, fsync of the directory).
//! - **no stamp, a log present**: a directory written by a build that kept no stamp; its
//!   layout is format 1, which this build reads: the stamp is written.
//! - **`N` = [`CURRENT`]**: opened.
//! - **`N` > [`CURRENT`]**: refused. A newer release wrote it, and this build would
//!   misread what it does not know; the error names both formats and the way out
//!   (run the newer release, or restore the older data).
//! - **`N` < [`CURRENT`]**: migrated by the steps this build knows, each named in the log,
//!   then stamped `CURRENT`; a format no step starts from is refused. Format 1 is the
//!   oldest: no step exists yet.
//! - **anything else** (not that line, over [`MAX_STAMP_BYTES`]): refused as damaged;
//!   nothing is overwritten.
//!
//! The fixture `testdata/formats/1/` is a data directory written by a real master of
//! format 1; the end-to-end test `formats::` opens it with every build.

use std::fs;
use std::io::{Read, Write};
use std::path::Path;

use crate::error::{Error, IoContext, Result};

/// The stamp's file name inside the data directory.
pub const FILE: &str = "FORMAT";

/// The data format this build writes.
pub const CURRENT: u32 = 1;

/// The most bytes of a stamp read; a longer file is damaged.
pub const MAX_STAMP_BYTES: u64 = 64;

const PREFIX: &str = "halite-data-format ";

/// What [`check`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// A stamp of [`CURRENT`].
    Current,
    /// No stamp: one was written (an empty directory, or one holding format 1).
    Stamped,
}

/// The stamp's bytes for format `n`.
pub fn line(n: u32) -> String {
    format!("{PREFIX}{n}\n")
}

/// Parses a stamp's bytes: the format it names.
pub fn parse(bytes: &[u8]) -> Result<u32> {
    let damaged = |why: &str| Error::Invalid(format!("{FILE} is damaged ({why}): expected one line `{PREFIX}N`"));
    let text = std::str::from_utf8(bytes).map_err(|_| damaged("not text"))?;
    let rest = text.strip_prefix(PREFIX).ok_or_else(|| damaged("wrong start"))?;
    let digits = rest.strip_suffix('\n').unwrap_or(rest);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 9 {
        return Err(damaged("not a format number"));
    }
    digits.parse().map_err(|_| damaged("not a format number"))
}

/// Checks (or writes) the stamp of the data directory `dir`, which the caller holds.
pub fn check(dir: &Path) -> Result<Found> {
    let path = dir.join(FILE);
    let mut held = Vec::new();
    match fs::File::open(&path) {
        Ok(f) => {
            f.take(MAX_STAMP_BYTES + 1).read_to_end(&mut held).ctx(|| format!("reading {}", path.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            write(dir)?;
            return Ok(Found::Stamped);
        }
        Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
    }
    if held.len() as u64 > MAX_STAMP_BYTES {
        return Err(Error::Invalid(format!("{} is damaged: more than {MAX_STAMP_BYTES} bytes", path.display())));
    }
    let n = parse(&held).map_err(|e| Error::Invalid(format!("{}: {e}", dir.display())))?;
    match n {
        n if n == CURRENT => Ok(Found::Current),
        n if n > CURRENT => Err(Error::Invalid(format!(
            "{} holds data format {n}, written by a newer Halite; this build reads format {CURRENT}: run the release that wrote it (or a newer one), or restore data written by this release",
            dir.display()
        ))),
        n => Err(Error::Invalid(format!("{} holds data format {n}; this build reads format {CURRENT} and knows no migration from {n}", dir.display()))),
    }
}

/// Writes the stamp of [`CURRENT`] into `dir`: a temp file, fsynced, renamed into place,
/// then the directory fsynced.
fn write(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!("{FILE}.tmp"));
    let mut f = fs::File::create(&tmp).ctx(|| format!("creating {}", tmp.display()))?;
    f.write_all(line(CURRENT).as_bytes()).ctx(|| format!("writing {}", tmp.display()))?;
    f.sync_all().ctx(|| format!("syncing {}", tmp.display()))?;
    drop(f);
    fs::rename(&tmp, dir.join(FILE)).ctx(|| format!("renaming {} into place", tmp.display()))?;
    fs::File::open(dir).and_then(|d| d.sync_all()).ctx(|| format!("syncing {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_directory_is_stamped_and_then_opens() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(check(d.path()).unwrap(), Found::Stamped);
        assert_eq!(fs::read_to_string(d.path().join(FILE)).unwrap(), "halite-data-format 1\n");
        assert_eq!(check(d.path()).unwrap(), Found::Current);
    }

    #[test]
    fn a_newer_format_is_refused_and_left_as_it_is() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join(FILE), line(CURRENT + 1)).unwrap();
        let e = check(d.path()).unwrap_err().to_string();
        assert!(e.contains("data format 2") && e.contains("newer Halite") && e.contains("reads format 1"), "{e}");
        assert_eq!(fs::read_to_string(d.path().join(FILE)).unwrap(), line(CURRENT + 1));
    }

    #[test]
    fn an_older_format_without_a_migration_is_refused() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join(FILE), line(0)).unwrap();
        let e = check(d.path()).unwrap_err().to_string();
        assert!(e.contains("no migration from 0"), "{e}");
    }

    #[test]
    fn damaged_stamps_are_refused_and_not_overwritten() {
        for bad in [&b""[..], b"halite-data-format \n", b"halite-data-format 1x\n", b"halite-data-format -1\n", b"format 1\n", b"halite-data-format 99999999999\n", &[0xff, 0xfe][..], &[b'9'; 100][..]] {
            let d = tempfile::tempdir().unwrap();
            fs::write(d.path().join(FILE), bad).unwrap();
            assert!(check(d.path()).is_err(), "{:?}", String::from_utf8_lossy(bad));
            assert_eq!(fs::read(d.path().join(FILE)).unwrap(), bad);
        }
    }

    #[test]
    fn a_stamp_without_its_newline_reads() {
        assert_eq!(parse(b"halite-data-format 1").unwrap(), 1);
    }
}
