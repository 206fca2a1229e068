//! The bounds on what one update reads from the remotes: every byte of a remote is
//! hostile, so each object's size is read from its header before it is inflated, and
//! the files and bytes of one update are counted against a budget.

/// Largest file (blob) served.
pub const MAX_FILE_BYTES: u64 = 32 << 20;
/// Largest commit, tag or tree object read.
pub const MAX_META_BYTES: u64 = 8 << 20;
/// Most distinct file contents (bytes) one update holds, over every remote and saltenv.
pub const MAX_TOTAL_BYTES: u64 = 512 << 20;
/// Most files one update serves, over every remote and saltenv.
pub const MAX_FILES: u64 = 200_000;
/// Deepest directory level read.
pub const MAX_DEPTH: usize = 64;
/// Most refs (branches and tags) read from one remote.
pub const MAX_REFS: usize = 10_000;
/// Longest chain of annotated tags followed to a commit.
pub const MAX_TAG_CHAIN: usize = 8;

/// What one update has used of its bounds.
#[derive(Debug, Default)]
pub struct Budget {
    pub files: u64,
    pub bytes: u64,
}

impl Budget {
    /// Counts one more file entry.
    pub fn file(&mut self) -> Result<(), super::GitfsError> {
        self.files += 1;
        if self.files > MAX_FILES {
            return Err(super::GitfsError::TooLarge { what: "the files of this update".into(), limit: format!("{MAX_FILES} files") });
        }
        Ok(())
    }

    /// Counts the bytes of one more distinct content.
    pub fn content(&mut self, len: u64) -> Result<(), super::GitfsError> {
        self.bytes += len;
        if self.bytes > MAX_TOTAL_BYTES {
            return Err(super::GitfsError::TooLarge { what: "the contents of this update".into(), limit: format!("{MAX_TOTAL_BYTES} bytes") });
        }
        Ok(())
    }
}
