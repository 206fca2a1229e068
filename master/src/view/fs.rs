//! The view's sources on the master's own disk: the roots trees (`file_roots`,
//! `pillar_roots`) and Salt's autosign inputs. Read-only.
//!
//! Roots: each directory of a saltenv is tried in the configured order; the first that
//! holds a regular file at the path wins. Symlinks are followed (Salt's
//! `fileserver_followsymlinks`) only when their target stays inside that directory.
//! Walks are bounded in depth and do not enter symlinked directories.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use halite_storage::format::RootsTree;

use super::{Autosign, FileRef, Listing, RootsSource, Stat};
use crate::config::MasterConfig;

/// Files the roots materialiser is still writing (never served or listed).
const MATERIALISER_TMP: &str = ".halite-tmp-";
/// Deepest directory level a walk enters.
const MAX_DEPTH: usize = 64;

/// The roots trees a config names.
pub struct FsRoots {
    file: std::collections::BTreeMap<String, Vec<PathBuf>>,
    pillar: std::collections::BTreeMap<String, Vec<PathBuf>>,
}

impl FsRoots {
    pub fn new(cfg: &MasterConfig) -> Self {
        FsRoots { file: cfg.file_roots.clone(), pillar: cfg.pillar_roots.clone() }
    }

    /// The directories of a saltenv (none when it is not configured or not a valid name).
    fn dirs(&self, tree: RootsTree, saltenv: &str) -> &[PathBuf] {
        if halite_storage::id::validate_saltenv(saltenv).is_err() {
            return &[];
        }
        let m = match tree {
            RootsTree::File => &self.file,
            RootsTree::Pillar => &self.pillar,
            RootsTree::Gitfs | RootsTree::GitPillar => return &[],
        };
        m.get(saltenv).map(Vec::as_slice).unwrap_or(&[])
    }
}

impl RootsSource for FsRoots {
    fn find(&self, tree: RootsTree, saltenv: &str, rel: &str) -> Option<FileRef> {
        for root in self.dirs(tree, saltenv) {
            let Ok(root_canon) = root.canonicalize() else { continue };
            let cand = root.join(rel);
            let Ok(canon) = cand.canonicalize() else { continue };
            if !canon.starts_with(&root_canon) {
                tracing::warn!(path = %rel, "roots: refusing a path that resolves outside its root");
                continue;
            }
            if canon.is_file() {
                return Some(FileRef { path: cand.to_string_lossy().into_owned(), rel: rel.to_string() });
            }
        }
        None
    }

    fn read(&self, _tree: RootsTree, file: &FileRef, offset: u64, max: u64) -> Option<Vec<u8>> {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = std::fs::File::open(&file.path).ok()?;
        let mut buf = Vec::new();
        f.seek(SeekFrom::Start(offset)).ok()?;
        f.take(max).read_to_end(&mut buf).ok()?;
        Some(buf)
    }

    fn stat(&self, _tree: RootsTree, file: &FileRef) -> Option<Stat> {
        let m = std::fs::metadata(&file.path).ok()?;
        Some([m.mode() as i64, m.ino() as i64, m.dev() as i64, m.nlink() as i64, m.uid() as i64, m.gid() as i64, m.size() as i64, m.atime(), m.mtime(), m.ctime()])
    }

    fn list(&self, tree: RootsTree, saltenv: &str) -> Listing {
        let mut out = Listing::default();
        for root in self.dirs(tree, saltenv) {
            walk(root, "", 0, &mut out);
        }
        out
    }

    /// The configured saltenvs (Salt's `roots` backend lists `file_roots`' keys).
    fn envs(&self, tree: RootsTree) -> std::collections::BTreeSet<String> {
        match tree {
            RootsTree::File => self.file.keys().cloned().collect(),
            RootsTree::Pillar => self.pillar.keys().cloned().collect(),
            RootsTree::Gitfs | RootsTree::GitPillar => Default::default(),
        }
    }
}

fn walk(root: &Path, rel: &str, depth: usize, out: &mut Listing) {
    if depth > MAX_DEPTH {
        return;
    }
    let dir = if rel.is_empty() { root.to_path_buf() } else { root.join(rel) };
    let Ok(rd) = std::fs::read_dir(&dir) else { return };
    let mut empty = true;
    for ent in rd.flatten() {
        empty = false;
        let Ok(name) = ent.file_name().into_string() else { continue };
        if name.starts_with(MATERIALISER_TMP) {
            continue;
        }
        let r = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
        let Ok(meta) = std::fs::symlink_metadata(ent.path()) else { continue };
        if meta.file_type().is_symlink() {
            if let Ok(t) = std::fs::read_link(ent.path()) {
                out.links.insert(r.clone(), t.to_string_lossy().into_owned());
            }
            // A link to a file inside the root is served as a file.
            if let (Ok(c), Ok(rc)) = (ent.path().canonicalize(), root.canonicalize()) {
                if c.starts_with(&rc) && c.is_file() {
                    out.files.insert(r);
                }
            }
        } else if meta.is_dir() {
            out.dirs.insert(r.clone());
            walk(root, &r, depth + 1, out);
        } else if meta.is_file() {
            out.files.insert(r);
        }
    }
    if empty && !rel.is_empty() {
        out.empty_dirs.insert(rel.to_string());
    }
}

/// Salt's autosign inputs on disk: `autosign_file`, `autoreject_file`,
/// `autosign_grains_dir/<grain>` and the one-shot stubs in `<pki>/minions_autosign/`.
pub struct FsAutosign {
    file: Option<PathBuf>,
    reject: Option<PathBuf>,
    grains_dir: Option<PathBuf>,
    stubs: PathBuf,
}

/// The directory of one-shot autosign stubs under a keys directory.
pub fn stub_dir(keys_dir: &Path) -> PathBuf {
    keys_dir.join("minions_autosign")
}

impl FsAutosign {
    pub fn new(cfg: &MasterConfig) -> Self {
        FsAutosign {
            file: cfg.autosign_file.clone(),
            reject: cfg.autoreject_file.clone(),
            grains_dir: cfg.autosign_grains_dir.clone(),
            stubs: stub_dir(cfg.keys_dir()),
        }
    }

    pub fn text(&self, which: Autosign) -> Option<String> {
        let path = match which {
            Autosign::File => self.file.clone()?,
            Autosign::Reject => self.reject.clone()?,
            Autosign::Grain(name) => {
                // A grain name is a file name inside the directory, nothing else.
                halite_storage::id::validate_minion_id(name).ok()?;
                self.grains_dir.as_ref()?.join(name)
            }
        };
        trusted_text(&path)
    }

    pub fn stub(&self, id: &str) -> bool {
        if halite_storage::id::validate_minion_id(id).is_err() {
            return false;
        }
        std::fs::symlink_metadata(self.stubs.join(id)).is_ok_and(|m| m.is_file())
    }
}

/// A file's text unless it is writable by group or others (Salt ignores those).
pub fn trusted_text(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).ok()?;
    if meta.permissions().mode() & 0o022 != 0 {
        tracing::warn!(file = %path.display(), "ignoring an autosign/autoreject file writable by group or others");
        return None;
    }
    std::fs::read_to_string(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(root: &Path) -> MasterConfig {
        let mut c = MasterConfig::under(root);
        c.file_roots = [("base".to_string(), vec![root.join("a"), root.join("b")])].into_iter().collect();
        c
    }

    #[test]
    fn roots_resolution_order_and_escapes() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        for p in ["a/web", "b", "outside", "a/empty"] {
            std::fs::create_dir_all(r.join(p)).unwrap();
        }
        std::fs::write(r.join("a/top.sls"), "base: {}\n").unwrap();
        std::fs::write(r.join("b/top.sls"), "shadowed\n").unwrap();
        std::fs::write(r.join("b/only_b.sls"), "b\n").unwrap();
        std::fs::write(r.join("a/web/init.sls"), "x").unwrap();
        std::fs::write(r.join("outside/secret"), "secret").unwrap();
        std::os::unix::fs::symlink(r.join("outside/secret"), r.join("a/leak")).unwrap();
        std::os::unix::fs::symlink(r.join("a/top.sls"), r.join("a/alias.sls")).unwrap();
        let roots = FsRoots::new(&cfg(r));
        let f = RootsTree::File;
        assert_eq!(roots.find(f, "base", "top.sls").unwrap().path, r.join("a/top.sls").to_string_lossy());
        assert_eq!(roots.find(f, "base", "only_b.sls").unwrap().path, r.join("b/only_b.sls").to_string_lossy());
        assert!(roots.find(f, "base", "alias.sls").is_some(), "a link inside the root is served");
        assert!(roots.find(f, "base", "leak").is_none(), "a link leaving the root is not");
        assert!(roots.find(f, "..", "top.sls").is_none());
        assert!(roots.find(f, "dev", "top.sls").is_none());
        let web = roots.find(f, "base", "web/init.sls").unwrap();
        assert_eq!(roots.read(f, &web, 0, 10).unwrap(), b"x");
        assert_eq!(roots.read(f, &web, 1, 10).unwrap(), b"");
        assert_eq!(roots.stat(f, &web).unwrap()[6], 1, "size");
        let l = roots.list(f, "base");
        assert!(l.files.contains("top.sls") && l.files.contains("only_b.sls") && l.files.contains("web/init.sls"));
        assert!(!l.files.contains("leak"));
        assert!(l.empty_dirs.contains("empty"));
        assert!(l.links.contains_key("leak"));
    }

    #[test]
    fn autosign_inputs_are_trusted_only_when_not_writable_by_others() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let mut c = MasterConfig::under(d.path());
        let f = d.path().join("autosign.conf");
        std::fs::write(&f, "web*\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        c.autosign_file = Some(f.clone());
        c.autosign_grains_dir = Some(d.path().join("grains"));
        std::fs::create_dir_all(d.path().join("grains")).unwrap();
        std::fs::write(d.path().join("grains/uuid"), "1234\n").unwrap();
        std::fs::set_permissions(d.path().join("grains/uuid"), std::fs::Permissions::from_mode(0o600)).unwrap();
        let a = FsAutosign::new(&c);
        assert_eq!(a.text(Autosign::File).as_deref(), Some("web*\n"));
        assert_eq!(a.text(Autosign::Reject), None, "not configured");
        assert_eq!(a.text(Autosign::Grain("uuid")).as_deref(), Some("1234\n"));
        assert_eq!(a.text(Autosign::Grain("../uuid")), None, "a grain name cannot leave the directory");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(a.text(Autosign::File), None, "a world-writable file is ignored");
        let stubs = stub_dir(c.keys_dir());
        std::fs::create_dir_all(&stubs).unwrap();
        std::fs::write(stubs.join("m1"), "").unwrap();
        assert!(a.stub("m1") && !a.stub("m2") && !a.stub("../m1"));
    }
}
