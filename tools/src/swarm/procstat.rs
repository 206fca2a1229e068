//! CPU time and memory of a process and all its descendants, from `/proc`.
//!
//! The reference master is a tree of about fourteen processes (publisher, request
//! router, workers, maintenance...), Halite is one; summing over the tree measures both
//! the same way. CPU time is `utime + stime` (clock ticks, 10 ms resolution), memory is
//! the sum of `VmRSS` and of `Pss` (`smaps_rollup`), which counts shared pages once.

use std::collections::HashMap;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TreeStats {
    pub processes: usize,
    pub cpu_seconds: f64,
    pub rss_kib: u64,
    pub pss_kib: u64,
}

/// `(ppid, utime + stime)` from `/proc/<pid>/stat`. The command name is in parentheses
/// and may hold spaces or parentheses itself, so fields are counted from the last `)`.
fn stat(pid: u32) -> Option<(u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the comm: state(0) ppid(1) ... utime(11) stime(12).
    let ppid = f.get(1)?.parse().ok()?;
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some((ppid, ticks))
}

fn kib_field(path: &str, name: &str) -> u64 {
    let Ok(text) = std::fs::read_to_string(path) else { return 0 };
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `pid` and its live descendants.
pub fn tree(pid: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            if let Some((ppid, _)) = stat(p) {
                children.entry(ppid).or_default().push(p);
            }
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        if let Some(c) = children.get(&out[i]) {
            out.extend(c);
        }
        i += 1;
    }
    out
}

/// CPU and memory of `pid`'s process tree now. A process that exits while being read
/// contributes what could be read.
pub fn tree_stats(pid: u32) -> TreeStats {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut s = TreeStats::default();
    for p in tree(pid) {
        let Some((_, ticks)) = stat(p) else { continue };
        s.processes += 1;
        s.cpu_seconds += ticks as f64 / hz;
        s.rss_kib += kib_field(&format!("/proc/{p}/status"), "VmRSS:");
        s.pss_kib += kib_field(&format!("/proc/{p}/smaps_rollup"), "Pss:");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_measured() {
        let s = tree_stats(std::process::id());
        assert!(s.processes >= 1);
        assert!(s.rss_kib > 0 && s.pss_kib > 0, "{s:?}");
    }

    #[test]
    fn children_are_part_of_the_tree() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let t = tree(std::process::id());
        let found = t.contains(&child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(found, "{t:?}");
    }
}
