//! What serving files through gitfs costs against `roots` alone (`halite-bench
//! gitfs-serve`): the same tree of files is put in a `file_roots` directory and committed
//! to a git repository (with the `git` binary: the bench's own fixture; the master never
//! runs it), the repository is read by a gitfs update and applied to a state machine on
//! disk, as a master does, and the file server's two operations are timed on each
//! source the minion request handlers read (`halite_master::req::files`):
//!
//! - list: a saltenv's whole file list (`_file_list`, `cp.list_master`), lists a second;
//! - fetch: find a path and read the whole file (`_serve_file` of a small file,
//!   `_file_hash`), files a second over every file in a shuffled order.
//!
//! Sources: `roots` (the directory), `gitfs` (the applied tree), and `roots,gitfs` with
//! the files only in gitfs (`fileserver_backend: [roots, gitfs]`, every lookup missing
//! in `file_roots` first). Each figure is the median of `rounds`, with the spread.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use halite_master::gitfs::serve::GitfsRoots;
use halite_master::gitfs::GitfsConfig;
use halite_master::view::chained::Chained;
use halite_master::view::fs::FsRoots;
use halite_master::view::RootsSource;
use halite_master::MasterConfig;
use halite_storage::format::{Record, RootsTree};
use halite_storage::state::StateMachine;

const TREE: RootsTree = RootsTree::File;
/// How long one list measurement runs.
const LIST_FOR: Duration = Duration::from_secs(2);

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git").arg("-C").arg(dir).args(["-c", "user.name=bench", "-c", "user.email=bench@example.com", "-c", "commit.gpgsign=false"]).args(args).output().expect("git (the bench's fixture needs the git binary)");
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// `files` paths in 100 folders, `size` bytes each, unlike one another.
fn tree(files: usize, size: usize) -> Vec<(String, Vec<u8>)> {
    (0..files)
        .map(|i| {
            let mut body = format!("# file {i}\n").into_bytes();
            let mut x = i as u64 * 2_654_435_761 + 1;
            while body.len() < size {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                body.push(b'a' + (x % 26) as u8);
            }
            body.truncate(size);
            (format!("d{:02}/f{i:05}.sls", i % 100), body)
        })
        .collect()
}

fn write(dir: &Path, files: &[(String, Vec<u8>)]) {
    for (p, body) in files {
        let at = dir.join(p);
        std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
        std::fs::write(at, body).expect("write");
    }
}

/// A small deterministic shuffle of `0..n` (xorshift; the order is the same each round).
fn order(n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

/// Lists a second and files fetched a second (with bytes a second) on one source.
fn measure(src: &dyn RootsSource, paths: &[String], want: usize) -> (f64, f64, f64) {
    let started = Instant::now();
    let mut lists = 0u64;
    while started.elapsed() < LIST_FOR {
        let l = src.list(TREE, "base");
        assert_eq!(l.files.len(), want, "the listing holds every file");
        lists += 1;
    }
    let list_rate = lists as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut bytes = 0u64;
    for i in order(paths.len()) {
        let f = src.find(TREE, "base", &paths[i]).expect("found");
        bytes += src.read_all(TREE, &f).expect("read").len() as u64;
    }
    let secs = started.elapsed().as_secs_f64();
    (list_rate, paths.len() as f64 / secs, bytes as f64 / secs / (1 << 20) as f64)
}

fn median_spread(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v[v.len() / 2];
    format!("{m:.0} ({:.0}–{:.0})", v[0], v[v.len() - 1])
}

pub fn run(files: usize, size: usize, rounds: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let content = tree(files, size);
    write(&root.join("srv/salt"), &content);
    std::fs::create_dir_all(root.join("srv/empty")).expect("mkdir");
    let repo = root.join("repo");
    write(&repo, &content);
    git(&repo, &["init", "-q", "-b", "master"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "tree"]);

    let conf = |name: &str, roots: &str| {
        let d = root.join(name);
        std::fs::create_dir_all(&d).expect("conf dir");
        std::fs::write(d.join("master"), format!("root_dir: {0}\nfile_roots:\n  base:\n    - {0}/srv/{roots}\ngitfs_remotes:\n  - file://{0}/repo\n", root.display())).expect("conf");
        MasterConfig::load(&d).expect("config")
    };
    let with_files = conf("conf-roots", "salt");
    let without = conf("conf-empty", "empty");

    // The gitfs update a master runs: read the repository, plan, apply.
    let sm = Arc::new(StateMachine::open(&root.join("state")).expect("state"));
    let g = GitfsConfig::from_raw(&with_files.raw);
    let started = Instant::now();
    let fetched = halite_master::gitfs::fetch::fetch_all(&g);
    let read_secs = started.elapsed().as_secs_f64();
    let plan = halite_master::gitfs::plan::plan(&g, &fetched, &[]);
    assert!(plan.failed.is_empty(), "the repository is read");
    let mut records = plan.records.clone();
    records.push(Record::RootsSync(plan.commit.clone()));
    let n = records.len();
    let entries: Vec<(u64, Record)> = records.into_iter().enumerate().map(|(i, r)| (i as u64 + 1, r)).collect();
    let started = Instant::now();
    sm.apply(&entries).expect("apply");
    let apply_secs = started.elapsed().as_secs_f64();
    println!("{files} files of {size} bytes: gitfs read {read_secs:.3} s, {n} records applied in {apply_secs:.3} s");

    let roots = FsRoots::new(&with_files);
    let empty = FsRoots::new(&without);
    let gitfs = GitfsRoots::new(sm.clone(), g.remotes.iter().map(|r| r.key.clone()).collect());
    let both = Chained(vec![&empty, &gitfs]);
    let paths: Vec<String> = content.iter().map(|(p, _)| p.clone()).collect();
    let sources: [(&str, &dyn RootsSource); 3] = [("roots", &roots), ("gitfs", &gitfs), ("roots,gitfs (files in gitfs)", &both)];
    println!("| source | lists/s | files fetched/s | MiB/s |");
    println!("|---|---|---|---|");
    for (name, src) in sources {
        let (mut l, mut f, mut b) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (lr, fr, br) = measure(src, &paths, files);
            l.push(lr);
            f.push(fr);
            b.push(br);
        }
        println!("| {name} | {} | {} | {} |", median_spread(l), median_spread(f), median_spread(b));
    }
}
