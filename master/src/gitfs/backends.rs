//! `fileserver_backend`: which file server backends serve, in order. The first backend
//! that holds a path serves it (Salt's `Fileserver.find_file`); lists and saltenvs are
//! the union of the backends'.

/// A file server backend Halite implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `file_roots` on disk.
    Roots,
    /// The gitfs tree of the applied state.
    Gitfs,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Roots => "roots",
            Backend::Gitfs => "gitfs",
        }
    }
}

/// The backends `fileserver_backend` lists (Salt's default: `[roots]`), in order; names
/// Halite does not implement are left out (the warning at start names them). Salt's
/// spellings are read: a list or a comma-separated string, `git` for `gitfs`, and a
/// leading `-` that removes a backend from the full list.
pub fn backends(raw: &serde_yaml::Mapping) -> Vec<Backend> {
    let names: Vec<String> = match raw.get("fileserver_backend") {
        None | Some(serde_yaml::Value::Null) => return vec![Backend::Roots],
        Some(serde_yaml::Value::String(s)) => s.split(',').map(|s| s.trim().to_string()).collect(),
        Some(serde_yaml::Value::Sequence(v)) => v.iter().filter_map(|e| e.as_str().map(str::to_string)).collect(),
        Some(_) => return vec![Backend::Roots],
    };
    let of = |n: &str| match n.trim_end_matches("fs") {
        "roots" => Some(Backend::Roots),
        "git" => Some(Backend::Gitfs),
        _ => None,
    };
    if !names.is_empty() && names.iter().all(|n| n.starts_with('-')) {
        let removed: Vec<Backend> = names.iter().filter_map(|n| of(&n[1..])).collect();
        return [Backend::Roots, Backend::Gitfs].into_iter().filter(|b| !removed.contains(b)).collect();
    }
    let mut out = Vec::new();
    for n in &names {
        if let Some(b) = of(n) {
            if !out.contains(&b) {
                out.push(b);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(yaml: &str) -> Vec<Backend> {
        backends(&serde_yaml::from_str(yaml).unwrap())
    }

    #[test]
    fn order_and_spellings() {
        assert_eq!(of("{}"), [Backend::Roots]);
        assert_eq!(of("fileserver_backend: [gitfs, roots]"), [Backend::Gitfs, Backend::Roots]);
        assert_eq!(of("fileserver_backend: roots,git"), [Backend::Roots, Backend::Gitfs]);
        assert_eq!(of("fileserver_backend: [git, hgfs]"), [Backend::Gitfs], "an unimplemented backend is left out");
        assert_eq!(of("fileserver_backend: ['-roots']"), [Backend::Gitfs]);
    }
}
